"""``prepare`` with recall, MiniLM fp32 (the default) against ``minilm-int8``, in one process.

Two databases, each holding one model's vectors (a database records the model it was embedded
with): ``benchmarks.prepare --embedder minilm-int8 --data-dir DIR`` builds the int8 one, and the
default run's folder (``/tmp/stratamem-bench-prepare``) is the fp32 one. Each holds the same
benchmark user and its cards. New sessions of 100, 1,000 and 10,000 messages are built in both;
each turn asks both (the order alternates turn by turn, so both see the same machine), then
records the reply in both. No worker runs beside (``benchmarks.prepare --no-worker``).

Run from the repository root, after both ``benchmarks.prepare`` runs:
``python -m benchmarks.prepare_int8 --fp32 /tmp/stratamem-bench-prepare --int8 DIR``.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from pathlib import Path

from benchmarks.machine import CpuSteal, machine_state
from benchmarks.prepare import SIZES, SYSTEM, USER, build_sessions, percentile, record_session
from benchmarks.scripted_turns import scripted_history, turn_messages
from memory import Memory, Settings

SETTINGS = {
    "model": "gpt-4o-mini",
    "context_window": "8192",
    "max_output": "1024",
    "summary": {"mode": "background", "debounce_seconds": 0},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fp32", type=Path, required=True, help="a database embedded with minilm")
    parser.add_argument("--int8", type=Path, required=True, help="one embedded with minilm-int8")
    parser.add_argument("--turns", type=int, default=50)
    args = parser.parse_args()
    memories = {"fp32": _open(args.fp32, "minilm"), "int8": _open(args.int8, "minilm-int8")}
    try:
        sessions = {name: _sessions(memory) for name, memory in memories.items()}
        print(f"start: {machine_state()}", flush=True)
        steal = CpuSteal()
        print("messages   fp32 p50     p95  int8 p50     p95  int8/fp32")
        for size in SIZES:
            walls: dict[str, list[float]] = {name: [] for name in memories}
            for turn in range(args.turns):
                user, *rest = turn_messages(10_000 + turn)
                order = list(memories) if turn % 2 == 0 else list(memories)[::-1]
                for name in order:
                    started = time.perf_counter()
                    context = memories[name].prepare(
                        user_id=USER,
                        session_id=sessions[name][size],
                        input=str(user["content"]),
                        system=SYSTEM,
                    )
                    walls[name].append((time.perf_counter() - started) * 1000)
                    recall = context.report.recall
                    assert recall is not None and not recall.failed, f"{name}: recall failed"
                for name, memory in memories.items():
                    memory.record(user_id=USER, session_id=sessions[name][size], messages=rest)
            fp32, int8 = walls["fp32"], walls["int8"]
            print(
                f"{size:>9,} {statistics.median(fp32):9.2f} {percentile(fp32, 0.95):7.2f} "
                f"{statistics.median(int8):9.2f} {percentile(int8, 0.95):7.2f} "
                f"{statistics.median(int8) / statistics.median(fp32):10.2f}",
                flush=True,
            )
        print(f"end: {machine_state(steal)}", flush=True)
    finally:
        for memory in memories.values():
            memory.close()


def _open(folder: Path, embedder: str) -> Memory:
    return Memory.open(data_dir=folder, **SETTINGS, cards={"embedder": embedder})


def _sessions(memory: Memory) -> dict[int, str]:
    """New sessions of every size (built without cards), and 20 warm turns in another."""
    no_cards = {**SETTINGS, "summary": {"mode": "inline"}, "cards": {"enabled": False}}
    sessions = build_sessions(Memory(memory.database, Settings(**no_cards)), SIZES)
    warm = f"warm-{uuid.uuid4().hex[:8]}"
    record_session(memory, warm, scripted_history(100))
    for turn in range(20):
        user, *rest = turn_messages(turn)
        memory.prepare(user_id=USER, session_id=warm, input=str(user["content"]), system=SYSTEM)
        memory.record(user_id=USER, session_id=warm, messages=rest)
    return sessions


if __name__ == "__main__":
    main()

"""Latency of ``Memory.prepare`` as a session grows: 100, 1,000 and 10,000 stored messages.

Each turn is ``prepare`` (user input stored, window loaded, context assembled; no LLM) followed
by ``record`` of the assistant's reply, on the embedded Postgres. As in production, a worker
process (``stratamem worker``) consolidates the summary (offline, as raw archives) while the
turns run, so each session is in its steady state; it shares the machine's two cores.

Run from the repository root: ``python -m benchmarks.prepare`` (or ``scripts/bench`` for all).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from memory import Memory

SIZES = (100, 1_000, 10_000)


def turn_messages(turn: int) -> list[dict[str, object]]:
    """One scripted turn: a question, sometimes a tool exchange, and an answer."""
    messages: list[dict[str, object]] = [
        {"role": "user", "content": f"Turn {turn}: what changed in deploy {turn} of checkout?"}
    ]
    if turn % 4 == 0:
        call = f"call_{turn}"
        messages += [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call,
                        "type": "function",
                        "function": {"name": "get_deploy", "arguments": f'{{"id": {turn}}}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call, "content": f"deploy {turn}: 3 files " * 8},
        ]
    messages.append(
        {"role": "assistant", "content": f"Deploy {turn} changed the retry policy and timeouts."}
    )
    return messages


def build_session(mem: Memory, user_id: str, session_id: str, size: int) -> None:
    """Store about ``size`` messages in batches, then consolidate to the steady state."""
    batch: list[dict[str, object]] = []
    turn = 0
    while size > 0:
        messages = turn_messages(turn)[: max(size, 0)]
        if messages[-1]["role"] == "assistant" and "tool_calls" in messages[-1]:
            messages = messages[:-1]
        batch += messages
        size -= len(messages)
        turn += 1
        if len(batch) >= 500 or size <= 0:
            mem.record(user_id=user_id, session_id=session_id, messages=batch)
            batch = []
    while mem.consolidate(user_id=user_id, session_id=session_id) is not None:
        pass


def measure(mem: Memory, size: int, turns: int) -> list[float]:
    """Milliseconds of ``prepare`` for each of ``turns`` turns on a session of ``size``."""
    user_id, session_id = "bench", f"s{size}-{uuid.uuid4().hex[:8]}"
    build_session(mem, user_id, session_id, size)
    timings: list[float] = []
    for turn in range(turns):
        user, *rest = turn_messages(10_000 + turn)
        start = time.perf_counter()
        mem.prepare(user_id=user_id, session_id=session_id, input=str(user["content"]))
        timings.append((time.perf_counter() - start) * 1000)
        mem.record(user_id=user_id, session_id=session_id, messages=rest)
    return timings


def percentile(values: list[float], share: float) -> float:
    """The value below which ``share`` of ``values`` lie."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--context-window", type=int, default=8_192)
    args = parser.parse_args()
    settings = {
        "model": "gpt-4o-mini",
        "context_window": str(args.context_window),
        "max_output": "1024",
        "summary": {"mode": "background", "debounce_seconds": 0},
    }
    with tempfile.TemporaryDirectory() as folder:
        mem = Memory.open(data_dir=Path(folder), **settings)
        worker = subprocess.Popen(
            [sys.executable, "-m", "memory.cli", "worker"],
            stdout=subprocess.DEVNULL,
            env={
                **os.environ,
                "STRATAMEM_DATABASE_URL": mem.database_url,
                **{f"STRATAMEM_{name.upper()}": value for name, value in settings.items()},
            },
        )
        with mem:
            measure(mem, 100, 20)  # warm up: tokenizer, connections, caches
            p50s: dict[int, float] = {}
            print(f"prepare latency, {args.turns} turns each, window {args.context_window}")
            print(f"{'messages':>9} {'p50 ms':>8} {'p95 ms':>8}")
            for size in SIZES:
                timings = measure(mem, size, args.turns)
                p50s[size] = statistics.median(timings)
                print(f"{size:>9} {p50s[size]:>8.2f} {percentile(timings, 0.95):>8.2f}")
            print(f"p50 ratio 10,000/100: {p50s[10_000] / p50s[100]:.2f}")
        worker.terminate()
        worker.wait()


if __name__ == "__main__":
    main()

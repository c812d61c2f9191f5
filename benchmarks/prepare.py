"""Latency of ``Memory.prepare`` with recall as a session grows, beside LangChain and mem0.

    python -m benchmarks.prepare [--turns 50] [--sizes 100,1000,10000] [--cards 10000]
                                 [--data-dir DIR] [--mem0-venv DIR | --no-mem0] [--no-worker]
                                 [--embedder minilm|minilm-int8]

One user with at least ``--cards`` cards (long-term memory on, the user's defaults: MiniLM on
ONNX Runtime, k = 4) and three sessions of 100, 1,000 and 10,000 stored messages. The cards
come from earlier sessions recorded and ended (every message a turn card, rules extracting a
few more), made once and kept in ``--data-dir`` (default ``/tmp/stratamem-bench-prepare``):
later runs reuse them. The sessions are new in each run: stored and consolidated with long-term
memory off (not embedded again), their folded part marked archived. Each timed turn is
``prepare`` (input stored, window loaded, the query rewritten and embedded, the cards searched,
the context assembled; no LLM) followed by ``record`` of the assistant's reply, on the embedded
Postgres; as in production, a worker process (``stratamem worker``) consolidates the summary
and archives what the turns fold as cards (offline) while they run, so each session is in its
steady state; it shares the machine's two cores (at ``jobs.worker_niceness``, as
``stratamem worker`` runs by default). ``--no-worker`` leaves it out: the turns' folds and cards
wait in the queue, and ``prepare`` has the machine to itself.

Beside it, in the same process on the same Postgres and the same history
(``benchmarks/prepare_peers.py``): LangChain's turn with memory (``PostgresChatMessageHistory``
+ ``trim_messages`` + ``PGVector.similarity_search`` over the same cards' texts and vectors,
MiniLM on torch), and, in a virtual environment of its own run as a subprocess afterwards,
mem0's ``search`` (offline: MiniLM, pgvector on the same server, each message added with
``infer=False``) for a user with as many memories as the session has messages. The ratios are
the peer's p50 over stratamem's (above 1: stratamem is faster). The load average and the CPU
steal (``benchmarks/machine.py``) are printed with the numbers.

Run from the repository root (``scripts/bench`` runs it too); needs the ``bench`` extra
(``source scripts/venv.sh dev,bench``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy import text

from benchmarks.machine import CpuSteal, machine_state
from benchmarks.scripted_turns import scripted_history, turn_messages
from memory import Memory, Settings
from memory.context.tokens import TiktokenCounter
from retrieval import (
    MINILM_DIMENSION,
    MINILM_INT8_NAME,
    MINILM_NAME,
    SentenceTransformerEmbedder,
)
from storage import ArchiveMarks, CardStore

SIZES = (100, 1_000, 10_000)
USER = "bench"
SYSTEM = "You are a helpful assistant for the checkout team."


def record_session(mem: Memory, session_id: str, messages: list[dict[str, object]]) -> None:
    """Store ``messages`` in batches of 500, then consolidate to the steady state."""
    for start in range(0, len(messages), 500):
        mem.record(user_id=USER, session_id=session_id, messages=messages[start : start + 500])
    while mem.consolidate(user_id=USER, session_id=session_id) is not None:
        pass


def build_sessions(history: Memory, sizes: tuple[int, ...]) -> dict[int, str]:
    """The measured sessions by size, stored and consolidated, their folded part archived.

    ``history`` has long-term memory off, so storing 11,100 messages does not embed them; the
    archive mark is then moved to each summary's boundary, as if their cards had been made
    (the user's cards are ``build_cards``'), so the worker archives only what the timed turns
    fold, as in a session's steady state.
    """
    marks = ArchiveMarks(history.database)
    sessions = {}
    for size in sizes:
        session_id = sessions[size] = f"s{size}-{uuid.uuid4().hex[:8]}"
        record_session(history, session_id, scripted_history(size))
        summary = history.summary(user_id=USER, session_id=session_id)
        if summary is not None:
            stored = history.history(user_id=USER, session_id=session_id)
            [boundary] = [m for m in stored if m.seq == summary.boundary_seq]
            marks.advance(USER, session_id, boundary)
    return sessions


def build_cards(mem: Memory, cards: int) -> int:
    """Record and end earlier sessions of the user until they have ``cards`` cards (every
    message becomes a turn card; rules extract a few more). Kept in the data folder."""
    int8 = mem.settings.cards.embedder == "minilm-int8"
    model = MINILM_INT8_NAME if int8 else MINILM_NAME
    store = CardStore(mem.database, model=model, dimension=MINILM_DIMENSION)
    earlier = 0
    while store.count(USER) < cards:
        session_id = f"earlier-{earlier}"
        if not mem.history(user_id=USER, session_id=session_id):
            first = 100_000 + 1_000 * earlier
            messages = scripted_history(400, first)
            mem.record(user_id=USER, session_id=session_id, messages=messages)
            mem.end_session(user_id=USER, session_id=session_id)
        earlier += 1
    return store.count(USER)


@dataclass
class Sample:
    """One runtime's timed ``prepare`` calls: wall and calling-thread CPU ms, memories."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    recalled: list[int] = field(default_factory=list)


def measure(mems: dict[str, Memory], session_id: str, turns: int) -> dict[str, Sample]:
    """``prepare`` (recall on) for ``turns`` turns of the session with each ``Memory``.

    The memories take turns call by call (same session, same machine moment): with
    ``--torch-too`` one embeds with ONNX Runtime (the default), the other with torch. The CPU
    is this thread's (Python and the driver, not the server nor the query's embedding, which
    runs on a thread of its own).
    """
    samples = {name: Sample() for name in mems}
    for turn in range(turns):
        for name, mem in mems.items():
            user, *rest = turn_messages(10_000 + turn)
            start, start_cpu = time.perf_counter(), time.thread_time()
            context = mem.prepare(
                user_id=USER, session_id=session_id, input=str(user["content"]), system=SYSTEM
            )
            samples[name].wall.append((time.perf_counter() - start) * 1000)
            samples[name].cpu.append((time.thread_time() - start_cpu) * 1000)
            recall = context.report.recall
            assert recall is not None and not recall.failed, "recall failed"
            samples[name].recalled.append(len(recall.cards))
            mem.record(user_id=USER, session_id=session_id, messages=rest)
    return samples


def user_cards(mem: Memory) -> tuple[list[str], list[list[float]]]:
    """The user's current cards' texts and vectors, for LangChain's vector store."""
    with mem.database.reading() as connection:
        rows = connection.execute(
            text(
                "SELECT text, embedding::text AS vector FROM cards "
                "WHERE user_id = :u AND valid_to IS NULL ORDER BY id"
            ),
            {"u": USER},
        ).all()
    return [r.text for r in rows], [json.loads(r.vector) for r in rows]


def mem0_messages(size: int) -> list[dict[str, str]]:
    """The session's ``size`` messages as mem0 takes them: a role and a text each."""
    return [
        {
            "role": "user" if m["role"] == "user" else "assistant",
            "content": str(m["content"] or json.dumps(m.get("tool_calls"))),
        }
        for m in scripted_history(size)
    ]


def percentile(values: list[float], share: float) -> float:
    """The value below which ``share`` of ``values`` lie."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def env_value(value: object) -> str:
    """A setting as an environment variable: nested settings as JSON (pydantic-settings)."""
    return value if isinstance(value, str) else json.dumps(value)


def libpq_url(url: str) -> str:
    """A SQLAlchemy ``postgresql+psycopg://`` URL as the plain URL psycopg connects with."""
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--context-window", type=int, default=8_192)
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--cards", type=int, default=10_000, help="the user's cards, at least")
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path("/tmp/stratamem-bench-prepare"),
        help="the database folder, kept: later runs reuse the user's cards (and mem0's)",
    )
    parser.add_argument("--mem0-venv", type=Path, default=Path("/tmp/stratamem-mem0"))
    parser.add_argument("--no-mem0", action="store_true", help="leave mem0 out")
    parser.add_argument(
        "--no-worker", action="store_true", help="no worker process beside the timed turns"
    )
    parser.add_argument(
        "--torch-too",
        action="store_true",
        help="also time prepare with MiniLM on torch, turn by turn with the default's",
    )
    parser.add_argument(
        "--embedder",
        choices=("minilm", "minilm-int8"),
        default="minilm",
        help="cards.embedder; a data dir holds one model's vectors: give minilm-int8 its own "
        "--data-dir (LangChain's query stays fp32 torch: its row is timing only then)",
    )
    parser.add_argument(
        "--mem0-sizes", help="the sizes mem0 is measured at (default: --sizes); its adds are slow"
    )
    args = parser.parse_args()
    sizes = tuple(int(size) for size in args.sizes.split(","))
    mem0_sizes = [int(size) for size in (args.mem0_sizes or args.sizes).split(",")]
    settings: dict[str, Any] = {
        "model": "gpt-4o-mini",
        "context_window": str(args.context_window),
        "max_output": "1024",
        "summary": {"mode": "background", "debounce_seconds": 0},
        "cards": {"embedder": args.embedder},
    }
    with tempfile.TemporaryDirectory() as folder:
        mem = Memory.open(data_dir=args.data_dir, **settings)
        with mem:
            started = time.perf_counter()
            # Built inline (what leaves the window is archived now), measured in background.
            inline = {**settings, "summary": {"mode": "inline"}}
            cards = build_cards(Memory(mem.database, Settings(**inline)), args.cards)
            no_cards = {**inline, "cards": {**settings["cards"], "enabled": False}}
            sessions = build_sessions(Memory(mem.database, Settings(**no_cards)), sizes)
            print(
                f"built: {cards} cards for the user, sessions of {', '.join(map(str, sizes))}"
                f" messages, in {time.perf_counter() - started:.0f} s; {machine_state()}",
                flush=True,
            )
            worker = None
            if not args.no_worker:
                worker = subprocess.Popen(
                    [sys.executable, "-m", "memory.cli", "worker"],
                    stdout=subprocess.DEVNULL,
                    env={
                        **os.environ,
                        "STRATAMEM_DATABASE_URL": mem.database_url,
                        **{
                            f"STRATAMEM_{name.upper()}": env_value(value)
                            for name, value in settings.items()
                        },
                    },
                )
            try:
                with psycopg.connect(libpq_url(mem.database_url)) as conn:
                    rows = run(mem, conn, sessions, cards, args)
            finally:
                if worker is not None:
                    # Before the database stops, so the worker does not report it gone.
                    worker.terminate()
                    worker.wait()
            from benchmarks.prepare_peers import Mem0

            peer = Mem0(args.mem0_venv)
            found: dict[int, dict[str, float]] = {}
            if args.no_mem0:
                peer.missing = "left out (--no-mem0)"
            elif peer.install():
                steal = CpuSteal()
                print(f"mem0 {machine_state()} at the start", flush=True)
                found = peer.measure(
                    libpq_url(mem.database_url),
                    {size: mem0_messages(size) for size in mem0_sizes},
                    [str(turn_messages(10_000 + t)[0]["content"]) for t in range(args.turns)],
                    args.turns,
                    Path(folder) / "mem0-work.json",
                )
                print(f"mem0 {machine_state(steal)} (its run) at the end", flush=True)
    print_table(rows, found, peer.missing)


def run(
    mem: Memory,
    conn: psycopg.Connection[Any],
    sessions: dict[int, str],
    cards: int,
    args: argparse.Namespace,
) -> dict[int, dict[str, float]]:
    """Warm up, then time stratamem and LangChain at every size; print each row as it comes."""
    counter = TiktokenCounter("gpt-4o-mini")
    budget = args.context_window - 1024
    # Imported here: LangChain's modules stay out of the processes that import this one
    # for its user and sessions only (benchmarks/gc_pauses.py counts the objects alive).
    from benchmarks.prepare_peers import LangChainTurn

    langchain = LangChainTurn(conn, mem.database_url, counter, budget, k=4)
    langchain.add_memories(USER, *user_cards(mem))
    warm = f"warm-{uuid.uuid4().hex[:8]}"
    record_session(mem, warm, scripted_history(100))
    mems = {"onnx": mem}
    if args.torch_too:
        mems["torch"] = Memory(mem.database, mem.settings, embedder=SentenceTransformerEmbedder())
    measure(mems, warm, 20)  # the tokenizer, the embedders, connections, caches
    langchain.measure(USER, SYSTEM, scripted_history(100), [turn_messages(t) for t in range(20)])
    print(
        f"prepare with recall, {args.turns} turns each, window {args.context_window}, "
        f"{cards} cards for the user, {'no worker' if args.no_worker else 'a worker beside'}; "
        f"{machine_state()} at the start",
        flush=True,
    )
    steal = CpuSteal()
    rows: dict[int, dict[str, float]] = {}
    for size, session_id in sessions.items():
        ours = measure(mems, session_id, args.turns)
        turns = [turn_messages(10_000 + t) for t in range(args.turns)]
        theirs = langchain.measure(USER, SYSTEM, scripted_history(size), turns)
        onnx = ours["onnx"]
        rows[size] = {
            "p50": statistics.median(onnx.wall),
            "p95": percentile(onnx.wall, 0.95),
            "cpu": statistics.median(onnx.cpu),
            "recalled": statistics.mean(onnx.recalled),
            "lc_p50": statistics.median(theirs),
            "lc_p95": percentile(theirs, 0.95),
        }
        if "torch" in ours:
            rows[size]["torch_p50"] = statistics.median(ours["torch"].wall)
        print(f"{size:>9} messages: {json.dumps(rows[size])}", flush=True)
    print(f"{machine_state(steal)} (stratamem and LangChain) at the end", flush=True)
    return rows


def print_table(
    rows: dict[int, dict[str, float]], mem0: dict[int, dict[str, float]], missing: str | None
) -> None:
    """The results, one row per size; mem0's columns empty where it was not measured."""
    print(
        f"{'messages':>9} {'p50 ms':>8} {'p95 ms':>8} {'CPU p50':>8} {'recalled':>8}"
        f" {'LC p50':>8} {'LC p95':>8} {'LC/ours':>8} {'mem0 p50':>9} {'mem0 p95':>9}"
        f" {'mem0/ours':>9}"
    )
    for size, row in rows.items():
        peer = mem0.get(size)
        theirs = (
            f" {peer['p50']:>9.2f} {peer['p95']:>9.2f} {peer['p50'] / row['p50']:>9.2f}"
            if peer
            else f" {'-':>9} {'-':>9} {'-':>9}"
        )
        print(
            f"{size:>9} {row['p50']:>8.2f} {row['p95']:>8.2f} {row['cpu']:>8.2f}"
            f" {row['recalled']:>8.1f} {row['lc_p50']:>8.2f} {row['lc_p95']:>8.2f}"
            f" {row['lc_p50'] / row['p50']:>8.2f}{theirs}"
        )
        if "torch_p50" in row:
            print(
                f"{'':>9} the same turns with MiniLM on torch, alternating: {row['torch_p50']:.2f}"
            )
    for size, peer in mem0.items():
        print(f"mem0 at {size}: {int(peer['memories'])} memories, added in {peer['add_s']} s")
    if missing:
        print(f"mem0: not measured: {missing}")


if __name__ == "__main__":
    main()

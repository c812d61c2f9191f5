"""Latency of ``Memory.prepare`` as a session grows: 100, 1,000 and 10,000 stored messages.

Each turn is ``prepare`` (user input stored, window loaded, context assembled; no LLM) followed
by ``record`` of the assistant's reply, on the embedded Postgres. Cards (long-term memory) are
off: recall is measured by ``benchmarks/recall.py``. As in production, a worker
process (``stratamem worker``) consolidates the summary (offline, as raw archives) while the
turns run, so each session is in its steady state; it shares the machine's two cores.

Side by side, on the same embedded Postgres and the same history, what a LangChain user writes:
langchain-postgres ``PostgresChatMessageHistory`` (its own table) holds the messages, and each
turn is ``get_messages()`` + ``trim_messages(strategy="last", include_system=True,
start_on="human")`` to the same budget with the same tiktoken counter, then the turn's messages
are added. The ratio printed is LangChain's p50 over stratamem's (above 1: stratamem is faster).

Run from the repository root: ``python -m benchmarks.prepare`` (or ``scripts/bench`` for all);
needs the ``bench`` extra (``source scripts/venv.sh dev,bench``).
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from langchain_core.messages import (
    BaseMessage,
    SystemMessage,
    convert_to_messages,
    convert_to_openai_messages,
    trim_messages,
)
from langchain_postgres import PostgresChatMessageHistory

from benchmarks.machine import CpuSteal, machine_state
from memory import Memory
from memory.context.messages import Message
from memory.context.tokens import TiktokenCounter

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


def measure(mem: Memory, size: int, turns: int, cpu: list[float] | None = None) -> list[float]:
    """Milliseconds of ``prepare`` for each of ``turns`` turns on a session of ``size``.

    ``cpu`` receives the milliseconds of CPU each ``prepare`` took in this thread (Python and
    the driver, not the server): what a busy machine multiplies into waiting for a core.
    """
    user_id, session_id = "bench", f"s{size}-{uuid.uuid4().hex[:8]}"
    build_session(mem, user_id, session_id, size)
    timings: list[float] = []
    for turn in range(turns):
        user, *rest = turn_messages(10_000 + turn)
        start, start_cpu = time.perf_counter(), time.thread_time()
        mem.prepare(
            user_id=user_id, session_id=session_id, input=str(user["content"]), system=SYSTEM
        )
        timings.append((time.perf_counter() - start) * 1000)
        if cpu is not None:
            cpu.append((time.thread_time() - start_cpu) * 1000)
        mem.record(user_id=user_id, session_id=session_id, messages=rest)
    return timings


SYSTEM = "You are a helpful assistant for the checkout team."


def scripted_history(size: int) -> list[dict[str, object]]:
    """The same ``size`` messages ``build_session`` stores, as one list."""
    history: list[dict[str, object]] = []
    turn = 0
    while len(history) < size:
        messages = turn_messages(turn)[: size - len(history)]
        if messages[-1]["role"] == "assistant" and "tool_calls" in messages[-1]:
            messages = messages[:-1]
        history += messages
        turn += 1
    return history


def to_langchain(messages: list[dict[str, object]]) -> list[BaseMessage]:
    """OpenAI-style dicts as LangChain messages (a tool-calling turn's ``None`` content as "")."""
    return convert_to_messages([{**m, "content": m["content"] or ""} for m in messages])


def langchain_counter(counter: TiktokenCounter) -> Callable[[BaseMessage], int]:
    """A per-message ``token_counter`` for ``trim_messages``: the counter stratamem uses."""

    def count(message: BaseMessage) -> int:
        (openai,) = convert_to_openai_messages([message])
        return counter.count_message(Message.model_validate(openai))

    # trim_messages takes a counter as per-message when its parameter is annotated
    # BaseMessage (the class, not the string that postponed annotations leave).
    count.__annotations__["message"] = BaseMessage
    return count


def measure_langchain(
    conn: psycopg.Connection[Any], counter: TiktokenCounter, size: int, turns: int, budget: int
) -> list[float]:
    """Milliseconds of the LangChain turn (load, trim, store the input) for ``turns`` turns."""
    history = PostgresChatMessageHistory("lc_history", str(uuid.uuid4()), sync_connection=conn)
    history.add_messages(to_langchain(scripted_history(size)))
    token_counter = langchain_counter(counter)
    timings: list[float] = []
    for turn in range(turns):
        user, *rest = to_langchain(turn_messages(10_000 + turn))
        start = time.perf_counter()
        history.add_messages([user])
        trim_messages(
            [SystemMessage(SYSTEM), *history.get_messages()],
            max_tokens=budget,
            strategy="last",
            token_counter=token_counter,
            include_system=True,
            start_on="human",
        )
        timings.append((time.perf_counter() - start) * 1000)
        history.add_messages(rest)
    return timings


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
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--context-window", type=int, default=8_192)
    args = parser.parse_args()
    settings: dict[str, Any] = {
        "model": "gpt-4o-mini",
        "context_window": str(args.context_window),
        "max_output": "1024",
        "summary": {"mode": "background", "debounce_seconds": 0},
        # Cards off: recall (an embedding and a search per request) is measured by
        # benchmarks/recall.py; this compares the short-term path with LangChain's.
        "cards": {"enabled": False},
    }
    with tempfile.TemporaryDirectory() as folder:
        mem = Memory.open(data_dir=Path(folder), **settings)
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
        with mem, psycopg.connect(libpq_url(mem.database_url)) as conn:
            try:
                run(mem, conn, settings, args.turns, args.context_window)
            finally:
                # Before the database stops, so the worker does not report it gone.
                worker.terminate()
                worker.wait()


def run(
    mem: Memory, conn: psycopg.Connection[Any], settings: dict[str, Any], turns: int, window: int
) -> None:
    """Warm up, then measure both sides at every size and print the table."""
    PostgresChatMessageHistory.create_tables(conn, "lc_history")
    counter = TiktokenCounter(str(settings["model"]))
    budget = window - int(str(settings["max_output"]))
    measure(mem, 100, 20)  # warm up: tokenizer, connections, caches
    measure_langchain(conn, counter, 100, 20, budget)
    print(
        f"prepare latency, {turns} turns each, window {window}, cards off; "
        f"{machine_state()} at the start"
    )
    steal = CpuSteal()
    print(
        f"{'messages':>9} {'p50 ms':>8} {'p95 ms':>8} {'CPU p50':>8}"
        f" {'LC p50':>8} {'LC p95':>8} {'LC/ours':>8}"
    )
    for size in SIZES:
        cpu: list[float] = []
        ours = measure(mem, size, turns, cpu)
        theirs = measure_langchain(conn, counter, size, turns, budget)
        p50, lc_p50 = statistics.median(ours), statistics.median(theirs)
        print(
            f"{size:>9} {p50:>8.2f} {percentile(ours, 0.95):>8.2f} {statistics.median(cpu):>8.2f}"
            f" {lc_p50:>8.2f} {percentile(theirs, 0.95):>8.2f} {lc_p50 / p50:>8.2f}"
        )
    print(f"{machine_state(steal)} (the run) at the end")


if __name__ == "__main__":
    main()

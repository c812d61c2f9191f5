"""Time and memory of archiving a long session at its end: ``Memory.end_session`` inline.

    python -m benchmarks.archive [--messages 20000] [--embedder hashing|minilm]

Stores a session of ``--messages`` messages (user and assistant turns of a support chat, a
fact stated now and then so the rules extract cards, every fourth turn a tool call and its
result) on an embedded Postgres in a temporary folder, offline (no LLM: the rules extract),
then ends it once with ``end_session`` in inline mode, which archives every message as a turn
card and the rules' cards (the window is so large that nothing was folded, and so archived,
while the session was stored). Printed: the wall time of that one call, the archive mark after
it, the cards stored, and the peak of Python's traced memory during the call (tracemalloc;
the embedder's own buffers, torch's among them, are not Python objects and are not counted).
"""

from __future__ import annotations

import argparse
import tempfile
import time
import tracemalloc
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks.machine import CpuSteal, machine_state
from memory import Memory
from storage import ArchiveMarks, CardFilter

#: The first message's time; a turn every two minutes.
_START = datetime(2024, 3, 1, 9, tzinfo=UTC)
_GAP = timedelta(minutes=2)
_CITIES = ("Porto", "Lisbon", "Berlin", "Madrid", "Oslo", "Vienna")


def turn(index: int) -> list[dict[str, Any]]:
    """One scripted turn: a question (sometimes stating a fact), maybe a tool call, an answer."""
    said = _START + index * _GAP
    question = f"Ticket {index}: the export of report {index} fails with a timeout again."
    if index % 10 == 0:
        question = f"I live in {_CITIES[index // 10 % len(_CITIES)]} now. " + question
    messages: list[dict[str, Any]] = [{"role": "user", "content": question, "timestamp": said}]
    if index % 4 == 0:
        call = f"call_{index}"
        messages += [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call,
                        "type": "function",
                        "function": {"name": "get_report", "arguments": f'{{"id": {index}}}'},
                    }
                ],
                "timestamp": said,
            },
            {
                "role": "tool",
                "tool_call_id": call,
                "content": f"report {index}: 3 queries, 41 s, status timeout " * 6,
                "timestamp": said,
            },
        ]
    messages.append(
        {
            "role": "assistant",
            "content": f"Report {index} times out in its third query; I raised its limit.",
            "timestamp": said,
        }
    )
    return messages


def store_session(mem: Memory, user_id: str, session_id: str, count: int) -> int:
    """Store turns until the session holds at least ``count`` messages; how many it holds."""
    stored, index, batch = 0, 0, []
    while stored < count:
        messages = turn(index)
        batch += messages
        stored += len(messages)
        index += 1
        if len(batch) >= 500 or stored >= count:
            mem.record(user_id=user_id, session_id=session_id, messages=batch)
            batch = []
    return stored


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--embedder", choices=("hashing", "minilm"), default="hashing")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="stratamem-archive-") as folder:
        mem = Memory.open(
            data_dir=Path(folder),
            # A window no session fills: nothing is folded (and archived) while it is stored.
            context_window=100_000_000,
            max_output=1_000,
            summary={"mode": "inline"},
            cards={"embedder": args.embedder},
        )
        with mem:
            user_id, session_id = f"bench-{uuid.uuid4().hex[:8]}", "long"
            stored = store_session(mem, user_id, session_id, args.messages)
            if args.embedder == "minilm":
                mem.search(user_id=user_id, query="warm up the model")  # load it before timing
            steal = CpuSteal()
            tracemalloc.start()
            started = time.perf_counter()
            mem.end_session(user_id=user_id, session_id=session_id)
            elapsed = time.perf_counter() - started
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            longterm = mem._parts.longterm
            assert longterm is not None
            cards = longterm.store.list_cards(user_id, CardFilter(include_superseded=True))
            turns = sum(card.type == "turn" for card in cards)
            mark = ArchiveMarks(mem._database).get(user_id, session_id)
            print(
                f"end_session of {stored:,} messages ({args.embedder}): {elapsed:.1f} s, "
                f"archive mark {mark:,}, {turns:,} turn cards and {len(cards) - turns:,} others, "
                f"traced peak {peak / 1e6:.0f} MB; {machine_state(steal)}"
            )


if __name__ == "__main__":
    main()

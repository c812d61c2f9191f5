"""A tool loop whose results fill the budget keeps the summary and the memories.

The scenario of issue 18: during a tool loop four big tool results filled the whole budget, so
every step dropped the summary and all memories. The current turn's tool results are cut first
(head and tail around the marker) down to where the summary and the memories keep their floors
(``memory.context.floors``), before either loses its place.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from memory import Memory, Settings
from memory.context.floors import MEMORIES_FLOOR_SHARE, SUMMARY_FLOOR_SHARE
from retrieval import MINILM_NAME, HashingEmbedder
from storage import Database

MARKER = "tokens cut by stratamem"


@pytest.fixture(scope="module")
def loop_database(database_url: str) -> Iterator[Database]:
    """This module's own handle on the shared database."""
    with Database.open(database_url) as opened:
        yield opened


@pytest.fixture
def mem(loop_database: Database) -> Memory:
    """A history budget of 4,880 tokens; folding queued for a worker that does not run here."""
    settings = Settings(context_window=6_000, max_output=1_000)
    return Memory(loop_database, settings, embedder=HashingEmbedder(name=MINILM_NAME))


def tool_loop(call_ids: list[str], rows: int) -> list[dict[str, Any]]:
    """The assistant's calls and their results, each result ``rows`` lines of export data."""
    calls = [
        {
            "id": call_id,
            "type": "function",
            "function": {"name": "read_export", "arguments": json.dumps({"part": call_id})},
        }
        for call_id in call_ids
    ]
    results = [
        {
            "role": "tool",
            "tool_call_id": call_id,
            "content": "\n".join(
                f"{call_id} row {row}: bucket=s3://kb-a/export/{row} size={row * 37} ok"
                for row in range(rows)
            ),
        }
        for call_id in call_ids
    ]
    return [{"role": "assistant", "content": None, "tool_calls": calls}, *results]


def test_four_big_tool_results_leave_the_summary_and_the_memories_their_floors(
    mem: Memory, user_id: str
) -> None:
    said = "Knowledge base A exports to the bucket kb-a nightly."
    mem.record(
        user_id=user_id,
        session_id="earlier",
        messages=[
            {"role": "user", "content": said},
            {"role": "assistant", "content": "Noted: knowledge base A exports nightly to kb-a."},
        ],
    )
    mem.end_session(user_id=user_id, session_id="earlier")
    mem.run_worker(until_idle=True)  # the earlier session's cards
    for turn in range(40):  # past the fold trigger: a summary of the older turns
        mem.record(
            user_id=user_id,
            session_id="loop",
            messages=[
                {"role": "user", "content": f"Question {turn} about the export schedule " * 5},
                {"role": "assistant", "content": f"Answer {turn} about the export schedule " * 5},
            ],
        )
    assert mem.consolidate(user_id=user_id, session_id="loop") is not None
    mem.prepare(
        user_id=user_id,
        session_id="loop",
        input="Check the export of knowledge base A: which buckets did it write?",
    )
    # Four results of about 1,550 tokens each: cut to a quarter of the budget, they fill it.
    loop = tool_loop(["p1", "p2", "p3", "p4"], 75)
    mem.record(user_id=user_id, session_id="loop", messages=loop)

    context = mem.prepare(user_id=user_id, session_id="loop")  # the next step of the loop

    report = context.report
    budget = report.budget
    assert report.tokens.total <= budget
    # All four results are there, cut with their head and tail around the marker.
    tools = [message for message in context.messages if message["role"] == "tool"]
    assert [message["tool_call_id"] for message in tools] == ["p1", "p2", "p3", "p4"]
    for message, original in zip(tools, loop[1:], strict=True):
        assert MARKER in message["content"]
        head, tail = original["content"].splitlines()[0], original["content"].splitlines()[-1]
        assert message["content"].startswith(head) and message["content"].endswith(tail)
    assert [cut.layer for cut in report.cut_tool_results] == ["input"] * 4
    # The summary and the best memory kept their place: what the floors promise.
    # The summary (a raw archive of 1,900 tokens) is shortened to about its floor, the one
    # memory recalled (68 tokens, under its floor) is whole.
    assert report.summary is not None and report.summary.shortened
    assert 0.9 * budget * SUMMARY_FLOOR_SHARE <= report.tokens.summary
    assert report.recall is not None and len(report.recall.cards) == 1
    assert 0 < report.tokens.memories <= budget * MEMORIES_FLOOR_SHARE
    assert not [drop for drop in report.dropped if drop.layer == "memories"]
    sent = "\n".join(str(message["content"]) for message in context.messages)
    assert f"User: {said}" in sent  # the earlier session's turn card
    assert "Summary of the earlier conversation" in sent


def test_a_fold_of_a_backlog_never_takes_the_current_turn(mem: Memory, user_id: str) -> None:
    """A backlog larger than a fold step, ending in a tool loop: the worker's fold reads a
    capped slice that ends inside the current turn; it folds the older turns, never the
    question and its calls (a fold once took all 66 messages, and the next request sent the
    summary alone)."""
    for turn in range(30):
        mem.record(
            user_id=user_id,
            session_id="backlog",
            messages=[
                {"role": "user", "content": f"Question {turn} about the export schedule."},
                {"role": "assistant", "content": f"Answer {turn}: it runs nightly at 02:00."},
            ],
        )
    question = {"role": "user", "content": "Which parts of export A failed last night?"}
    loop = tool_loop(["c1", "c2", "c3", "c4"], rows=150)
    mem.record(user_id=user_id, session_id="backlog", messages=[question, *loop])

    while mem.consolidate(user_id=user_id, session_id="backlog") is not None:
        pass
    summary = mem.summary(user_id=user_id, session_id="backlog")
    context = mem.prepare(user_id=user_id, session_id="backlog")

    assert summary is not None and summary.covered <= 60  # the older turns, not the loop
    assert question in context.messages
    assert [m.get("tool_call_id") for m in context.messages if m["role"] == "tool"] == [
        "c1", "c2", "c3", "c4",
    ]  # fmt: skip

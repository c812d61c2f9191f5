"""Reports of ``Memory.prepare`` name stored messages by seq (and client id), and serialise."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from memory import Memory, Message, Settings, TiktokenCounter
from memory.context.assembler import assemble
from memory.session.preparing import _named_by_seq
from memory.session.recent import RecentWindow
from retrieval import MINILM_NAME, HashingEmbedder
from storage import Database, StoredMessage


@pytest.fixture(scope="module")
def reports_database(database_url: str) -> Iterator[Database]:
    """This module's own handle on the shared database."""
    with Database.open(database_url) as opened:
        yield opened


@pytest.fixture
def small(reports_database: Database) -> Memory:
    """A history budget of about a thousand tokens; cards embedded by the hashing fake (named
    as the model the shared database records): no test here is about recall."""
    settings = Settings(context_window=1_500, max_output=300, summary={"debounce_seconds": 0})
    return Memory(reports_database, settings, embedder=HashingEmbedder(name=MINILM_NAME))


def test_with_a_long_system_prompt_what_the_cap_would_drop_is_archived_too(
    small: Memory, user_id: str, session_id: str
) -> None:
    for turn in range(40):
        small.record(
            user_id=user_id,
            session_id=session_id,
            messages=[
                {"role": "user", "content": f"question {turn} " * 6, "id": f"q-{turn}"},
                {"role": "assistant", "content": f"answer {turn} " * 6},
            ],
        )
    # So long that even the window the fold policy keeps does not fit beside it.
    system = "Follow the house rules. " * 110

    context = small.prepare(user_id=user_id, session_id=session_id, input="And now?", system=system)

    report = context.report
    summary = small.summary(user_id=user_id, session_id=session_id)
    assert summary is not None and summary.kind == "raw"
    assert report.archived == summary.covered == summary.boundary_seq
    assert not [drop for drop in report.dropped if drop.layer in ("window", "recent")]
    history = small.history(user_id=user_id, session_id=session_id)
    sent = [m for m in context.messages if m["role"] != "system"]
    assert sent == [m.payload for m in history[summary.boundary_seq :]]
    logged = json.loads(report.to_json())
    assert logged["archived"] == report.archived
    assert logged["budget"] == report.budget
    assert logged["tokens"]["total"] == report.tokens.total
    assert logged["summary"]["kind"] == "raw"
    assert logged["interrupted_calls"] == []


def test_dropped_window_units_are_named_by_seq_and_client_id_not_by_position() -> None:
    # prepare archives what the cap would drop, so this names what a report would show if it
    # ever did drop (e.g. when another writer's summary won the race).
    counter = TiktokenCounter("gpt-4o-mini")
    payloads = [
        {"role": "user", "content": f"question {n} " * 20}
        if n % 2 == 0
        else {"role": "assistant", "content": f"answer {n} " * 20}
        for n in range(6)
    ] + [{"role": "user", "content": "And now?"}]
    stored = tuple(
        StoredMessage(
            id=100 + offset,
            user_id="u",
            session_id="s",
            seq=41 + offset,
            role=payload["role"],
            payload=payload,
            tokens=counter.count_message(Message.from_openai(payload)),
            client_id=f"q-{offset}" if payload["role"] == "user" else None,
            metadata={},
            created_at=datetime(2025, 6, 1, tzinfo=UTC),
        )
        for offset, payload in enumerate(payloads)
    )
    messages = tuple(Message.from_openai(payload) for payload in payloads)
    counts = tuple(m.tokens for m in stored)
    window = RecentWindow(stored, messages, sum(counts), 47, 10_000, counts, tuple(payloads))
    context = assemble(messages, budget=200, counter=counter, recent_messages=1)

    named = _named_by_seq(context, window, (), 0).report

    drops = [drop for drop in named.dropped if drop.layer == "window"]
    assert [drop.span for drop in drops][:2] == [(41, 41), (42, 42)]
    assert drops[0].detail.startswith("message seq 41 (id 'q-0') (user: ")
    assert drops[1].detail.startswith("message seq 42 (assistant: ")
    assert [drop.span for drop in context.report.dropped][:2] == [(0, 0), (1, 1)]


def test_a_cut_tool_result_is_named_by_its_seq(
    small: Memory, user_id: str, session_id: str
) -> None:
    small.prepare(user_id=user_id, session_id=session_id, input="Show me the logs")
    call = {"id": "c1", "type": "function", "function": {"name": "logs", "arguments": "{}"}}
    small.record(
        user_id=user_id,
        session_id=session_id,
        messages=[
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "error line\n" * 900},
        ],
    )

    report = small.prepare(user_id=user_id, session_id=session_id).report

    [cut] = report.cut_tool_results
    assert (cut.index, cut.tool_call_id) == (3, "c1")  # seq 3 in the session, not position 2
    assert json.loads(report.to_json())["cut_tool_results"][0]["index"] == 3

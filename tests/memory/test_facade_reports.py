"""Reports of ``Memory.prepare`` name stored messages by seq (and client id), and serialise."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from memory import Memory, Settings
from storage import Database


@pytest.fixture(scope="module")
def reports_database(database_url: str) -> Iterator[Database]:
    """This module's own handle on the shared database."""
    with Database.open(database_url) as opened:
        yield opened


@pytest.fixture
def small(reports_database: Database) -> Memory:
    """A history budget of about a thousand tokens."""
    settings = Settings(context_window=1_500, max_output=300, summary={"debounce_seconds": 0})
    return Memory(reports_database, settings)


def test_dropped_units_are_named_by_seq_and_client_id_not_by_window_position(
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
    # A system prompt so long that even the archived window does not fit beside it.
    system = "Follow the house rules. " * 110

    report = small.prepare(
        user_id=user_id, session_id=session_id, input="And now?", system=system
    ).report

    summary = small.summary(user_id=user_id, session_id=session_id)
    assert summary is not None
    history = {m.seq: m for m in small.history(user_id=user_id, session_id=session_id)}
    window_drops = [drop for drop in report.dropped if drop.layer in ("window", "recent")]
    assert window_drops
    for drop in window_drops:
        assert drop.span is not None
        first, last = drop.span
        assert summary.boundary_seq < first <= last < len(history)
        stored = history[first]
        expected = (
            f"message seq {first} (id {stored.client_id!r})"
            if stored.client_id
            else f"message seq {first}"
        )
        assert drop.detail.startswith(expected if first == last else f"messages seq {first}-")
    logged = json.loads(report.to_json())
    assert logged["dropped"][0]["span"] == list(window_drops[0].span or ())
    assert logged["budget"] == report.budget
    assert logged["tokens"]["total"] == report.tokens.total
    assert logged["summary"]["kind"] == "raw"
    assert report.to_dict()["interrupted_calls"] == []


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

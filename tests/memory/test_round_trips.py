"""How many round trips to Postgres one ``prepare`` or ``record`` costs, counted on the wire.

Not a timing test: the count does not depend on the machine, and on a loaded machine it is the
count of round trips, not Python, that decides the latency of a request (each one waits for a
core). libpq's own trace of every connection the pool hands out says what was sent: each
``ReadyForQuery`` the server sends ends one round trip.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from wire_trace import wire_trace

from memory import Memory, Settings
from storage import Database


@pytest.fixture(scope="module")
def own_database(database_url: str) -> Iterator[Database]:
    """This module's own handle on the shared database (its pool is traced)."""
    with Database.open(database_url) as opened:
        yield opened


@pytest.fixture
def mem(own_database: Database) -> Memory:
    """Cards off: recall is a separate cost, measured elsewhere. Kept reports off: a thread
    writes them off the request path, and its statements would land in a trace by chance."""
    return Memory(own_database, Settings(cards={"enabled": False}, reports={"enabled": False}))


def test_prepare_with_an_input_is_one_round_trip(
    mem: Memory, own_database: Database, user_id: str, session_id: str, tmp_path: Path
) -> None:
    mem.prepare(user_id=user_id, session_id=session_id, input="How is the checkout service?")
    mem.record(
        user_id=user_id, session_id=session_id, messages=[{"role": "assistant", "content": "Up."}]
    )

    with wire_trace(own_database.engine, tmp_path / "trace") as trace:
        context = mem.prepare(user_id=user_id, session_id=session_id, input="And payments?")

    # Stored durably, summary and new rows read: one statement, no ping, no BEGIN/COMMIT.
    assert trace.round_trips == 1
    assert [m["content"] for m in context.messages] == [
        "How is the checkout service?",
        "Up.",
        "And payments?",
    ]
    stored = mem.history(user_id=user_id, session_id=session_id)
    assert [m.payload["content"] for m in stored] == [m["content"] for m in context.messages]


def test_prepare_in_a_tool_loop_is_one_round_trip(
    mem: Memory, own_database: Database, user_id: str, session_id: str, tmp_path: Path
) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "status", "arguments": "{}"}}
    mem.prepare(user_id=user_id, session_id=session_id, input="Is checkout up?")
    mem.record(
        user_id=user_id,
        session_id=session_id,
        messages=[
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "up"},
        ],
    )

    with wire_trace(own_database.engine, tmp_path / "trace") as trace:
        context = mem.prepare(user_id=user_id, session_id=session_id)

    assert trace.round_trips == 1
    assert [m["role"] for m in context.messages] == ["user", "assistant", "tool"]


def test_an_input_after_open_calls_takes_the_general_path_and_closes_them(
    mem: Memory, own_database: Database, user_id: str, session_id: str, tmp_path: Path
) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "status", "arguments": "{}"}}
    mem.prepare(user_id=user_id, session_id=session_id, input="Is checkout up?")
    mem.record(
        user_id=user_id,
        session_id=session_id,
        messages=[{"role": "assistant", "content": None, "tool_calls": [call]}],
    )

    with wire_trace(own_database.engine, tmp_path / "trace") as trace:
        context = mem.prepare(user_id=user_id, session_id=session_id, input="Never mind.")

    # The one statement stored nothing (a call is open); the writer closed the call first.
    assert trace.round_trips > 1
    assert [c.call_id for c in context.report.interrupted_calls] == ["c1"]
    stored = mem.history(user_id=user_id, session_id=session_id)
    assert [m.role for m in stored] == ["user", "assistant", "tool", "user"]
    assert stored[-1].payload["content"] == "Never mind."


def test_every_warm_prepare_runs_one_statement(
    mem: Memory, own_database: Database, user_id: str, session_id: str, tmp_path: Path
) -> None:
    """Pinned: a warm request is one statement, whatever the turn (a regression fails here).

    Twelve turns take each pooled connection past the point where the driver prepares the
    statement on the server; preparing costs a round trip once per connection, never a
    statement.
    """
    call = {"id": "c1", "type": "function", "function": {"name": "status", "arguments": "{}"}}
    mem.prepare(user_id=user_id, session_id=session_id, input="Warm up.")
    mem.record(
        user_id=user_id, session_id=session_id, messages=[{"role": "assistant", "content": "Ok."}]
    )
    per_request: list[int] = []
    for turn in range(12):
        with wire_trace(own_database.engine, tmp_path / f"input-{turn}") as trace:
            mem.prepare(user_id=user_id, session_id=session_id, input=f"Question {turn}?")
        per_request.append(trace.statements)
        mem.record(
            user_id=user_id,
            session_id=session_id,
            messages=[
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": "up"},
            ],
        )
        with wire_trace(own_database.engine, tmp_path / f"loop-{turn}") as trace:
            mem.prepare(user_id=user_id, session_id=session_id)
        per_request.append(trace.statements)
        mem.record(
            user_id=user_id,
            session_id=session_id,
            messages=[{"role": "assistant", "content": f"Answer {turn}."}],
        )

    assert per_request == [1] * 24
    assert len(mem.history(user_id=user_id, session_id=session_id)) == 2 + 12 * 4


def test_recording_a_reply_is_two_statements(
    mem: Memory, own_database: Database, user_id: str, session_id: str, tmp_path: Path
) -> None:
    """The reply stored in one statement (not a transaction of five), and the fold's check."""
    mem.prepare(user_id=user_id, session_id=session_id, input="Is checkout up?")
    call = {"id": "c1", "type": "function", "function": {"name": "status", "arguments": "{}"}}
    turn = [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "up", "id": "r1"},
        {"role": "assistant", "content": "It is up."},
    ]

    with wire_trace(own_database.engine, tmp_path / "reply") as reply:
        stored = mem.record(user_id=user_id, session_id=session_id, messages=turn)

    assert (reply.statements, reply.round_trips) == (2, 2)
    assert [m.seq for m in stored] == [2, 3, 4]
    assert [m.client_id for m in stored] == [None, "r1", None]
    history = mem.history(user_id=user_id, session_id=session_id)
    assert [m.payload.get("content") for m in history] == [
        "Is checkout up?",
        None,
        "up",
        "It is up.",
    ]


def test_a_nul_in_the_last_message_takes_the_general_path_and_loses_nothing(
    mem: Memory, own_database: Database, user_id: str, session_id: str, tmp_path: Path
) -> None:
    """Postgres' JSON operators refuse a document holding ``\\u0000``: the one-statement paths
    must not read one (it would fail the request), they leave it to the general path."""
    mem.prepare(user_id=user_id, session_id=session_id, input="a\x00b")
    mem.record(
        user_id=user_id,
        session_id=session_id,
        messages=[{"role": "assistant", "content": "echo: a\x00b \\u0000"}],
    )

    with wire_trace(own_database.engine, tmp_path / "trace") as trace:
        context = mem.prepare(user_id=user_id, session_id=session_id, input="And \x00 then?")

    assert trace.round_trips > 1  # the general path: the tail is read in Python
    contents = ["a\x00b", "echo: a\x00b \\u0000", "And \x00 then?"]
    assert [m["content"] for m in context.messages] == contents
    stored = mem.history(user_id=user_id, session_id=session_id)
    assert [m.payload["content"] for m in stored] == contents

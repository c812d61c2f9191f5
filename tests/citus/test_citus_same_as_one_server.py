"""The cluster against one server, and the attacks of the single-server suite, on Citus.

A user who changes their mind gets the same prompts and cards on the cluster as on one
embedded server; a 10,000-message batch, NULs, ids at the length limit and an LLM answering
garbage during a fold behave on the cluster as the single-server tests show they do there.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI, Malformed, Reply, Status
from placements import placements
from sqlalchemy import text

from memory import InvalidInputError, Memory, Settings
from memory.llm import OpenAIChatModel
from storage import Database
from storage.inputs import MAX_ID_LENGTH

MOVES = [
    ("a", "I live in Lyon.", "2025-01-05T10:00:00Z"),
    ("b", "I moved to Berlin last week.", "2025-04-04T10:00:00Z"),
]
QUESTIONS = ("Where do I live now?", "Where did I live before Berlin?")


def _settings(**changes: object) -> Settings:
    values: dict[str, object] = {
        "cards": {"embedder": "hashing", "debounce_seconds": 0},
        "summary": {"debounce_seconds": 0},
        "reports": {"enabled": False},
    }
    return Settings(**(values | changes))


def _user() -> str:
    return f"u-{uuid.uuid4()}"


def _a_user_who_moves(mem: Memory, user: str) -> list[Any]:
    """What the user who moves from Lyon to Berlin is shown: the prompts, then the cards."""
    for session, said, at in MOVES:
        mem.record(
            user_id=user,
            session_id=session,
            messages=[
                {"role": "user", "content": said, "timestamp": at},
                {"role": "assistant", "content": "Noted.", "timestamp": at},
            ],
        )
        mem.end_session(user_id=user, session_id=session)
        mem.run_worker(until_idle=True)
    shown: list[Any] = []
    for question in QUESTIONS:
        shown.append(mem.prepare(user_id=user, session_id="c", input=question).messages)
        mem.record(user_id=user, session_id="c", messages=[{"role": "assistant", "content": "ok"}])
    hits = mem.search(user_id=user, query="live", include_superseded=True, k=10)
    shown.append(sorted((hit.card.text, hit.card.superseded_by is not None) for hit in hits))
    return shown


@pytest.fixture
def one_server(fresh_data_dir: Path) -> Iterator[Database]:
    with Database.open(None, data_dir=fresh_data_dir) as opened:
        yield opened


def test_a_user_who_moves_is_shown_the_same_on_the_cluster_as_on_one_server(
    citus_database: Database, one_server: Database
) -> None:
    user = _user()

    on_the_cluster = _a_user_who_moves(Memory(citus_database, _settings()), user)
    on_one_server = _a_user_who_moves(Memory(one_server, _settings()), user)

    assert on_the_cluster == on_one_server
    now = on_the_cluster[0][0]["content"]
    assert now.index("User lives in Berlin") < now.index("until 4 April 2025") < now.index("Lyon")
    assert ("User lives in Lyon", True) in on_the_cluster[-1]  # superseded, still answerable
    assert ("User lives in Berlin" in on_the_cluster[-1][0][0]) and not on_the_cluster[-1][0][1]


def test_a_batch_of_ten_thousand_messages_is_stored_once_in_order_on_one_node(
    citus_database: Database,
) -> None:
    mem = Memory(citus_database, _settings(cards={"enabled": False}))
    user = _user()
    batch = [
        {"role": "user" if index % 2 == 0 else "assistant", "content": f"message {index}"}
        for index in range(10_000)
    ]

    stored = mem.record(user_id=user, session_id="big", messages=batch)
    context = mem.prepare(user_id=user, session_id="big", input="and now?")

    assert [message.seq for message in stored] == list(range(1, 10_001))
    with citus_database.engine.connect() as connection:
        seqs = connection.scalars(
            text("SELECT seq FROM messages WHERE user_id = :u ORDER BY seq"), {"u": user}
        ).all()
    assert seqs == list(range(1, 10_002))  # the batch, then the input
    assert context.messages[-1] == {"role": "user", "content": "and now?"}
    assert all(len(nodes) == 1 for nodes in placements(citus_database, user).values())
    mem.forget(user_id=user)  # its jobs too: another test's worker would take them


def test_nuls_and_ids_at_the_limit_are_kept_or_refused_as_on_one_server(
    citus_database: Database,
) -> None:
    mem = Memory(citus_database, _settings())
    longest = "u" * MAX_ID_LENGTH

    mem.record(user_id=longest, session_id="s" * MAX_ID_LENGTH,
               messages=[{"role": "user", "content": "My name is Ana\x00."}])  # fmt: skip
    with pytest.raises(InvalidInputError):
        mem.record(
            user_id=longest + "u", session_id="s", messages=[{"role": "user", "content": "x"}]
        )
    with pytest.raises(InvalidInputError):
        mem.record(
            user_id="nul\x00user", session_id="s", messages=[{"role": "user", "content": "x"}]
        )

    [message] = mem.history(user_id=longest, session_id="s" * MAX_ID_LENGTH)
    assert message.payload["content"] == "My name is Ana\x00."
    with citus_database.engine.connect() as connection:
        users = connection.scalars(
            text("SELECT DISTINCT user_id FROM messages WHERE user_id LIKE 'nul%' OR user_id = :u"),
            {"u": longest + "u"},
        ).all()
    assert users == []  # the refused batches stored nothing
    assert all(len(nodes) == 1 for nodes in placements(citus_database, longest).values())
    mem.forget(user_id=longest)


def test_garbage_from_the_llm_during_a_fold_archives_the_summary_and_loses_no_message(
    citus_database: Database,
) -> None:
    user = _user()
    with FakeOpenAI() as server:
        server.script(Malformed(), Reply("not json {"), Status(500))  # then 500: nothing scripted
        settings = _settings(
            context_window=1_500, max_output=300, summary={"debounce_seconds": 0, "retries": 1}
        )
        mem = Memory(
            citus_database, settings, chat=OpenAIChatModel(base_url=server.base_url, api_key="test")
        )
        for index in range(30):  # past the fold's trigger
            mem.record(
                user_id=user,
                session_id="s",
                messages=[
                    {"role": "user", "content": f"Fact {index}: my locker code is {index}{index}."},
                    {"role": "assistant", "content": f"Noted fact {index}."},
                ],
            )
        mem.run_worker(until_idle=True)

        assert server.requests  # the fold asked the model, and got garbage
    summary = mem.summary(user_id=user, session_id="s")
    assert summary is not None and summary.kind == "raw"
    assert "Fact 0: my locker code is 00." in summary.content
    assert len(mem.history(user_id=user, session_id="s")) == 60
    assert all(len(nodes) == 1 for nodes in placements(citus_database, user).values())
    mem.forget(user_id=user)

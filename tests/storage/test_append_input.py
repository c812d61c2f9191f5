"""Tests of ``MessageStore.append_input``: the request's one statement, and when it stores nothing.

It may store the input only when the general path (``append``) would store it the same way; in
every other case it stores nothing and says so, and the caller takes the general path.
"""

import json
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text
from storage_samples import user

from storage import (
    Database,
    InvalidInputError,
    MessageStore,
    NewMessage,
    StoredMessage,
    SummaryStore,
    erase,
)


def tool_call(*call_ids: str) -> NewMessage:
    calls = [
        {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}
        for call_id in call_ids
    ]
    payload = {"role": "assistant", "content": None, "tool_calls": calls}
    return NewMessage(payload=payload, role="assistant", tokens=10)


def tool_result(call_id: str) -> NewMessage:
    payload = {"role": "tool", "tool_call_id": call_id, "content": "ok"}
    return NewMessage(payload=payload, role="tool", tokens=1)


def assistant(content: str) -> NewMessage:
    return NewMessage(payload={"role": "assistant", "content": content}, role="assistant", tokens=2)


@pytest.fixture
def store(database: Database) -> MessageStore:
    return MessageStore(database)


def seqs(records: Iterator[StoredMessage]) -> list[int]:
    return [record.seq for record in records]


@pytest.mark.slow
def test_the_input_is_stored_and_returned_first_with_the_rows_before_it(
    store: MessageStore, user_id: str, session_id: str
) -> None:
    store.append(user_id, session_id, [user("a"), assistant("b")])
    message = user("c").model_copy(
        update={"client_id": "k-1", "metadata": {"source": "web", "nul": "a\x00b"}}
    )

    appended = store.append_input(user_id, session_id, message)

    assert appended is not None
    stored, read = appended
    summary, records = read.summary, read.messages
    assert summary is None
    history = store.history(user_id, session_id)
    assert stored == history[-1]
    assert (stored.seq, stored.client_id, stored.metadata) == (3, "k-1", message.metadata)
    assert list(records) == history[::-1]


def test_the_summary_and_a_floor_bound_the_rows_read(
    database: Database, store: MessageStore, user_id: str, session_id: str
) -> None:
    stored = store.append(user_id, session_id, [user(str(i)) for i in range(10)])
    saved = SummaryStore(database).save(
        user_id,
        session_id,
        content="ten",
        kind="raw",
        boundary=stored[3],
        covered=4,
        expected_version=0,
    )

    appended = store.append_input(user_id, session_id, user("x"), batch=3)
    again = store.append_input(user_id, session_id, user("y"), held=stored[8], batch=3)

    assert appended is not None and again is not None
    assert appended[1].summary == saved
    assert seqs(appended[1].messages) == [11, 10, 9, 8, 7, 6, 5]  # walked back in batches of 3
    assert (seqs(again[1].messages), again[1].floor) == ([12, 11, 10], 9)


def test_a_floor_whose_message_is_gone_reads_the_session_afresh(
    database: Database, store: MessageStore, user_id: str, session_id: str
) -> None:
    """A cache holds messages through seq 3; the session was erased and started again, and has
    a message 3 of its own: the floor does not hold, every message is read."""
    held = store.append(user_id, session_id, [user(str(i)) for i in range(3)])[-1]
    erase(database, user_id, session_id=session_id)
    store.append(user_id, session_id, [user(f"new {i}") for i in range(3)])

    appended = store.append_input(user_id, session_id, user("x"), held=held)
    read = store.walk_back_after_summary(user_id, session_id, held=held)

    assert appended is not None
    assert (seqs(appended[1].messages), appended[1].floor) == ([4, 3, 2, 1], 0)
    assert (seqs(read.messages), read.floor) == ([4, 3, 2, 1], 0)
    assert store.history(user_id, session_id)[0].payload["content"] == "new 0"


@pytest.mark.parametrize(
    "tail",
    [
        pytest.param([tool_call("c1")], id="a call without its result"),
        pytest.param([tool_call("c1", "c2"), tool_result("c2")], id="one of two calls answered"),
    ],
)
def test_nothing_is_stored_after_open_calls(
    store: MessageStore, user_id: str, session_id: str, tail: list[NewMessage]
) -> None:
    store.append(user_id, session_id, [user("a"), *tail])

    assert store.append_input(user_id, session_id, user("b")) is None

    assert [m.role for m in store.history(user_id, session_id)] == ["user"] + [m.role for m in tail]


def test_an_input_after_answered_calls_is_stored(
    store: MessageStore, user_id: str, session_id: str
) -> None:
    store.append(
        user_id,
        session_id,
        [user("a"), tool_call("c1", "c2"), tool_result("c2"), tool_result("c1")],
    )

    appended = store.append_input(user_id, session_id, user("b"))

    assert appended is not None
    assert appended[0].seq == 5


def test_nothing_is_stored_for_a_new_session_or_a_known_client_id(
    store: MessageStore, user_id: str, session_id: str
) -> None:
    keyed = user("a").model_copy(update={"client_id": "k-1"})

    assert store.append_input(user_id, session_id, keyed) is None  # a new session
    store.append(user_id, session_id, [keyed])
    assert store.append_input(user_id, session_id, keyed) is None  # a replay: append decides
    assert (
        store.append_input(
            user_id, session_id, user("other").model_copy(update={"client_id": "k-1"})
        )
        is None
    )

    assert [m.payload["content"] for m in store.history(user_id, session_id)] == ["a"]


def test_only_a_user_message_and_usable_ids_are_accepted(
    store: MessageStore, user_id: str, session_id: str
) -> None:
    store.append(user_id, session_id, [user("a")])

    with pytest.raises(InvalidInputError, match="user message"):
        store.append_input(user_id, session_id, assistant("b"))
    with pytest.raises(InvalidInputError, match="session_id"):
        store.append_input(user_id, "", user("b"))
    with pytest.raises(InvalidInputError, match="surrogate"):
        store.append_input(user_id, session_id, user("\ud800"))

    assert len(store.history(user_id, session_id)) == 1


def test_an_append_that_commits_while_the_input_waits_for_the_lock_sends_it_the_general_path(
    database: Database, store: MessageStore, user_id: str, session_id: str
) -> None:
    """The race the statement's last check is for: its snapshot predates a call it must see.

    Another transaction holds the session row and appends an assistant message with a tool
    call; the input's statement starts (its snapshot sees no open call) and waits for the row;
    the other transaction commits. Storing the input now would put a user message after an
    open call: it must store nothing instead.
    """
    store.append(user_id, session_id, [user("a"), assistant("b")])
    results: list[Any] = []
    with database.engine.connect() as holder:
        holder.execute(
            text("SELECT last_seq FROM sessions WHERE user_id = :u AND session_id = :s FOR UPDATE"),
            {"u": user_id, "s": session_id},
        )
        holder.execute(
            text(
                "INSERT INTO messages (user_id, session_id, seq, role, payload, tokens) "
                "VALUES (:u, :s, 3, 'assistant', CAST(:p AS json), 10)"
            ),
            {"u": user_id, "s": session_id, "p": json.dumps(tool_call("c1").payload)},
        )
        holder.execute(
            text("UPDATE sessions SET last_seq = 3 WHERE user_id = :u AND session_id = :s"),
            {"u": user_id, "s": session_id},
        )
        marker = f"input-{uuid.uuid4()}"
        waiting = threading.Thread(
            target=lambda: results.append(store.append_input(user_id, session_id, user(marker)))
        )
        waiting.start()
        _until_an_input_waits_for_a_lock(database)
        holder.commit()
    waiting.join()

    assert results == [None]
    history = store.history(user_id, session_id)
    assert [m.role for m in history] == ["user", "assistant", "assistant"]


def _until_an_input_waits_for_a_lock(database: Database) -> None:
    """Return once a backend running ``append_input``'s statement waits for a lock."""
    probe = text(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
        "AND query LIKE '%snapshot AS%'"
    )
    with database.reading() as connection:
        for _ in range(100_000):
            if connection.scalar(probe):
                return
    raise AssertionError("the input's statement never waited for the session's row lock")

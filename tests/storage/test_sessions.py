"""Tests of MessageStore in one process: order, idempotency, users, validation, walk_back."""

import itertools
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event
from storage_samples import assert_complete_and_ordered, user

from storage import Database, InvalidInputError, MessageStore, NewMessage, StoredMessage


class Rejected(Exception):
    """What the test validators raise."""


def tool_call(call_id: str) -> NewMessage:
    payload = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    }
    return NewMessage(payload=payload, role="assistant", tokens=10)


def tool_result(call_id: str) -> NewMessage:
    payload = {"role": "tool", "tool_call_id": call_id, "content": "ok"}
    return NewMessage(payload=payload, role="tool", tokens=1)


@pytest.fixture
def store(database: Database) -> MessageStore:
    return MessageStore(database)


def test_append_then_history_in_order(store: MessageStore, user_id: str, session_id: str) -> None:
    first = store.append(user_id, session_id, [user("a"), user("b")])
    second = store.append(user_id, session_id, [user("c")])

    history = store.history(user_id, session_id)

    assert [m.payload["content"] for m in history] == ["a", "b", "c"]
    assert [m.seq for m in history] == [1, 2, 3]
    assert history == [*first, *second]
    assert {(m.user_id, m.session_id) for m in history} == {(user_id, session_id)}


def test_payload_and_metadata_round_trip(
    store: MessageStore, user_id: str, session_id: str
) -> None:
    message = tool_call("call_1")
    [stored] = store.append(
        user_id, session_id, [message.model_copy(update={"metadata": {"k": [1]}})]
    )

    assert stored.payload == message.payload
    assert stored.metadata == {"k": [1]}
    assert stored.role == "assistant"
    assert stored.tokens == 10
    assert stored.created_at.tzinfo is not None


def test_between(store: MessageStore, user_id: str, session_id: str) -> None:
    store.append(user_id, session_id, [user("x" * n) for n in range(1, 6)])

    assert [m.seq for m in store.between(user_id, session_id, 1, 3)] == [2, 3]
    assert [m.seq for m in store.between(user_id, session_id, 3, None)] == [4, 5]
    assert store.between(user_id, session_id, 5, None) == []


def test_client_ids_make_appends_idempotent(
    store: MessageStore, user_id: str, session_id: str
) -> None:
    first = store.append(user_id, session_id, [user("a", "c1"), user("b", "c2")])

    again = store.append(user_id, session_id, [user("b again", "c2"), user("c", "c3")])

    assert again[0] == first[1]
    assert again[1].seq == 3
    assert [m.client_id for m in store.history(user_id, session_id)] == ["c1", "c2", "c3"]
    assert store.append(user_id, session_id, [user("a", "c1")]) == [first[0]]
    assert len(store.history(user_id, session_id)) == 3


def test_client_id_twice_in_one_batch_is_rejected(
    store: MessageStore, user_id: str, session_id: str
) -> None:
    with pytest.raises(InvalidInputError, match="twice"):
        store.append(user_id, session_id, [user("a", "same"), user("b", "same")])

    assert store.history(user_id, session_id) == []


def test_two_users_may_use_the_same_session_id(store: MessageStore, session_id: str) -> None:
    alice, bob = f"alice-{uuid.uuid4()}", f"bob-{uuid.uuid4()}"
    store.append(alice, session_id, [user("alice 1", "same-client-id"), user("alice 2")])

    [bobs] = store.append(bob, session_id, [user("bob 1", "same-client-id")])

    assert bobs.seq == 1
    assert [m.payload["content"] for m in store.history(bob, session_id)] == ["bob 1"]
    assert [m.payload["content"] for m in store.history(alice, session_id)] == [
        "alice 1",
        "alice 2",
    ]


def test_another_users_session_reads_exactly_like_an_unknown_one(
    store: MessageStore, user_id: str, session_id: str
) -> None:
    store.append(user_id, session_id, [user("mine"), user("also mine")])
    intruder = f"other-{uuid.uuid4()}"
    unknown = f"nobody-{uuid.uuid4()}"

    for probe in (session_id, unknown):
        assert store.history(intruder, probe) == []
        assert store.between(intruder, probe, 0, 10) == []
        assert list(store.walk_back(intruder, probe)) == []
        assert store.read_increment(intruder, probe, after_seq=0, max_tokens=100) == []

    assert [m.payload["content"] for m in store.history(user_id, session_id)] == [
        "mine",
        "also mine",
    ]


def test_validate_sees_the_open_tail_and_the_new_messages(
    store: MessageStore, user_id: str, session_id: str
) -> None:
    store.append(user_id, session_id, [user("hi"), tool_call("c1"), tool_result("c1")])
    seen: list[tuple[list[StoredMessage], list[NewMessage]]] = []
    new = [tool_call("c2")]

    store.append(user_id, session_id, new, validate=lambda tail, fresh: seen.append((tail, fresh)))

    [(tail, fresh)] = seen
    assert [m.seq for m in tail] == [2, 3]  # from the last non-tool message on
    assert fresh == new


def test_rejected_batch_stores_nothing(store: MessageStore, user_id: str, session_id: str) -> None:
    store.append(user_id, session_id, [user("hi"), tool_call("c1")])

    def reject(tail: list[StoredMessage], fresh: list[NewMessage]) -> None:
        raise Rejected("c1 is still open")

    with pytest.raises(Rejected, match="still open"):
        store.append(user_id, session_id, [user("next", "n1"), user("more")], validate=reject)

    assert len(store.history(user_id, session_id)) == 2
    # The rejected client id was not kept either: it can be appended afterwards.
    assert store.append(user_id, session_id, [user("next", "n1")])[0].seq == 3


def test_validate_is_not_called_when_everything_is_already_stored(
    store: MessageStore, user_id: str, session_id: str
) -> None:
    store.append(user_id, session_id, [user("a", "c1")])

    def fail(tail: list[StoredMessage], fresh: list[NewMessage]) -> None:
        raise AssertionError("called")

    assert store.append(user_id, session_id, [user("a", "c1")], validate=fail)[0].seq == 1


def test_eight_threads_appending_to_one_session(
    store: MessageStore, user_id: str, session_id: str
) -> None:
    writers, per_writer = 8, 25
    start = threading.Barrier(writers)
    errors: list[BaseException] = []

    def write(writer: int) -> None:
        try:
            start.wait()
            for index in range(per_writer):
                message = user(
                    f"{writer}/{index}", f"w{writer}-{index}", writer=writer, index=index
                )
                store.append(user_id, session_id, [message])
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert_complete_and_ordered(store.history(user_id, session_id), writers, per_writer)


@pytest.fixture
def message_queries(database: Database) -> Iterator[list[str]]:
    """The statements that read the messages table while the test runs."""
    statements: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "FROM messages" in statement:
            statements.append(statement)

    event.listen(database.engine, "before_cursor_execute", record)
    yield statements
    event.remove(database.engine, "before_cursor_execute", record)


def test_walk_back_reads_only_the_batches_it_yields(
    store: MessageStore, user_id: str, session_id: str, message_queries: list[str]
) -> None:
    store.append(user_id, session_id, [user(str(n)) for n in range(1, 101)])
    message_queries.clear()

    newest = list(itertools.islice(store.walk_back(user_id, session_id, batch=4), 6))

    assert [m.seq for m in newest] == [100, 99, 98, 97, 96, 95]
    assert len(message_queries) == 2


def test_walk_back_yields_everything_newest_first_and_stops_at_after_seq(
    store: MessageStore, user_id: str, session_id: str
) -> None:
    store.append(user_id, session_id, [user(str(n)) for n in range(1, 11)])

    assert [m.seq for m in store.walk_back(user_id, session_id, batch=3)] == list(range(10, 0, -1))
    assert [m.seq for m in store.walk_back(user_id, session_id, after_seq=7, batch=2)] == [
        10,
        9,
        8,
    ]
    assert list(store.walk_back(user_id, session_id, after_seq=10)) == []


def sized(tokens: int) -> NewMessage:
    return NewMessage(payload={"role": "user", "content": "t"}, role="user", tokens=tokens)


def test_read_increment_stops_before_the_token_limit(
    store: MessageStore, user_id: str, session_id: str
) -> None:
    store.append(user_id, session_id, [sized(n) for n in (10, 20, 30, 40, 50)])

    def seqs(**limits: int) -> list[int]:
        return [m.seq for m in store.read_increment(user_id, session_id, **limits)]

    assert seqs(after_seq=0, max_tokens=60) == [1, 2, 3]
    assert seqs(after_seq=0, max_tokens=59) == [1, 2]
    assert seqs(after_seq=2, max_tokens=1_000) == [3, 4, 5]
    assert seqs(after_seq=3, max_tokens=1) == [4]  # always at least one message
    assert seqs(after_seq=0, max_tokens=1_000, max_messages=2) == [1, 2]
    assert seqs(after_seq=5, max_tokens=1_000) == []


def test_read_increment_reads_the_increment_not_the_backlog(
    store: MessageStore,
    database: Database,
    user_id: str,
    session_id: str,
    message_queries: list[str],
) -> None:
    store.append(user_id, session_id, [sized(1) for _ in range(2_000)])
    rows: list[int] = []

    def count_rows(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "FROM messages" in statement:
            rows.append(cursor.rowcount)

    message_queries.clear()
    event.listen(database.engine, "after_cursor_execute", count_rows)
    try:
        increment = store.read_increment(
            user_id, session_id, after_seq=500, max_tokens=100, batch=64
        )
    finally:
        event.remove(database.engine, "after_cursor_execute", count_rows)

    assert [m.seq for m in increment] == list(range(501, 601))
    assert len(message_queries) == 2
    assert sum(rows) == 128  # two batches of 64 rows, whatever the backlog behind them

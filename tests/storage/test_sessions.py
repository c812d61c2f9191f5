"""Tests of MessageStore in one process: order, idempotency, ownership, validation, walk_back."""

import itertools
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event
from storage_samples import assert_complete_and_ordered, user

from storage import (
    Database,
    MessageStore,
    MessageValidationError,
    NewMessage,
    SessionOwnershipError,
    StoredMessage,
)


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
    assert store.last_seq(user_id, session_id) == 3
    assert store.session_owner(session_id) == user_id


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


def test_between_and_tokens_after(store: MessageStore, user_id: str, session_id: str) -> None:
    store.append(user_id, session_id, [user("x" * n) for n in range(1, 6)])

    assert [m.seq for m in store.between(user_id, session_id, 1, 3)] == [2, 3]
    assert store.tokens_after(user_id, session_id, 2) == (3 + 4 + 5, 3)
    assert store.tokens_after(user_id, session_id, 5) == (0, 0)


def test_client_ids_make_appends_idempotent(
    store: MessageStore, user_id: str, session_id: str
) -> None:
    first = store.append(user_id, session_id, [user("a", "c1"), user("b", "c2")])

    again = store.append(user_id, session_id, [user("b again", "c2"), user("c", "c3")])

    assert again[0] == first[1]
    assert again[1].seq == 3
    assert [m.client_id for m in store.history(user_id, session_id)] == ["c1", "c2", "c3"]
    assert store.append(user_id, session_id, [user("a", "c1")]) == [first[0]]
    assert store.last_seq(user_id, session_id) == 3


def test_client_id_twice_in_one_batch_is_rejected(
    store: MessageStore, user_id: str, session_id: str
) -> None:
    with pytest.raises(ValueError, match="twice"):
        store.append(user_id, session_id, [user("a", "same"), user("b", "same")])

    assert store.history(user_id, session_id) == []


def test_session_of_another_user_cannot_be_written_or_read(
    store: MessageStore, user_id: str, session_id: str
) -> None:
    store.append(user_id, session_id, [user("mine")])
    intruder = f"other-{uuid.uuid4()}"

    with pytest.raises(SessionOwnershipError):
        store.append(intruder, session_id, [user("theirs")])
    for read in (
        lambda: store.history(intruder, session_id),
        lambda: store.between(intruder, session_id, 0, 10),
        lambda: store.tokens_after(intruder, session_id, 0),
        lambda: store.last_seq(intruder, session_id),
        lambda: store.walk_back(intruder, session_id),
    ):
        with pytest.raises(SessionOwnershipError):
            read()

    assert [m.payload["content"] for m in store.history(user_id, session_id)] == ["mine"]
    assert store.session_owner(session_id) == user_id


def test_unknown_session_reads_as_empty(store: MessageStore, user_id: str) -> None:
    unknown = f"nobody-{uuid.uuid4()}"

    assert store.history(user_id, unknown) == []
    assert list(store.walk_back(user_id, unknown)) == []
    assert store.last_seq(user_id, unknown) == 0
    assert store.tokens_after(user_id, unknown, 0) == (0, 0)
    assert store.session_owner(unknown) is None


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
        raise MessageValidationError("c1 is still open")

    with pytest.raises(MessageValidationError, match="still open"):
        store.append(user_id, session_id, [user("next", "n1"), user("more")], validate=reject)

    assert store.last_seq(user_id, session_id) == 2
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

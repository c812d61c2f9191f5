"""Tests of bad and unusual input: ids, NULs, surrogates, non-JSON values, huge batches, errors."""

import uuid
from datetime import datetime
from typing import Any

import pytest
from storage_samples import user

from storage import (
    MAX_ID_LENGTH,
    Database,
    DatabaseUnavailableError,
    InvalidInputError,
    MessageStore,
    NewMessage,
    SummaryStore,
)

SECRET = "the-secret-content-7f3a"


@pytest.fixture
def store(database: Database) -> MessageStore:
    return MessageStore(database)


def tool_result(content: str) -> NewMessage:
    payload = {"role": "tool", "tool_call_id": "call_1", "content": content}
    return NewMessage(payload=payload, role="tool", tokens=1)


@pytest.mark.parametrize(
    "text",
    [
        "\x00",
        "shell output\x00\x00with NULs\x00",
        "\\u0000",  # the escape itself, as text
        "\\\x00\\\\u0000\\",
        "emoji 😀 and 中文 \x00",
    ],
)
def test_nul_characters_round_trip_in_content_tool_results_and_metadata(
    store: MessageStore, user_id: str, session_id: str, text: str
) -> None:
    messages = [
        user(text, client_id="c1", note=text, nested={text: [text, {"k": text}]}),
        tool_result(text),
    ]

    returned = store.append(user_id, session_id, messages)
    stored = store.history(user_id, session_id)

    for got in (returned, stored):
        assert [m.payload for m in got] == [m.payload for m in messages]
        assert [m.metadata for m in got] == [m.metadata for m in messages]


def test_json_documents_keep_key_order_and_unicode(
    store: MessageStore, user_id: str, session_id: str
) -> None:
    payload = {"role": "user", "content": "x", "z": 1, "a": {"b": [1.5, None, True]}}

    store.append(user_id, session_id, [NewMessage(payload=payload, role="user", tokens=1)])

    [stored] = store.history(user_id, session_id)
    assert list(stored.payload) == ["role", "content", "z", "a"]
    assert stored.payload == payload


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        (user("lone \ud800 surrogate"), "message 1 payload contains a lone surrogate"),
        (user("ok", bad="\udfff"), "message 1 metadata contains a lone surrogate"),
        (user("ok", when=datetime(2025, 1, 1)), "message 1 metadata is not JSON"),
        (user("ok", ratio=float("nan")), "message 1 metadata is not JSON"),
        (user("ok", "id\x00with nul"), "message 1 client id contains a NUL"),
    ],
)
def test_a_message_that_cannot_be_stored_is_named_and_nothing_is_stored(
    store: MessageStore, user_id: str, session_id: str, message: NewMessage, problem: str
) -> None:
    with pytest.raises(InvalidInputError, match=problem) as raised:
        store.append(user_id, session_id, [user("fine"), message])

    assert isinstance(raised.value, ValueError)
    assert store.history(user_id, session_id) == []


def test_nesting_too_deep_is_a_clear_error(
    store: MessageStore, user_id: str, session_id: str
) -> None:
    deep: dict[str, Any] = {}
    for _ in range(100_000):
        deep = {"d": deep}

    with pytest.raises(InvalidInputError, match="message 0 metadata is nested too deeply"):
        store.append(user_id, session_id, [user("x").model_copy(update={"metadata": deep})])


BAD_IDS: list[Any] = [None, "", 42, "x" * (MAX_ID_LENGTH + 1), "x" * 3_000, "a\x00b", "\ud800"]


@pytest.mark.parametrize("bad", BAD_IDS)
def test_unusable_user_and_session_ids_are_clear_errors(
    store: MessageStore, database: Database, bad: Any
) -> None:
    summaries = SummaryStore(database)
    calls = [
        lambda: store.append(bad, "s", [user("x")]),
        lambda: store.append("u", bad, [user("x")]),
        lambda: store.history(bad, "s"),
        lambda: store.history("u", bad),
        lambda: store.walk_back("u", bad),
        lambda: store.read_increment(bad, "s", after_seq=0, max_tokens=10),
        lambda: summaries.get("u", bad),
    ]
    for call in calls:
        with pytest.raises(InvalidInputError, match=r"user_id|session_id") as raised:
            call()
        assert len(str(raised.value)) < 200


@pytest.mark.parametrize("bad", ["", "x" * (MAX_ID_LENGTH + 1), "x" * 3_000])
def test_unusable_client_ids_are_clear_errors(
    store: MessageStore, user_id: str, session_id: str, bad: str
) -> None:
    with pytest.raises(InvalidInputError, match="message 0 client id"):
        store.append(user_id, session_id, [user("x", bad)])

    assert store.history(user_id, session_id) == []


def test_ids_of_the_longest_allowed_length_work(store: MessageStore) -> None:
    # Four-byte characters: the longest id in bytes that is allowed.
    longest = "😀" * MAX_ID_LENGTH

    [stored] = store.append(longest, longest, [user("x", longest)])

    assert (stored.user_id, stored.session_id, stored.client_id) == (longest, longest, longest)
    assert store.history(longest, longest) == [stored]


@pytest.mark.slow
def test_a_batch_of_twelve_thousand_messages_is_stored_whole(
    store: MessageStore, user_id: str, session_id: str
) -> None:
    batch = [user(f"m{index}", f"c{index}") for index in range(12_000)]

    stored = store.append(user_id, session_id, batch)

    assert [m.seq for m in stored] == list(range(1, 12_001))
    assert [m.client_id for m in stored] == [m.client_id for m in batch]
    assert len(store.history(user_id, session_id)) == 12_000
    # Sending the same batch again is idempotent, by client id (one array parameter).
    assert store.append(user_id, session_id, batch) == stored


@pytest.mark.slow
def test_a_huge_batch_rejected_by_the_database_stores_nothing(
    store: MessageStore, user_id: str, session_id: str
) -> None:
    store.append(user_id, session_id, [user("before")])
    batch = [user(f"{SECRET} {index}") for index in range(12_000)]
    # Postgres rejects the last one ("integer out of range"), after 11 pages were inserted.
    batch[-1] = batch[-1].model_copy(update={"tokens": 2**40})

    with pytest.raises(InvalidInputError) as raised:
        store.append(user_id, session_id, batch)

    assert not isinstance(raised.value, DatabaseUnavailableError)
    message = str(raised.value)
    assert "out of range" in message
    assert SECRET not in message and len(message) < 400
    assert [m.payload["content"] for m in store.history(user_id, session_id)] == ["before"]


def test_long_ids_that_differ_only_at_the_end_are_distinct(store: MessageStore) -> None:
    prefix = "p" * (MAX_ID_LENGTH - 36)
    first, second = prefix + str(uuid.uuid4()), prefix + str(uuid.uuid4())

    store.append(first, "s", [user("one")])
    store.append(second, "s", [user("two")])

    assert [m.payload["content"] for m in store.history(first, "s")] == ["one"]
    assert [m.payload["content"] for m in store.history(second, "s")] == ["two"]

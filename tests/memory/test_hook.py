"""The agent-loop hook: a loop's own messages in, the assembled context out, each stored once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import event

from memory import InvalidHistoryError, Memory, Settings
from memory.hook import context_for, count_stored, fingerprint, record_reply, split_request
from retrieval import MINILM_NAME, HashingEmbedder
from storage import Database


@pytest.fixture(scope="module")
def hook_database(database_url: str) -> Iterator[Database]:
    """This module's own handle on the shared database."""
    with Database.open(database_url) as opened:
        yield opened


@pytest.fixture
def mem(hook_database: Database) -> Memory:
    settings = Settings(summary={"debounce_seconds": 0})
    return Memory(hook_database, settings, embedder=HashingEmbedder(name=MINILM_NAME))


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def contents(mem: Memory, user_id: str, session_id: str) -> list[Any]:
    return [m.payload.get("content") for m in mem.history(user_id=user_id, session_id=session_id)]


# count_stored: pure


def test_a_resent_history_is_stored_up_to_where_the_stored_tail_ends() -> None:
    assert count_stored(["a", "b", "c", "d"], ["a", "b"]) == 2
    assert count_stored(["b", "c", "d"], ["a", "b", "c"]) == 2  # a client that trimmed
    assert count_stored(["a", "b"], ["a", "b"]) == 2  # a retry: nothing new
    assert count_stored(["x"], ["a", "b"]) == 0  # only the new message sent
    assert count_stored(["a"], []) == 0


def test_a_repeated_message_is_new_unless_the_session_ends_with_it_unanswered() -> None:
    assert count_stored(["ok"], ["ok", "echo"]) == 0
    assert count_stored(["ok"], ["echo", "ok"]) == 1
    assert count_stored(["ok", "echo", "ok"], ["ok", "echo"]) == 2


@given(
    stored=st.lists(st.sampled_from("abc"), max_size=12),
    kept=st.integers(min_value=0, max_value=12),
    new=st.lists(st.sampled_from("xyz"), min_size=1, max_size=4),
)
def test_whatever_part_of_the_stored_tail_is_resent_only_the_new_messages_are_new(
    stored: list[str], kept: int, new: list[str]
) -> None:
    resent = stored[len(stored) - min(kept, len(stored)) :]

    assert count_stored(resent + new, stored) == len(resent)


def test_fingerprints_ignore_what_is_never_stored_or_sent() -> None:
    plain = {"role": "assistant", "content": "hi"}
    from_the_sdk = {**plain, "refusal": None, "function_call": None, "annotations": []}

    assert fingerprint(from_the_sdk) == fingerprint(plain)
    assert fingerprint({**plain, "id": "m1", "metadata": {"a": 1}}) == fingerprint(plain)
    assert fingerprint({"content": "hi", "role": "assistant"}) == fingerprint(plain)
    assert fingerprint(assistant("hi!")) != fingerprint(plain)


def test_leading_system_messages_become_the_system_text() -> None:
    request = split_request(
        [
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": [{"type": "text", "text": "Use metric units."}]},
            user("hi"),
            {"role": "system", "content": "later"},
        ]
    )

    assert request.system == "Be brief.\n\nUse metric units."
    assert request.conversation == [user("hi"), {"role": "system", "content": "later"}]


# context_for and record_reply: on the real database


def test_a_loop_that_resends_everything_stores_each_message_once(
    mem: Memory, user_id: str, session_id: str
) -> None:
    messages: list[Any] = [{"role": "system", "content": "Be brief."}]
    for turn in range(3):
        messages.append(user(f"question {turn}"))
        ctx = context_for(mem, messages, user_id=user_id, session_id=session_id)
        assert ctx.messages[0] == {"role": "system", "content": "Be brief."}
        assert ctx.messages[-1] == user(f"question {turn}")
        reply = assistant(f"answer {turn}")
        record_reply(mem, reply, user_id=user_id, session_id=session_id)
        messages.append(reply)

    assert contents(mem, user_id, session_id) == [
        "question 0",
        "answer 0",
        "question 1",
        "answer 1",
        "question 2",
        "answer 2",
    ]


def test_a_tool_loop_records_the_results_and_goes_on_with_the_turn(
    mem: Memory, user_id: str, session_id: str
) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "now", "arguments": "{}"}}
    asked = {"role": "assistant", "content": None, "tool_calls": [call]}
    messages: list[Any] = [user("what time is it?")]
    context_for(mem, messages, user_id=user_id, session_id=session_id)
    record_reply(mem, asked, user_id=user_id, session_id=session_id)
    messages += [asked, {"role": "tool", "tool_call_id": "c1", "content": "10:00"}]

    ctx = context_for(mem, messages, user_id=user_id, session_id=session_id)

    assert [m["role"] for m in ctx.messages] == ["user", "assistant", "tool"]
    assert contents(mem, user_id, session_id) == ["what time is it?", None, "10:00"]


def test_a_client_that_sends_only_its_new_messages_stores_them(
    mem: Memory, user_id: str, session_id: str
) -> None:
    for text in ("ok", "ok"):
        context_for(mem, [user(text)], user_id=user_id, session_id=session_id)
        record_reply(mem, assistant("noted"), user_id=user_id, session_id=session_id)

    assert contents(mem, user_id, session_id) == ["ok", "noted", "ok", "noted"]


def test_a_reply_that_was_never_recorded_comes_in_with_the_next_request(
    mem: Memory, user_id: str, session_id: str
) -> None:
    context_for(mem, [user("one")], user_id=user_id, session_id=session_id)
    # The loop got a reply but it was not recorded (the database was away a moment).
    messages = [user("one"), assistant("reply one"), user("two")]

    context_for(mem, messages, user_id=user_id, session_id=session_id)

    assert contents(mem, user_id, session_id) == ["one", "reply one", "two"]


def test_turns_of_another_client_in_between_are_not_taken_for_new_ones(
    mem: Memory, user_id: str, session_id: str
) -> None:
    context_for(mem, [user("mine")], user_id=user_id, session_id=session_id)
    record_reply(mem, assistant("to mine"), user_id=user_id, session_id=session_id)
    context_for(mem, [user("theirs")], user_id=user_id, session_id=session_id)
    record_reply(mem, assistant("to theirs"), user_id=user_id, session_id=session_id)

    mine = [user("mine"), assistant("to mine"), user("mine again")]
    context_for(mem, mine, user_id=user_id, session_id=session_id)

    assert contents(mem, user_id, session_id) == [
        "mine",
        "to mine",
        "theirs",
        "to theirs",
        "mine again",
    ]


def test_a_refused_history_stores_nothing(mem: Memory, user_id: str, session_id: str) -> None:
    orphan = {"role": "tool", "tool_call_id": "nowhere", "content": "42"}

    with pytest.raises(InvalidHistoryError):
        context_for(
            mem, [user("hi"), assistant("hello"), orphan], user_id=user_id, session_id=session_id
        )

    assert contents(mem, user_id, session_id) == []


def test_when_another_clients_input_lands_just_after_this_one_this_one_is_answered(
    mem: Memory, user_id: str, session_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_prepare = mem.prepare

    def racing_prepare(**request: Any) -> Any:
        # The race of two clients, in order: this input is stored, the other client's input
        # is stored, then this request's window is loaded (it ends with the other input).
        real_prepare(**request)
        real_prepare(user_id=user_id, session_id=session_id, input="theirs")
        return real_prepare(user_id=user_id, session_id=session_id)

    monkeypatch.setattr(mem, "prepare", racing_prepare)

    ctx = context_for(mem, [user("mine")], user_id=user_id, session_id=session_id)

    assert ctx.messages[-2:] == [user("theirs"), user("mine")]
    assert contents(mem, user_id, session_id) == ["mine", "theirs"]  # stored as they came


def test_recent_history_reads_the_newest_messages_in_order(
    mem: Memory, user_id: str, session_id: str
) -> None:
    mem.record(
        user_id=user_id,
        session_id=session_id,
        messages=[user("a"), assistant("b"), user("c"), assistant("d")],
    )

    newest = mem.recent_history(user_id=user_id, session_id=session_id, limit=3)

    assert [m.payload["content"] for m in newest] == ["b", "c", "d"]
    assert [m.seq for m in newest] == [2, 3, 4]
    assert mem.recent_history(user_id=user_id, session_id=session_id, limit=0) == []
    assert mem.recent_history(user_id=user_id, session_id="nothing-here", limit=5) == []


def test_a_request_reads_no_more_stored_messages_than_it_could_resend(
    hook_database: Database, user_id: str, session_id: str
) -> None:
    # Without kept reports: their writer thread's statements would land among the counted
    # ones by chance (CI saw one first).
    settings = Settings(summary={"debounce_seconds": 0}, reports={"enabled": False})
    mem = Memory(hook_database, settings, embedder=HashingEmbedder(name=MINILM_NAME))
    for number in range(40):
        context_for(mem, [user(f"question {number}")], user_id=user_id, session_id=session_id)
        record_reply(mem, assistant(f"answer {number}"), user_id=user_id, session_id=session_id)
    rows: list[int] = []

    def count(conn: Any, cursor: Any, *args: Any) -> None:
        rows.append(cursor.rowcount)

    event.listen(hook_database.engine, "after_cursor_execute", count)
    try:
        context_for(mem, [user("one more")], user_id=user_id, session_id=session_id)
    finally:
        event.remove(hook_database.engine, "after_cursor_execute", count)

    # The first statement reads the stored tail the request is compared with: one message,
    # not LOOKBACK (32).
    assert rows[0] == 1
    assert contents(mem, user_id, session_id)[-2:] == ["answer 39", "one more"]

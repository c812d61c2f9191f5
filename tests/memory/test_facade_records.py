"""What ``record`` and ``prepare`` accept and store, against the real embedded Postgres.

A batch is stored whole or recognised as a replay; open tool calls never stick a session;
messages the chat API would refuse are refused; the ``openai`` SDK's own objects are accepted
and their response-only fields never stored; metadata is made JSON or refused by name.
"""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from openai.types.chat import ChatCompletionMessage
from openai.types.chat.chat_completion_message_function_tool_call import (
    ChatCompletionMessageFunctionToolCall,
    Function,
)

from memory import (
    INTERRUPTED_CONTENT,
    InvalidHistoryError,
    Memory,
    OpenCall,
    RecordConflictError,
    Settings,
    ToolCallInterruptedError,
)
from memory.session.incoming import METADATA_MAX_DEPTH
from retrieval import MINILM_NAME, HashingEmbedder
from storage import Database


@pytest.fixture(scope="module")
def records_database(database_url: str) -> Iterator[Database]:
    """This module's own handle on the shared database."""
    with Database.open(database_url) as opened:
        yield opened


@pytest.fixture
def mem(records_database: Database) -> Memory:
    """Cards embedded by the hashing fake (named as the model the shared database records):
    no test here is about recall."""
    settings = Settings(summary={"debounce_seconds": 0})
    return Memory(records_database, settings, embedder=HashingEmbedder(name=MINILM_NAME))


def call(call_id: str, name: str = "track") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}
        ],
    }


def result(call_id: str, content: str = "shipped") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def roles(mem: Memory, user_id: str, session_id: str) -> list[str]:
    return [m.role for m in mem.history(user_id=user_id, session_id=session_id)]


# 1. All or nothing, idempotent by client id.


def test_a_replayed_batch_is_a_no_op_returning_the_stored_messages(
    mem: Memory, user_id: str, session_id: str
) -> None:
    mem.prepare(user_id=user_id, session_id=session_id, input="Where is my order?")
    batch = [call("c1") | {"id": "resp-1"}, result("c1") | {"id": "evt-17", "metadata": {"a": 1}}]
    first = mem.record(user_id=user_id, session_id=session_id, messages=batch)

    again = mem.record(user_id=user_id, session_id=session_id, messages=batch)

    assert again == first
    assert roles(mem, user_id, session_id) == ["user", "assistant", "tool"]
    mem.prepare(user_id=user_id, session_id=session_id)  # the session still works


def test_a_partly_stored_batch_is_a_conflict_and_stores_nothing(
    mem: Memory, user_id: str, session_id: str
) -> None:
    # The case: the tool result's id was stored, its call was not.
    mem.prepare(user_id=user_id, session_id=session_id, input="Where is my order?")
    mem.record(
        user_id=user_id,
        session_id=session_id,
        messages=[call("c0"), result("c0") | {"id": "evt-17"}],
    )

    with pytest.raises(RecordConflictError) as caught:
        mem.record(
            user_id=user_id,
            session_id=session_id,
            messages=[call("c1"), result("c1") | {"id": "evt-17"}],
        )

    assert caught.value.conflicts == [
        "message 1: id 'evt-17' is already stored, but other messages of the batch are not "
        "(a batch is stored whole or recognised as a whole replay)"
    ]
    assert roles(mem, user_id, session_id) == ["user", "assistant", "tool"]
    mem.prepare(user_id=user_id, session_id=session_id)  # not broken by the attempt


def test_a_huge_conflicting_batch_gets_a_short_message_and_every_conflict_in_its_attribute(
    mem: Memory, user_id: str, session_id: str
) -> None:
    turns = [
        message
        for i in range(2_000)
        for message in ({"role": "user", "content": f"q{i}", "id": f"q{i}"},
                        {"role": "assistant", "content": f"a{i}"})
    ]  # fmt: skip
    mem.record(user_id=user_id, session_id=session_id, messages=turns)

    # The answers carry no id: the batch is partly recognised, a conflict at every question.
    with pytest.raises(RecordConflictError) as caught:
        mem.record(user_id=user_id, session_id=session_id, messages=turns)

    assert len(caught.value.conflicts) == 2_000
    message = str(caught.value)
    assert caught.value.conflicts[9] in message and caught.value.conflicts[10] not in message
    assert message.endswith("; and 1990 more (see .conflicts)") and len(message) < 2_000
    assert len(mem.history(user_id=user_id, session_id=session_id)) == 4_000  # nothing added
    problems = InvalidHistoryError([f"message {i}: bad" for i in range(500)])
    assert str(problems).endswith("message 9: bad; and 490 more (see .problems)")


@pytest.mark.parametrize(
    ("changed", "what"),
    [
        pytest.param({"content": "other"}, "content", id="content"),
        pytest.param({"metadata": {"v": 2}}, "metadata", id="metadata"),
    ],
)
def test_an_id_reused_with_other_content_is_a_conflict_naming_its_seq(
    mem: Memory, user_id: str, session_id: str, changed: dict[str, Any], what: str
) -> None:
    reply = {"role": "assistant", "content": "Hello", "id": "a-1", "metadata": {"v": 1}}
    mem.prepare(user_id=user_id, session_id=session_id, input="Hi")
    mem.record(user_id=user_id, session_id=session_id, messages=[reply])

    with pytest.raises(RecordConflictError) as caught:
        mem.record(user_id=user_id, session_id=session_id, messages=[reply | changed])

    assert caught.value.conflicts == [f"message 0: seq 2 (id 'a-1') is stored with other {what}"]
    assert isinstance(caught.value, ValueError)
    stored = mem.history(user_id=user_id, session_id=session_id)[-1]
    assert (stored.payload["content"], stored.metadata) == ("Hello", {"v": 1})


def test_a_retried_input_with_an_id_is_stored_once(
    mem: Memory, user_id: str, session_id: str
) -> None:
    asked = {"role": "user", "content": "Hi", "id": "u-1"}
    mem.prepare(user_id=user_id, session_id=session_id, input=asked)
    mem.prepare(user_id=user_id, session_id=session_id, input=asked)

    with pytest.raises(RecordConflictError, match="other content"):
        mem.prepare(user_id=user_id, session_id=session_id, input=asked | {"content": "Hey"})
    assert roles(mem, user_id, session_id) == ["user"]


def test_an_input_id_of_an_earlier_question_with_other_content_is_a_conflict(
    mem: Memory, user_id: str, session_id: str
) -> None:
    # A rerun of an edited script: its first question's id now comes with another question.
    for number, question in enumerate(["What is my order's status?", "And the refund?"]):
        asked = {"role": "user", "content": question, "id": f"q{number}"}
        mem.prepare(user_id=user_id, session_id=session_id, input=asked)
        answer = {"role": "assistant", "content": f"answer {number}", "id": f"a{number}"}
        mem.record(user_id=user_id, session_id=session_id, messages=[answer])
    before = mem.history(user_id=user_id, session_id=session_id)

    other = {"role": "user", "content": "Where do I live?", "id": "q0"}
    with pytest.raises(RecordConflictError) as caught:
        mem.prepare(user_id=user_id, session_id=session_id, input=other)
    assert caught.value.conflicts == ["message 0: seq 1 (id 'q0') is stored with other content"]
    # The same question again is a replay: nothing new is stored either way.
    same = {"role": "user", "content": "What is my order's status?", "id": "q0"}
    mem.prepare(user_id=user_id, session_id=session_id, input=same)
    assert mem.history(user_id=user_id, session_id=session_id) == before


@pytest.mark.parametrize(
    ("messages", "kind"),
    [
        pytest.param({"role": "user", "content": "Hi"}, "a single dict", id="dict"),
        pytest.param(
            ChatCompletionMessage(role="assistant", content="Hello"),
            "a single chat message object",
            id="sdk-object",
        ),
        pytest.param("Hi", "str", id="string"),
        pytest.param(None, "NoneType", id="none"),
    ],
)
def test_record_needs_a_list_of_messages_and_says_so(
    mem: Memory, user_id: str, session_id: str, messages: Any, kind: str
) -> None:
    with pytest.raises(InvalidHistoryError) as caught:
        mem.record(user_id=user_id, session_id=session_id, messages=messages)

    assert str(caught.value.problems[0]).startswith(
        f"messages must be a list of messages, not {kind}"
    )
    assert mem.history(user_id=user_id, session_id=session_id) == []


@pytest.mark.parametrize(
    "system",
    [["Be brief."], {"role": "system", "content": "Be brief."}, 42],
    ids=["list", "dict", "int"],
)
def test_a_system_prompt_that_is_not_a_string_is_a_clear_error_naming_system(
    mem: Memory, user_id: str, session_id: str, system: Any
) -> None:
    for asked in ("Hi", None):
        with pytest.raises(InvalidHistoryError) as caught:
            mem.prepare(user_id=user_id, session_id=session_id, input=asked, system=system)
        assert caught.value.problems[0].what == (
            f"system must be the system prompt as a string (or None), not {type(system).__name__}"
        )
    assert mem.history(user_id=user_id, session_id=session_id) == []  # the input not stored


# 2. Open tool calls never stick a session.


def test_a_new_input_closes_open_calls_with_a_marked_result(
    mem: Memory, user_id: str, session_id: str
) -> None:
    mem.prepare(user_id=user_id, session_id=session_id, input="Where is my order?")
    mem.record(user_id=user_id, session_id=session_id, messages=[call("c1"), result("c1")])
    parallel = call("c2") | {
        "tool_calls": [*call("c2")["tool_calls"], *call("c3", "refund")["tool_calls"]]
    }
    mem.record(user_id=user_id, session_id=session_id, messages=[parallel, result("c2")])
    # The agent crashed before c3 returned.
    assert mem.open_calls(user_id=user_id, session_id=session_id) == [
        OpenCall("c3", "refund", "{}", 4)
    ]

    context = mem.prepare(user_id=user_id, session_id=session_id, input="Hello? Any news?")

    assert context.messages[-2:] == [
        {"role": "tool", "tool_call_id": "c3", "content": INTERRUPTED_CONTENT},
        {"role": "user", "content": "Hello? Any news?"},
    ]
    [closed] = context.report.interrupted_calls
    assert (closed.call_id, closed.name, closed.call_seq, closed.result_seq) == (
        "c3",
        "refund",
        4,
        6,
    )
    history = mem.history(user_id=user_id, session_id=session_id)
    assert history[5].metadata == {"stratamem": {"interrupted": True}}
    assert mem.open_calls(user_id=user_id, session_id=session_id) == []
    # The next request reports nothing new.
    assert mem.prepare(user_id=user_id, session_id=session_id).report.interrupted_calls == ()


def test_a_result_for_a_call_closed_as_interrupted_is_a_clear_error(
    mem: Memory, user_id: str, session_id: str
) -> None:
    mem.prepare(user_id=user_id, session_id=session_id, input="Where is my order?")
    mem.record(user_id=user_id, session_id=session_id, messages=[call("c1")])
    mem.prepare(user_id=user_id, session_id=session_id, input="Never mind.")

    with pytest.raises(ToolCallInterruptedError) as caught:
        mem.record(user_id=user_id, session_id=session_id, messages=[result("c1")])

    assert caught.value.call_ids == ["c1"]
    assert "'c1' was closed as interrupted (no result) by seq 3" in str(caught.value)
    assert roles(mem, user_id, session_id) == ["user", "assistant", "tool", "user"]


def test_closing_open_calls_by_hand_is_one_call(mem: Memory, user_id: str, session_id: str) -> None:
    mem.prepare(user_id=user_id, session_id=session_id, input="Where is my order?")
    mem.record(user_id=user_id, session_id=session_id, messages=[call("c1")])
    with pytest.raises(InvalidHistoryError, match="c1"):
        mem.prepare(user_id=user_id, session_id=session_id)  # the loop cannot go on as is

    closed = mem.close_open_calls(user_id=user_id, session_id=session_id)

    assert [(m.seq, m.payload) for m in closed] == [(3, result("c1", INTERRUPTED_CONTENT))]
    assert mem.close_open_calls(user_id=user_id, session_id=session_id) == []
    context = mem.prepare(user_id=user_id, session_id=session_id)
    assert context.messages[-1] == result("c1", INTERRUPTED_CONTENT)


# 5. What the API would refuse is refused, in record and prepare alike.


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        pytest.param(
            {"role": "assistant"},
            "an assistant message needs content or tool_calls",
            id="empty-assistant",
        ),
        pytest.param(
            {"role": "assistant", "content": None, "tool_calls": []},
            "tool_calls must not be an empty list (leave the key out)",
            id="empty-tool-calls",
        ),
        pytest.param({"role": "user", "content": None}, "a user message needs content", id="user"),
        pytest.param(
            {"role": "user", "content": []}, "content must not be an empty list", id="no-parts"
        ),
        pytest.param(
            {"role": "tool", "tool_call_id": "c1"}, "a tool message needs content", id="tool"
        ),
        pytest.param(
            {"role": "user", "content": "x", "tool_calls": call("c9")["tool_calls"]},
            "a user message cannot have tool_calls",
            id="user-calls",
        ),
    ],
)
def test_messages_the_api_would_refuse_are_refused_and_nothing_is_stored(
    mem: Memory, user_id: str, session_id: str, message: dict[str, Any], problem: str
) -> None:
    mem.prepare(user_id=user_id, session_id=session_id, input="Hi")
    mem.record(user_id=user_id, session_id=session_id, messages=[call("c1")])

    with pytest.raises(InvalidHistoryError) as caught:
        mem.record(user_id=user_id, session_id=session_id, messages=[result("c1"), message])

    assert [str(p) for p in caught.value.problems] == [f"message 1: {problem}"]
    assert roles(mem, user_id, session_id) == ["user", "assistant"]


def test_prepare_refuses_an_input_the_api_would_refuse(
    mem: Memory, user_id: str, session_id: str
) -> None:
    with pytest.raises(InvalidHistoryError, match="a user message needs content"):
        mem.prepare(user_id=user_id, session_id=session_id, input={"role": "user"})
    assert mem.history(user_id=user_id, session_id=session_id) == []


# 14. The input is a user message.


@pytest.mark.parametrize("role", ["developer", "system", "assistant"])
def test_an_input_of_another_role_is_a_clear_error(
    mem: Memory, user_id: str, session_id: str, role: str
) -> None:
    with pytest.raises(InvalidHistoryError, match=f"input must be a user message, not '{role}'"):
        mem.prepare(user_id=user_id, session_id=session_id, input={"role": role, "content": "x"})
    assert mem.history(user_id=user_id, session_id=session_id) == []


# 6. The openai SDK's own objects.


def sdk_reply(**fields: Any) -> ChatCompletionMessage:
    return ChatCompletionMessage(role="assistant", **fields)


def test_the_sdks_message_objects_are_recorded_without_response_only_fields(
    mem: Memory, user_id: str, session_id: str
) -> None:
    calling = sdk_reply(
        content=None,
        refusal=None,
        annotations=[],
        tool_calls=[
            ChatCompletionMessageFunctionToolCall(
                id="c1", type="function", function=Function(name="track", arguments="{}")
            )
        ],
    )
    answer = sdk_reply(content="It shipped yesterday.", refusal=None, audio=None)
    mem.prepare(user_id=user_id, session_id=session_id, input="Where is my order?")

    mem.record(user_id=user_id, session_id=session_id, messages=[calling, result("c1")])
    mem.record(user_id=user_id, session_id=session_id, messages=[answer])

    stored = [m.payload for m in mem.history(user_id=user_id, session_id=session_id)]
    assert stored[1:] == [
        call("c1"),
        result("c1"),
        {"role": "assistant", "content": answer.content},
    ]
    sent = mem.prepare(user_id=user_id, session_id=session_id, input="Thanks").messages
    assert all(not {"refusal", "audio", "annotations", "function_call"} & set(m) for m in sent)


def test_dicts_with_none_fields_are_accepted_and_stored_without_them(
    mem: Memory, user_id: str, session_id: str
) -> None:
    dumped = sdk_reply(content="Hello", refusal=None).model_dump()
    assert dumped["function_call"] is None and dumped["tool_calls"] is None
    mem.prepare(
        user_id=user_id,
        session_id=session_id,
        input={"role": "user", "content": "Hi", "name": None},
    )

    mem.record(user_id=user_id, session_id=session_id, messages=[dumped])

    stored = [m.payload for m in mem.history(user_id=user_id, session_id=session_id)]
    assert stored == [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]


def test_a_refusal_is_kept_as_the_content(mem: Memory, user_id: str, session_id: str) -> None:
    mem.prepare(user_id=user_id, session_id=session_id, input="Help me hack it")

    mem.record(
        user_id=user_id,
        session_id=session_id,
        messages=[sdk_reply(content=None, refusal="I can't help with that.")],
    )

    last = mem.history(user_id=user_id, session_id=session_id)[-1]
    assert last.payload == {"role": "assistant", "content": "I can't help with that."}


# 12. Metadata.


def test_metadata_is_converted_as_pydantics_json_mode_does(
    mem: Memory, user_id: str, session_id: str
) -> None:
    when = dt.datetime(2025, 6, 1, 12, 30, tzinfo=dt.UTC)
    key = uuid.UUID("12345678-1234-5678-1234-567812345678")
    metadata = {
        "at": when,
        "day": dt.date(2025, 6, 1),
        "key": key,
        "price": decimal.Decimal("19.90"),
        "tags": ("a", "b"),
        "nested": {"ok": [1, 2.5, None, True]},
    }

    mem.prepare(
        user_id=user_id,
        session_id=session_id,
        input={"role": "user", "content": "Hi", "metadata": metadata},
    )

    [stored] = mem.history(user_id=user_id, session_id=session_id)
    assert stored.metadata == {
        "at": "2025-06-01T12:30:00Z",
        "day": "2025-06-01",
        "key": str(key),
        "price": "19.90",
        "tags": ["a", "b"],
        "nested": {"ok": [1, 2.5, None, True]},
    }


def test_metadata_without_a_json_form_is_refused_naming_the_message(
    mem: Memory, user_id: str, session_id: str
) -> None:
    mem.prepare(user_id=user_id, session_id=session_id, input="Hi")
    bad = {"role": "assistant", "content": "x", "metadata": {"handle": object()}}

    with pytest.raises(InvalidHistoryError, match="message 1: metadata is not JSON-compatible"):
        mem.record(
            user_id=user_id,
            session_id=session_id,
            messages=[{"role": "assistant", "content": "fine"}, bad],
        )
    assert roles(mem, user_id, session_id) == ["user"]


def test_metadata_nested_too_deep_is_a_clear_error_not_a_recursion_error(
    mem: Memory, user_id: str, session_id: str
) -> None:
    deep: dict[str, Any] = {}
    inner = deep
    for _ in range(5_000):
        inner["x"] = {}
        inner = inner["x"]
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    within: dict[str, Any] = {}
    inner = within
    for _ in range(METADATA_MAX_DEPTH - 1):
        inner["x"] = {}
        inner = inner["x"]

    for metadata in (deep, cyclic):
        with pytest.raises(InvalidHistoryError, match=f"deeper than {METADATA_MAX_DEPTH} levels"):
            mem.prepare(
                user_id=user_id,
                session_id=session_id,
                input={"role": "user", "content": "Hi", "metadata": metadata},
            )
    mem.prepare(
        user_id=user_id,
        session_id=session_id,
        input={"role": "user", "content": "Hi", "metadata": within},
    )
    assert roles(mem, user_id, session_id) == ["user"]


# 7. Errors name stored messages by seq and client id.


def test_structure_errors_name_stored_messages_by_seq_and_id(
    mem: Memory, user_id: str, session_id: str
) -> None:
    for turn in range(3):
        mem.prepare(user_id=user_id, session_id=session_id, input=f"question {turn}")
        mem.record(
            user_id=user_id,
            session_id=session_id,
            messages=[{"role": "assistant", "content": f"answer {turn}", "id": f"a-{turn}"}],
        )
    mem.record(user_id=user_id, session_id=session_id, messages=[call("c1") | {"id": "resp-9"}])

    with pytest.raises(InvalidHistoryError) as caught:
        mem.record(user_id=user_id, session_id=session_id, messages=[result("c2")])

    assert [str(p) for p in caught.value.problems] == [
        "message 0: unknown tool_call_id 'c2' (stored message seq 7 (id 'resp-9') made no such "
        "call)"
    ]

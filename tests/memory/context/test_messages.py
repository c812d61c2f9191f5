"""Messages parse OpenAI dicts losslessly, render them back, and stay frozen."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from openai.types.chat import ChatCompletionMessage
from pydantic import ValidationError

from memory.context.messages import (
    Message,
    ToolCall,
    message_dict,
    parse_messages,
    render_messages,
)
from memory.context.units import validate_history
from memory.errors import InvalidHistoryError

SHAPES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are terse."},
    {"role": "developer", "content": "Answer in French."},
    {"role": "user", "content": "hello"},
    {"role": "user", "content": "你好\uff0c今天天气怎么样\uff1f"},
    {"role": "user", "content": "hi", "name": "alice"},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}},
        ],
    },
    {"role": "assistant", "content": ""},
    {"role": "assistant", "content": "done", "refusal": None},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {
                "id": "call_b",
                "type": "function",
                "function": {"name": "g", "arguments": '{"q": "上海"}'},
            },
        ],
    },
    {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f"}, "index": 0}]},
    {"role": "tool", "tool_call_id": "call_a", "content": "42"},
    {"role": "tool", "tool_call_id": "call_b", "content": [{"type": "text", "text": "ok"}]},
    {"role": "tool", "tool_call_id": "call_c", "name": "f", "content": "x", "x-trace": {"a": 1}},
]


@pytest.mark.parametrize("data", SHAPES, ids=lambda data: str(data["role"]))
def test_round_trip_is_lossless(data: dict[str, Any]) -> None:
    original = copy.deepcopy(data)
    rendered = Message.from_openai(data).to_openai()
    assert rendered == data
    assert data == original


def test_parallel_tool_calls_keep_order_and_ids() -> None:
    message = Message.from_openai(SHAPES[8])
    assert message.call_ids == ("call_a", "call_b")
    assert message.tool_calls is not None
    assert isinstance(message.tool_calls[0], ToolCall)
    assert message.tool_calls[1].function.arguments == '{"q": "上海"}'


def test_unknown_keys_are_kept() -> None:
    message = Message.from_openai({"role": "user", "content": "x", "metadata": {"id": 7}})
    assert message.to_openai()["metadata"] == {"id": 7}


def test_developer_counts_as_system() -> None:
    assert Message(role="developer", content="x").is_system
    assert Message(role="system", content="x").is_system
    assert not Message(role="user", content="x").is_system


def test_text_joins_text_parts_and_skips_others() -> None:
    message = Message.from_openai(SHAPES[5])
    assert message.text == "what is this?"
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    assert Message(role="user", content=parts).text == "a\nb"
    assert Message(role="assistant", content="").text == ""


def test_messages_are_frozen() -> None:
    message = Message(role="user", content="x")
    with pytest.raises(ValidationError):
        message.content = "y"  # type: ignore[misc]


def test_model_copy_leaves_the_original_alone() -> None:
    message = Message.from_openai({"role": "tool", "tool_call_id": "a", "content": "long"})
    shorter = message.model_copy(update={"content": "short"})
    assert message.content == "long"
    assert shorter.to_openai() == {"role": "tool", "tool_call_id": "a", "content": "short"}


def test_parse_and_render_a_list() -> None:
    parsed = parse_messages(SHAPES)
    assert render_messages(parsed) == SHAPES
    assert parse_messages(parsed) == parsed


def test_parse_names_every_bad_index() -> None:
    bad: list[Any] = [{"role": "user", "content": "ok"}, {"role": "robot"}, "text", {"x": 1}]
    with pytest.raises(InvalidHistoryError) as caught:
        parse_messages(bad)
    assert [problem.index for problem in caught.value.problems] == [
        1,
        2,
        3,
    ]
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        ({"role": "assistant"}, "an assistant message needs content or tool_calls"),
        (
            {"role": "assistant", "content": None, "tool_calls": []},
            "tool_calls must not be an empty list",
        ),
        ({"role": "tool", "tool_call_id": "c1"}, "a tool message needs content"),
        ({"role": "user", "content": None}, "a user message needs content"),
        ({"role": "system", "content": []}, "content must not be an empty list"),
    ],
)
def test_what_the_chat_api_would_refuse_is_refused_everywhere(
    message: dict[str, Any], problem: str
) -> None:
    with pytest.raises(InvalidHistoryError, match=problem):
        parse_messages([message])
    history = [{"role": "user", "content": "hi"}, message]
    if message["role"] == "tool":
        history.insert(
            1, {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "f"}}]}
        )
    last = f"message {len(history) - 1}: "
    assert any(p.startswith(last) and problem in p for p in validate_history(history))


def test_a_legacy_function_call_counts_as_the_assistants_action() -> None:
    message = {
        "role": "assistant",
        "content": None,
        "function_call": {"name": "f", "arguments": ""},
    }
    assert Message.from_openai(message).to_openai() == message


def test_message_dict_takes_sdk_objects_and_leaves_response_only_fields_out() -> None:
    reply = ChatCompletionMessage(
        role="assistant", content=None, refusal="No.", annotations=[], audio=None
    )
    assert message_dict(reply) == {"role": "assistant", "content": "No."}
    with_none = {"role": "user", "content": "hi", "name": None, "refusal": None}
    assert message_dict(with_none) == {"role": "user", "content": "hi"}
    assert message_dict(Message(role="user", content="x")) == {"role": "user", "content": "x"}
    with pytest.raises(TypeError, match="got int"):
        message_dict(42)

"""Server-sent events cut into whole events, and a streamed reply put back together (pure)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory.proxy.stream import DONE, EventSplitter, ReplyAssembler, event_data

separators = st.sampled_from([b"\n\n", b"\r\n\r\n"])
# Text an event can carry: UTF-8 encodable (no lone surrogates), no line breaks.
event_text = st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",))
event_bodies = st.text(alphabet=event_text, max_size=40).map(lambda text: f"data: {text}".encode())


@given(
    events=st.lists(st.tuples(event_bodies, separators), max_size=8),
    tail=st.binary(max_size=10).filter(lambda b: b"\n" not in b and b"\r" not in b),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=10),
)
def test_events_come_out_whole_however_the_bytes_are_cut(
    events: list[tuple[bytes, bytes]], tail: bytes, cuts: list[int]
) -> None:
    stream = b"".join(body + separator for body, separator in events) + tail
    points = sorted({min(cut, len(stream)) for cut in cuts} | {0, len(stream)})
    splitter = EventSplitter()

    out = [event for a, b in itertools.pairwise(points) for event in splitter.feed(stream[a:b])]

    assert out == [body + separator for body, separator in events]
    assert splitter.rest() == tail
    assert b"".join(out) + tail == stream


def test_event_data_joins_data_lines_and_skips_the_rest() -> None:
    assert event_data(b"data: [DONE]\n\n") == DONE
    assert event_data(b": keep-alive\n\n") is None
    assert event_data(b"event: x\ndata:one\ndata: two\n\n") == "one\ntwo"


def chunk(delta: dict[str, Any], finish: str | None = None, index: int = 0) -> str:
    return json.dumps({"choices": [{"index": index, "delta": delta, "finish_reason": finish}]})


def test_content_and_parallel_tool_calls_are_reassembled_from_their_pieces() -> None:
    assembler = ReplyAssembler()
    for data in [
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Checking"}),
        chunk({"content": " both."}),
        chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": "a", "function": {"name": "get", "arguments": '{"x"'}}
                ]
            }
        ),
        chunk(
            {"tool_calls": [{"index": 1, "id": "b", "function": {"name": "put", "arguments": ""}}]}
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}),
        chunk({"tool_calls": [{"index": 1, "function": {"arguments": "{}"}}]}),
        chunk({"content": "ignored: another choice"}, index=1),
        "not json",
        DONE,
    ]:
        assembler.add(data)
    assert not assembler.finished
    assembler.add(chunk({}, finish="tool_calls"))

    assert assembler.finished
    assert assembler.message() == {
        "role": "assistant",
        "content": "Checking both.",
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "get", "arguments": '{"x": 1}'}},
            {"id": "b", "type": "function", "function": {"name": "put", "arguments": "{}"}},
        ],
    }


def test_a_refusal_is_kept_and_an_empty_stream_is_no_message() -> None:
    empty = ReplyAssembler()
    empty.add(chunk({"role": "assistant"}, finish="stop"))
    refused = ReplyAssembler()
    refused.add(chunk({"refusal": "I can't help with that."}, finish="stop"))

    assert empty.message() is None
    assert refused.message() == {
        "role": "assistant",
        "content": None,
        "refusal": "I can't help with that.",
    }


def test_tool_call_pieces_with_a_null_index_continue_the_last_call_or_start_one() -> None:
    assembler = ReplyAssembler()
    for piece in [
        {"index": None, "id": "a", "function": {"name": "get", "arguments": '{"x"'}},
        {"index": None, "function": {"arguments": ": 1}"}},
        {"id": "b", "function": {"name": "put", "arguments": "{}"}},  # no index at all
        {"index": None, "id": "b", "function": {"arguments": ""}},  # the same call again
    ]:
        assembler.add(chunk({"tool_calls": [piece]}))
    assembler.add(chunk({}, finish="tool_calls"))

    assert assembler.unreadable is None
    assert assembler.message() == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "get", "arguments": '{"x": 1}'}},
            {"id": "b", "type": "function", "function": {"name": "put", "arguments": "{}"}},
        ],
    }


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (json.dumps({"choices": {"index": 0}}), "choices that is not a list"),
        (json.dumps({"choices": ["text"]}), "a choice that is not an object"),
        (chunk([1, 2]), "a delta that is not an object"),  # type: ignore[arg-type]
        (chunk({"content": ["a", "part"]}), "a content of type list"),
        (chunk({"refusal": 7}), "a refusal of type int"),
        (chunk({"tool_calls": {"index": 0}}), "tool_calls that is not a list"),
        (chunk({"tool_calls": ["x"]}), "a tool call piece that is not an object"),
        (chunk({"tool_calls": [{"index": "0"}]}), "a tool call index of type str"),
        (chunk({"tool_calls": [{"index": 0, "id": 5}]}), "a id of type int"),
        (chunk({"tool_calls": [{"index": 0, "function": "f"}]}), "a tool call's function that"),
        (chunk({"tool_calls": [{"index": 0, "function": {"name": 1}}]}), "a name of type int"),
    ],
)
def test_a_chunk_it_cannot_read_makes_the_reply_unreadable_never_an_error(
    data: str, why: str
) -> None:
    assembler = ReplyAssembler()
    assembler.add(chunk({"content": "Some text"}))

    assembler.add(data)
    assembler.add(chunk({"content": " more"}, finish="stop"))

    assert assembler.unreadable is not None and assembler.unreadable.startswith(why)
    assert assembler.message() is None


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=3)
    ),
    max_leaves=12,
)
chunk_keys = st.sampled_from(
    [
        "choices",
        "index",
        "delta",
        "content",
        "refusal",
        "tool_calls",
        "id",
        "function",
        "name",
        "arguments",
        "finish_reason",
    ]
)
chunk_like = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2, max_value=2) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(chunk_keys, inner, max_size=4),
    max_leaves=16,
)


@given(chunks=st.lists(st.one_of(json_values, chunk_like), max_size=6))
@pytest.mark.slow
def test_no_chunk_makes_the_assembler_raise(chunks: list[Any]) -> None:
    assembler = ReplyAssembler()
    for value in chunks:
        assembler.add(json.dumps(value))

    message = assembler.message()

    assert message is None or message["role"] == "assistant"

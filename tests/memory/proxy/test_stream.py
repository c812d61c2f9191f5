"""Server-sent events cut into whole events, and a streamed reply put back together (pure)."""

from __future__ import annotations

import itertools
import json
from typing import Any

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

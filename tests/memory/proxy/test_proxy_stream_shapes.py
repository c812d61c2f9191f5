"""Streams of unusual but valid shapes: forwarded byte for byte, the reply stored when it can be.

What the proxy cannot read back (a chunk shape it does not know) never changes or stops what
the client receives; that reply is simply not stored (logged and counted), and the client's
next request brings it in.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from proxy_harness import *  # noqa: F403 - the fixtures
from proxy_harness import MakeProxy, recorded, stored, who
from upstream_fake import FakeUpstream, Raw

from memory import Memory


def event(delta: Any, finish: str | None = None) -> bytes:
    chunk = {
        "id": "chatcmpl-odd",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(chunk)}\n\n".encode()


#: A tool call whose pieces carry ``"index": null`` (sent by some OpenAI-compatible servers).
NULL_INDEX = (
    event({"role": "assistant", "content": None}),
    event(
        {
            "tool_calls": [
                {
                    "index": None,
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"q": '},
                }
            ]
        }
    ),
    event({"tool_calls": [{"index": None, "function": {"arguments": '"x"}'}}]}),
    b": a comment line\n\n",
    event({}, finish="tool_calls"),
    b"data: [DONE]\n\n",
)
#: Content sent as a list, which the proxy cannot read back.
UNREADABLE = (
    event({"role": "assistant", "content": ""}),
    event({"content": "Half"}),
    event({"content": [{"type": "text", "text": " and half"}]}),
    event({}, finish="stop"),
    b"data: [DONE]\n\n",
)


@pytest.fixture
def stream(make_proxy: MakeProxy, admin_key: str) -> Iterator[Any]:
    """``stream(messages, **headers) -> (status, bytes, headers)``: a raw streamed request."""
    url = make_proxy()
    with httpx.Client(timeout=60) as client:

        def send(messages: list[dict[str, Any]], **headers: str) -> tuple[int, bytes, Any]:
            body = {"model": "m", "messages": messages, "stream": True}
            headers = {"Authorization": f"Bearer {admin_key}", **headers}
            with client.stream("POST", url + "/chat/completions", json=body, headers=headers) as r:
                return r.status_code, b"".join(r.iter_raw()), r.headers

        send.url = url  # type: ignore[attr-defined]
        yield send


@pytest.mark.parametrize("chunks", [NULL_INDEX, UNREADABLE], ids=["null index", "unreadable"])
def test_without_a_user_every_byte_passes_through(
    stream: Any, upstream: tuple[FakeUpstream, str], chunks: tuple[bytes, ...]
) -> None:
    upstream[0].script(Raw(chunks))

    status, received, headers = stream([{"role": "user", "content": "hi"}])

    assert status == 200
    assert received == b"".join(chunks)
    assert "x-stratamem-memory" not in headers


def test_a_tool_call_with_a_null_index_is_forwarded_as_sent_and_stored(
    stream: Any,
    upstream: tuple[FakeUpstream, str],
    memory: Memory,
    user_id: str,
    session_id: str,
) -> None:
    upstream[0].script(Raw(NULL_INDEX))

    status, received, _ = stream(
        [{"role": "user", "content": "look it up"}], **who(user_id, session_id)
    )

    assert status == 200 and received == b"".join(NULL_INDEX)
    assert stored(memory, user_id, session_id)[1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "lookup", "arguments": '{"q": "x"}'},
            }
        ],
    }


def test_a_reply_it_cannot_read_is_forwarded_as_sent_not_stored_then_brought_in(
    stream: Any,
    upstream: tuple[FakeUpstream, str],
    memory: Memory,
    user_id: str,
    session_id: str,
    caplog: Any,
) -> None:
    upstream[0].script(Raw(UNREADABLE))
    question = {"role": "user", "content": "a confidential question"}

    status, received, headers = stream([question], **who(user_id, session_id))
    recorded()

    assert status == 200 and received == b"".join(UNREADABLE)
    assert headers["x-stratamem-memory"] == "ok"
    assert [m["content"] for m in stored(memory, user_id, session_id)] == [question["content"]]
    health = httpx.get(stream.url.removesuffix("/v1") + "/healthz").json()
    assert health["memory_failures"] == 1
    assert "could not be read back (a content of type list)" in caplog.text
    assert "confidential" not in caplog.text and "half" not in caplog.text.lower()

    # The client put the reply together itself and sends it back with its next message.
    reply = {"role": "assistant", "content": "Half and half"}
    status, _, _ = stream(
        [question, reply, {"role": "user", "content": "next"}], **who(user_id, session_id)
    )

    assert status == 200
    assert [m["content"] for m in stored(memory, user_id, session_id)] == [
        "a confidential question",
        "Half and half",
        "next",
        "echo: next",
    ]

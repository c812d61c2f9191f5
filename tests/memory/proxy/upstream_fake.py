"""A scripted OpenAI-compatible upstream that records what it received, served for real.

``FakeUpstream`` is a Starlette app (chat completions, streamed or not, with tool calls; a
model list; scripted failures) that ``Served`` (``tests/served.py``) runs with uvicorn in a
thread on a socket bound before the thread starts, so a client can connect at once: no
waiting, no sleeps. The proxy tests, the agent-loop example's test and ``benchmarks/proxy.py``
use it.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

#: The longest a held request or stream waits for the test, so a failing test cannot hang.
HOLD_LIMIT_S = 30.0


@dataclass(frozen=True)
class Text:
    """Answer with this text."""

    text: str


@dataclass(frozen=True)
class Calls:
    """Answer with tool calls: ``(call id, function name, JSON arguments)`` each."""

    calls: tuple[tuple[str, str, str], ...]
    text: str | None = None


@dataclass(frozen=True)
class Fail:
    """Answer with this status and an OpenAI-style error body."""

    status: int = 500
    message: str = "upstream failed on purpose"


@dataclass(frozen=True)
class Raw:
    """Stream these bytes as they are (a request with ``"stream": true`` only)."""

    chunks: tuple[bytes, ...]


Answer = Text | Calls | Fail | Raw


@dataclass
class Received:
    """One request as the upstream got it."""

    path: str
    body: dict[str, Any]
    headers: dict[str, str]


@dataclass
class _Hold:
    """Requests wait until ``count`` of them have arrived (two clients in flight at once)."""

    count: int
    arrived: int = 0
    event: threading.Event = field(default_factory=threading.Event)


class FakeUpstream:
    """The upstream's behaviour and what it received.

    Without a script, a request is answered ``echo: <last message's content>``.

    Attributes:
        received: every request, oldest first.
        stream_started: set once a streamed answer has sent its first chunk.
    """

    def __init__(self) -> None:
        self.received: list[Received] = []
        self._script: deque[Answer] = deque()
        self._lock = threading.Lock()
        self._hold: _Hold | None = None
        self._stream_gate: threading.Event | None = None
        self.stream_started = threading.Event()
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
            ]
        )

    def script(self, *answers: Answer) -> None:
        """Answer the next requests with these, in order."""
        with self._lock:
            self._script.extend(answers)

    def hold_until(self, count: int) -> None:
        """Hold the next requests until ``count`` of them are waiting, then answer them all."""
        self._hold = _Hold(count)

    def release(self) -> None:
        """Let every held request go now (a test whose client gave up first)."""
        if self._hold is not None:
            self._hold.event.set()

    def gate_streams(self) -> threading.Event:
        """Streams send their first chunk, then wait for the returned event to be set."""
        self._stream_gate = threading.Event()
        return self._stream_gate

    @property
    def bodies(self) -> list[dict[str, Any]]:
        """The JSON bodies of the chat requests received."""
        return [r.body for r in self.received if r.path.endswith("/chat/completions")]

    async def _models(self, request: Request) -> Response:
        self.received.append(Received(request.url.path, {}, dict(request.headers)))
        return JSONResponse(
            {"object": "list", "data": [{"id": "fake-model", "object": "model", "owned_by": "t"}]},
            headers={"x-request-id": "req-models"},
        )

    async def _chat(self, request: Request) -> Response:
        body = _chat_body(await request.body())
        if body is None:  # as the OpenAI API answers a body it cannot use
            error = {"message": "could not parse the request", "type": "invalid_request_error"}
            self.received.append(Received(request.url.path, {}, dict(request.headers)))
            return JSONResponse({"error": {**error, "code": None}}, status_code=400)
        with self._lock:
            self.received.append(Received(request.url.path, body, dict(request.headers)))
            answer = self._script.popleft() if self._script else Text(_echo(body))
        if self._hold is not None:
            await asyncio.to_thread(self._wait_for_others, self._hold)
        if isinstance(answer, Fail):
            error = {"message": answer.message, "type": "server_error", "code": "scripted"}
            return JSONResponse({"error": error}, status_code=answer.status)
        headers = {"x-request-id": f"req-{len(self.received)}"}
        if isinstance(answer, Raw):
            return StreamingResponse(_raw(answer), media_type="text/event-stream", headers=headers)
        if body.get("stream") is True:
            return StreamingResponse(
                self._chunks(body, answer), media_type="text/event-stream", headers=headers
            )
        return JSONResponse(_completion(body, answer), headers=headers)

    def _wait_for_others(self, hold: _Hold) -> None:
        with self._lock:
            hold.arrived += 1
            if hold.arrived >= hold.count:
                hold.event.set()
        hold.event.wait(HOLD_LIMIT_S)

    async def _chunks(self, body: dict[str, Any], answer: Text | Calls) -> AsyncIterator[bytes]:
        gate = self._stream_gate
        for index, delta in enumerate(_deltas(answer)):
            chunk = _chunk(body, {"index": 0, "delta": delta, "finish_reason": None})
            yield f"data: {json.dumps(chunk)}\n\n".encode()
            if index == 0:
                self.stream_started.set()
                if gate is not None:
                    await asyncio.to_thread(gate.wait, HOLD_LIMIT_S)
        finish = "tool_calls" if isinstance(answer, Calls) else "stop"
        chunk = _chunk(body, {"index": 0, "delta": {}, "finish_reason": finish})
        yield f"data: {json.dumps(chunk)}\n\n".encode()
        yield b"data: [DONE]\n\n"


async def _raw(answer: Raw) -> AsyncIterator[bytes]:
    for chunk in answer.chunks:
        yield chunk


def _chat_body(raw: bytes) -> dict[str, Any] | None:
    """The request as a chat completion request, or ``None`` when it is not one."""
    try:
        body = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        return None
    messages = body["messages"]
    if not messages or not all(isinstance(m, dict) and "role" in m for m in messages):
        return None
    try:
        json.dumps(body, ensure_ascii=False).encode()
    except UnicodeEncodeError:  # a lone surrogate, sent as a JSON escape
        return None
    return body


def _echo(body: dict[str, Any]) -> str:
    messages = body.get("messages") or [{}]
    return f"echo: {messages[-1].get('content')}"


def _message(answer: Text | Calls) -> dict[str, Any]:
    if isinstance(answer, Text):
        return {"role": "assistant", "content": answer.text, "refusal": None}
    calls = [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        for call_id, name, arguments in answer.calls
    ]
    return {"role": "assistant", "content": answer.text, "tool_calls": calls, "refusal": None}


def _completion(body: dict[str, Any], answer: Text | Calls) -> dict[str, Any]:
    finish = "tool_calls" if isinstance(answer, Calls) else "stop"
    return {
        "id": "chatcmpl-upstream",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "fake-model"),
        "choices": [{"index": 0, "message": _message(answer), "finish_reason": finish}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def _chunk(body: dict[str, Any], choice: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-upstream",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": body.get("model", "fake-model"),
        "choices": [choice],
    }


def _deltas(answer: Text | Calls) -> list[dict[str, Any]]:
    """The reply cut into the deltas a real stream sends: words, then call pieces."""
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    text = answer.text or ""
    deltas += [{"content": word} for word in text.split(" ") if word][:1]
    deltas += [{"content": " " + word} for word in text.split(" ")[1:]]
    if isinstance(answer, Calls):
        for index, (call_id, name, arguments) in enumerate(answer.calls):
            half = len(arguments) // 2
            first = {"name": name, "arguments": arguments[:half]}
            deltas.append(
                {
                    "tool_calls": [
                        {"index": index, "id": call_id, "type": "function", "function": first}
                    ]
                }
            )
            rest = {"arguments": arguments[half:]}
            deltas.append({"tool_calls": [{"index": index, "function": rest}]})
    return deltas


def closed_port_url() -> str:
    """The ``/v1`` URL of a port nothing listens on (bound, then closed)."""
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"

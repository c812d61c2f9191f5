"""A local OpenAI-compatible chat completions server that follows a script, for tests.

It serves ``POST /v1/chat/completions`` on 127.0.0.1 (a free port) in a thread. Each request
takes the next scripted behaviour (or asks ``responder`` when the script is used up) and is
recorded, so a test can assert what its client sent. The benchmark imports it too.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

__all__ = [
    "Behaviour",
    "Empty",
    "FakeOpenAI",
    "Hang",
    "Malformed",
    "Reply",
    "Status",
]

#: How long a ``Hang`` waits for ``release`` at most, so a forgotten hang cannot block a run.
HANG_LIMIT_S = 30.0


@dataclass(frozen=True)
class Reply:
    """Answer with ``text`` (``None`` sends ``"content": null``)."""

    text: str | None


@dataclass(frozen=True)
class Status:
    """Answer with an HTTP error status and an OpenAI-style error body."""

    code: int = 500
    message: str = "scripted failure"


@dataclass(frozen=True)
class Empty:
    """Answer with an empty string as the content."""


@dataclass(frozen=True)
class Malformed:
    """Answer 200 with a body that is not JSON."""


@dataclass(frozen=True)
class Hang:
    """Hold the request until the test calls ``FakeOpenAI.release``, then answer ``text``.

    For client timeouts: the client gives up first and the late answer goes nowhere.
    """

    text: str = "released after a hang"


Behaviour = Reply | Status | Empty | Malformed | Hang
Responder = Callable[[dict[str, Any]], Behaviour]


def count_words(text: str) -> int:
    """The default token count of the fake: whitespace-separated words."""
    return len(text.split())


class FakeOpenAI:
    """The server; use it as a context manager, or call ``start`` and ``stop``.

    Args:
        responder: decides the behaviour when the script is used up; without one such a request
            gets a 500 that says so.
        count_tokens: counts the ``usage`` reported for prompts and replies.
    """

    def __init__(
        self,
        *,
        responder: Responder | None = None,
        count_tokens: Callable[[str], int] = count_words,
    ) -> None:
        self.responder = responder
        self.count_tokens = count_tokens
        self._lock = threading.Lock()
        self._script: list[Behaviour] = []
        self._requests: list[dict[str, Any]] = []
        self._released = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        # A short poll keeps ``stop`` (which waits for the serving loop to notice) fast.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        """The ``/v1`` address to give an OpenAI client."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The JSON bodies received so far, oldest first (a copy)."""
        with self._lock:
            return list(self._requests)

    def script(self, *behaviours: Behaviour) -> None:
        """Queue behaviours for the next requests, in order."""
        with self._lock:
            self._script.extend(behaviours)

    def release(self) -> None:
        """Let every held (``Hang``) request finish; later ``Hang`` requests no longer wait."""
        self._released.set()

    def start(self) -> FakeOpenAI:
        """Serve in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Release held requests and shut the server down."""
        self.release()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def _next(self, body: dict[str, Any]) -> Behaviour:
        with self._lock:
            self._requests.append(body)
            if self._script:
                return self._script.pop(0)
        if self.responder is not None:
            return self.responder(body)
        return Status(500, "fake server: nothing scripted for this request")

    def _completion(self, body: dict[str, Any], text: str | None) -> dict[str, Any]:
        prompt = " ".join(str(m.get("content") or "") for m in body.get("messages", []))
        return {
            "id": f"chatcmpl-fake-{len(self._requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "fake"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": self.count_tokens(prompt),
                "completion_tokens": self.count_tokens(text or ""),
                "total_tokens": self.count_tokens(prompt) + self.count_tokens(text or ""),
            },
        }


def _handler_for(fake: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            behaviour = fake._next(body)
            if isinstance(behaviour, Hang):
                fake._released.wait(HANG_LIMIT_S)
                behaviour = Reply(behaviour.text)
            # After a hang the client has usually given up (a timeout test): nobody listens.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self._play(body, behaviour)

        def _play(self, body: dict[str, Any], behaviour: Behaviour) -> None:
            if isinstance(behaviour, Status):
                error = {"message": behaviour.message, "type": "server_error", "code": None}
                self._send(behaviour.code, {"error": error})
            elif isinstance(behaviour, Malformed):
                self._send_raw(200, b"{this is not json")
            elif isinstance(behaviour, Empty):
                self._send(200, fake._completion(body, ""))
            elif isinstance(behaviour, Reply):
                self._send(200, fake._completion(body, behaviour.text))
            else:
                self._send(500, {"error": {"message": f"unknown behaviour {behaviour!r}"}})

        def _send(self, code: int, payload: dict[str, Any]) -> None:
            self._send_raw(code, json.dumps(payload).encode())

        def _send_raw(self, code: int, data: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output clean

    return Handler

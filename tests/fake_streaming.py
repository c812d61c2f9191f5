"""``StreamingFakeOpenAI``: the fake server of ``fake_openai`` answering ``stream: true`` with SSE.

A request with ``"stream": true`` whose scripted behaviour is a ``Reply`` gets its text as
server-sent ``chat.completion.chunk`` events, one word (with its trailing space) per event,
then ``data: [DONE]``; every other request is answered exactly as ``FakeOpenAI`` answers it.
Kept apart from ``fake_openai`` so that module stays as other tests know it.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from fake_openai import Behaviour, FakeOpenAI, Reply

__all__ = ["StreamingFakeOpenAI", "chunks_of"]

_WORDS = re.compile(r"\S+\s*|\s+")


def chunks_of(text: str) -> list[str]:
    """The pieces a streamed reply is sent in: each word with the spaces after it."""
    return _WORDS.findall(text)


class StreamingFakeOpenAI(FakeOpenAI):
    """``FakeOpenAI`` that streams replies to requests asking for a stream."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        base: Any = self._httpd.RequestHandlerClass

        class Streaming(base):  # type: ignore[misc,valid-type]  # a class made at run time
            def _play(self, body: dict[str, Any], behaviour: Behaviour) -> None:
                if body.get("stream") and isinstance(behaviour, Reply) and behaviour.text:
                    self._stream(body, behaviour.text)
                else:
                    super()._play(body, behaviour)

            def _stream(self, body: dict[str, Any], text: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()  # HTTP/1.0: the body ends when the connection closes
                created = int(time.time())
                pieces = [{"role": "assistant", "content": ""}]
                pieces += [{"content": piece} for piece in chunks_of(text)]
                for delta in pieces:
                    self._event(body, created, delta, None)
                self._event(body, created, {}, "stop")
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

            def _event(
                self,
                body: dict[str, Any],
                created: int,
                delta: dict[str, Any],
                finish_reason: str | None,
            ) -> None:
                chunk = {
                    "id": "chatcmpl-fake-stream",
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": body.get("model", "fake"),
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
                }
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                self.wfile.flush()

        self._httpd.RequestHandlerClass = Streaming

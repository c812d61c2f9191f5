"""Server-sent events passed through as they arrive, and the streamed reply put back together.

A streamed chat completion is a sequence of events ``data: {chunk}`` ended by ``data: [DONE]``.
The proxy forwards each event as soon as it is complete and reads the chunks on the way, so
that when the stream ends it holds the whole assistant message (content, refusal, tool calls
with their arguments) to record. Pure: no I/O here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DONE", "EventSplitter", "ReplyAssembler", "event_data"]

#: The data of the event that ends an OpenAI stream.
DONE = "[DONE]"

#: Where one event ends: a blank line, in any of the line endings SSE allows.
_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")


class EventSplitter:
    """Cuts a byte stream into whole events, each with the blank line that ends it.

    Bytes are never changed: joined, the events (and ``rest``) are exactly what was fed.
    """

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> Iterator[bytes]:
        """The events completed by ``data``, in order."""
        self._buffer += data
        while match := _EVENT_END.search(self._buffer):
            event, self._buffer = self._buffer[: match.end()], self._buffer[match.end() :]
            yield event

    def rest(self) -> bytes:
        """What was fed after the last complete event (a stream cut short), emptied."""
        rest, self._buffer = self._buffer, b""
        return rest


def event_data(event: bytes) -> str | None:
    """The data of one event (its ``data:`` lines joined), or ``None`` when it has none."""
    lines = event.decode("utf-8", errors="replace").splitlines()
    data = [line[5:].removeprefix(" ") for line in lines if line.startswith("data:")]
    return "\n".join(data) if data else None


@dataclass
class _Call:
    id: str | None = None
    name: str = ""
    arguments: str = ""


@dataclass
class ReplyAssembler:
    """Builds the first choice's assistant message from the chunks of a streamed completion.

    Attributes:
        finished: a chunk gave the choice's ``finish_reason``; a stream that ends without one
            was cut short, and its partial reply is not one the client holds.
    """

    finished: bool = False
    _content: list[str] = field(default_factory=list)
    _refusal: list[str] = field(default_factory=list)
    _calls: dict[int, _Call] = field(default_factory=dict)

    def add(self, data: str) -> None:
        """Read one event's data; anything that is not a chunk (``[DONE]``, not JSON) is skipped."""
        try:
            chunk = json.loads(data)
        except ValueError:
            return
        if not isinstance(chunk, dict):
            return
        for choice in chunk.get("choices") or ():
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                self._add_choice(choice)

    def _add_choice(self, choice: dict[str, Any]) -> None:
        delta = choice.get("delta") or {}
        if isinstance(delta.get("content"), str):
            self._content.append(delta["content"])
        if isinstance(delta.get("refusal"), str):
            self._refusal.append(delta["refusal"])
        for piece in delta.get("tool_calls") or ():
            call = self._calls.setdefault(int(piece.get("index", len(self._calls))), _Call())
            call.id = piece.get("id") or call.id
            function = piece.get("function") or {}
            call.name += function.get("name") or ""
            call.arguments += function.get("arguments") or ""
        if choice.get("finish_reason"):
            self.finished = True

    def message(self) -> dict[str, Any] | None:
        """The assistant message streamed so far, or ``None`` when nothing was said."""
        content = "".join(self._content) if self._content else None
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if self._refusal:
            message["refusal"] = "".join(self._refusal)
        if self._calls:
            message["tool_calls"] = [
                {
                    "id": call.id or "",
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for index, call in sorted(self._calls.items())
            ]
        if content is None and not self._refusal and not self._calls:
            return None
        return message

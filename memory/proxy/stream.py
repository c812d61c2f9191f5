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


class _Unreadable(Exception):
    """A chunk of a shape the assembler does not know; the message says which part."""


@dataclass
class ReplyAssembler:
    """Builds the first choice's assistant message from the chunks of a streamed completion.

    It only reads: what it cannot read never changes what is forwarded. A chunk of a shape it
    does not know (a delta that is no object, a tool call piece whose ``index`` is neither a
    number nor null, content that is no text) makes the reply unreadable: ``message`` is then
    ``None`` and ``unreadable`` says why, without quoting content. A tool call piece with a
    null or missing ``index`` (some OpenAI-compatible servers send one) continues the last
    call, or starts a new one when it brings an ``id`` of its own.

    Attributes:
        finished: a chunk gave the choice's ``finish_reason``; a stream that ends without one
            was cut short, and its partial reply is not one the client holds.
        unreadable: why the reply could not be put back together, or ``None``.
    """

    finished: bool = False
    unreadable: str | None = None
    _content: list[str] = field(default_factory=list)
    _refusal: list[str] = field(default_factory=list)
    _calls: dict[int, _Call] = field(default_factory=dict)
    _last_call: int | None = None

    def add(self, data: str) -> None:
        """Read one event's data; anything that is not a chunk (``[DONE]``, not JSON) is skipped."""
        if self.unreadable is not None:
            return
        try:
            chunk = json.loads(data)
        except (ValueError, RecursionError):
            return
        if not isinstance(chunk, dict):
            return
        try:
            for choice in _items(chunk.get("choices"), "choices"):
                if not isinstance(choice, dict):
                    raise _Unreadable("a choice that is not an object")
                # A null index is read as the first choice: a stream of one choice.
                if choice.get("index") in (0, None):
                    self._add_choice(choice)
        except _Unreadable as why:
            self.unreadable = str(why)

    def _add_choice(self, choice: dict[str, Any]) -> None:
        delta = choice.get("delta")
        if delta is None:
            delta = {}
        if not isinstance(delta, dict):
            raise _Unreadable("a delta that is not an object")
        if (content := _text(delta, "content")) is not None:
            self._content.append(content)
        if (refusal := _text(delta, "refusal")) is not None:
            self._refusal.append(refusal)
        for piece in _items(delta.get("tool_calls"), "tool_calls"):
            self._add_call(piece)
        if choice.get("finish_reason"):
            self.finished = True

    def _add_call(self, piece: Any) -> None:
        if not isinstance(piece, dict):
            raise _Unreadable("a tool call piece that is not an object")
        call_id = _text(piece, "id")
        function = piece.get("function")
        if function is None:
            function = {}
        if not isinstance(function, dict):
            raise _Unreadable("a tool call's function that is not an object")
        call = self._calls.setdefault(self._call_index(piece.get("index"), call_id), _Call())
        call.id = call_id or call.id
        call.name += _text(function, "name") or ""
        call.arguments += _text(function, "arguments") or ""

    def _call_index(self, index: Any, call_id: str | None) -> int:
        """Which call a piece belongs to: its ``index``, else the last call or a new one."""
        if isinstance(index, int) and not isinstance(index, bool):
            self._last_call = index
            return index
        if index is not None:
            raise _Unreadable(f"a tool call index of type {type(index).__name__}")
        last = self._last_call
        if last is None or (call_id and call_id != self._calls[last].id):
            last = max(self._calls, default=-1) + 1
        self._last_call = last
        return last

    def message(self) -> dict[str, Any] | None:
        """The assistant message streamed so far, or ``None`` when nothing was said or read."""
        if self.unreadable is not None:
            return None
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


def _items(value: Any, name: str) -> list[Any]:
    """A list field of a chunk (``None`` is empty)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise _Unreadable(f"{name} that is not a list")
    return value


def _text(fields: dict[str, Any], name: str) -> str | None:
    """A text field of a chunk, or ``None`` when it is absent or null."""
    value = fields.get(name)
    if value is None or isinstance(value, str):
        return value
    raise _Unreadable(f"a {name} of type {type(value).__name__}")

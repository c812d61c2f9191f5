"""OpenAI chat messages as frozen pydantic models that round-trip losslessly."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from memory.errors import InvalidHistoryError, Problem

__all__ = [
    "FunctionCall",
    "Message",
    "Role",
    "ToolCall",
    "parse_messages",
    "render_messages",
]

Role = Literal["system", "developer", "user", "assistant", "tool"]


class FunctionCall(BaseModel):
    """The function half of a tool call: a name and its JSON-encoded arguments."""

    model_config = ConfigDict(frozen=True, extra="allow")

    name: str
    arguments: str = ""


class ToolCall(BaseModel):
    """One call in an assistant message's ``tool_calls``."""

    model_config = ConfigDict(frozen=True, extra="allow")

    id: str
    type: str = "function"
    function: FunctionCall


class Message(BaseModel):
    """One chat message; keys it does not know are kept and rendered back.

    ``content`` is a string, ``None`` or a list of content parts (``{"type": "text", ...}``,
    ``{"type": "image_url", ...}``). Only the keys that were given are rendered back, so
    ``Message.from_openai(d).to_openai() == d`` for every valid message dict ``d``.
    """

    model_config = ConfigDict(frozen=True, extra="allow")

    role: Role
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: tuple[ToolCall, ...] | None = None
    tool_call_id: str | None = None

    @classmethod
    def from_openai(cls, data: Mapping[str, Any]) -> Message:
        """Parse one OpenAI-format message dict."""
        return cls.model_validate(data)

    def to_openai(self) -> dict[str, Any]:
        """Render back to the OpenAI dict this message was parsed from."""
        data = self.model_dump(exclude_unset=True)
        if "tool_calls" in data and data["tool_calls"] is not None:
            data["tool_calls"] = list(data["tool_calls"])
        return data

    @property
    def is_system(self) -> bool:
        """Whether this is a system or developer message."""
        return self.role in ("system", "developer")

    @property
    def call_ids(self) -> tuple[str, ...]:
        """The ids of this message's tool calls (empty for anything but such a message)."""
        return tuple(call.id for call in self.tool_calls or ())

    @property
    def text(self) -> str:
        """The text of the content: the string, or the text parts joined by newlines."""
        if isinstance(self.content, str):
            return self.content
        if not self.content:
            return ""
        return "\n".join(
            str(part.get("text", "")) for part in self.content if part.get("type") == "text"
        )


def parse_messages(data: Iterable[Mapping[str, Any] | Message]) -> list[Message]:
    """Parse OpenAI-format dicts (or pass through messages) into ``Message`` objects.

    Raises:
        InvalidHistoryError: a dict is not a chat message; the problem names its index.
    """
    messages: list[Message] = []
    problems: list[Problem] = []
    for index, item in enumerate(data):
        if isinstance(item, Message):
            messages.append(item)
            continue
        if not isinstance(item, Mapping):
            problems.append(Problem(index, f"expected a dict, got {type(item).__name__}"))
            continue
        try:
            messages.append(Message.model_validate(item))
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            problems.append(Problem(index, f"{where}: {first['msg']}"))
    if problems:
        raise InvalidHistoryError(problems)
    return messages


def render_messages(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """Render messages back to OpenAI-format dicts."""
    return [message.to_openai() for message in messages]

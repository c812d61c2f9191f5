"""OpenAI chat messages as frozen pydantic models that round-trip losslessly."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from memory.errors import InvalidHistoryError, Problem

__all__ = [
    "RESPONSE_ONLY_KEYS",
    "FunctionCall",
    "Message",
    "Role",
    "ToolCall",
    "api_problem",
    "message_dict",
    "parse_messages",
    "render_messages",
]

#: Keys of a message in a chat completion *response* that a request must not carry back.
RESPONSE_ONLY_KEYS = frozenset(("refusal", "audio", "annotations"))

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

    @model_validator(mode="after")
    def _acceptable_to_the_api(self) -> Message:
        problem = api_problem(self.role, self.content, self.tool_calls, self.model_extra or {})
        if problem is not None:
            raise ValueError(problem)
        return self

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
        if not self.tool_calls:
            return ()  # most messages: no generator (validation asks every message, twice)
        return tuple(call.id for call in self.tool_calls)

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


def api_problem(
    role: str,
    content: object,
    tool_calls: object,
    extra: Mapping[str, Any],
) -> str | None:
    """Why an OpenAI-compatible server would reject a message of this shape, or ``None``.

    The rules the chat API applies to a message on its own: an assistant message needs content
    or tool calls (or a legacy ``function_call``); every other role needs content; a content
    list and a ``tool_calls`` list must not be empty; only an assistant message makes calls.
    """
    if isinstance(content, list) and not content:
        return "content must not be an empty list"
    if tool_calls is not None:
        if role != "assistant":
            return f"a {role} message cannot have tool_calls"
        if not tool_calls:
            return "tool_calls must not be an empty list (leave the key out)"
    if role == "assistant":
        if content is None and not tool_calls and extra.get("function_call") is None:
            return "an assistant message needs content or tool_calls"
    elif content is None:
        return f"a {role} message needs content"
    return None


def message_dict(item: object) -> dict[str, Any]:
    """The OpenAI-format request dict of one message given as a dict or an SDK object.

    Accepts plain dicts (``None`` values are left out, except an assistant's ``content``), the
    ``openai`` SDK's message objects (any pydantic model: ``response.choices[0].message``) and
    ``Message``. Response-only keys (``refusal``, ``audio``, ``annotations``) are never carried
    into the request; a refusal with no content becomes the content, so what the model said is
    kept. Anything else is returned as a dict for the parser to judge.

    Raises:
        TypeError: ``item`` is neither a mapping nor a model with ``model_dump``.
    """
    if isinstance(item, Message):
        return item.to_openai()
    if isinstance(item, Mapping):
        data = dict(item)
    elif isinstance(item, BaseModel):
        data = item.model_dump(mode="json")
    else:
        raise TypeError(f"expected a dict or a chat message object, got {type(item).__name__}")
    refusal = data.get("refusal")
    cleaned = {
        key: value
        for key, value in data.items()
        if key not in RESPONSE_ONLY_KEYS and (value is not None or key == "content")
    }
    if cleaned.get("content") is None and isinstance(refusal, str) and refusal:
        cleaned["content"] = refusal
    return cleaned


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
            where = "".join(f"{part}." for part in first["loc"])[:-1]
            reason = first["msg"].removeprefix("Value error, ")
            problems.append(Problem(index, f"{where}: {reason}" if where else reason))
    if problems:
        raise InvalidHistoryError(problems)
    return messages


def render_messages(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """Render messages back to OpenAI-format dicts."""
    return [message.to_openai() for message in messages]

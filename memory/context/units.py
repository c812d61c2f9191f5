"""Atomic units of a chat history, the current turn, and structural validation.

A unit is what the window keeps or drops whole: the pinned system message; an assistant message
with ``tool_calls`` together with all its tool results; any other single message.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from pydantic import ValidationError

from memory.context.messages import Message, api_problem

__all__ = ["Unit", "current_turn_start", "split_units", "validate_history"]

UnitKind = Literal["system", "tool_exchange", "message"]


@dataclass(frozen=True, slots=True)
class Unit:
    """A run of messages kept or dropped together.

    Attributes:
        start: index of the unit's first message in the history.
        messages: the messages, in order.
        kind: ``system`` (the pinned first system message), ``tool_exchange`` or ``message``.
    """

    start: int
    messages: tuple[Message, ...]
    kind: UnitKind

    @property
    def stop(self) -> int:
        """Index just past the unit's last message."""
        return self.start + len(self.messages)


def split_units(messages: Sequence[Message]) -> list[Unit]:
    """Split a valid history into atomic units, in order.

    The first system (or developer) message is the ``system`` unit wherever it stands; later
    system messages are ordinary units. The history is assumed valid (see ``validate_history``).
    """
    units: list[Unit] = []
    seen_system = False
    index = 0
    while index < len(messages):
        message = messages[index]
        if message.is_system and not seen_system:
            seen_system = True
            units.append(Unit(index, (message,), "system"))
            index += 1
        elif message.role == "assistant" and message.tool_calls:
            stop = index + 1
            while stop < len(messages) and messages[stop].role == "tool":
                stop += 1
            units.append(Unit(index, tuple(messages[index:stop]), "tool_exchange"))
            index = stop
        else:
            units.append(Unit(index, (message,), "message"))
            index += 1
    return units


def current_turn_start(messages: Sequence[Message]) -> int:
    """Index of the last user message, where the current turn starts; ``len`` when there is none."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "user":
            return index
    return len(messages)


def validate_history(
    messages: Iterable[Mapping[str, Any] | Message], *, allow_pending_calls: bool = False
) -> list[str]:
    """List every structural problem of a history, each naming the message index.

    Checks: each item is a chat message; a tool message answers a call of the assistant message
    right before its run of tool messages; every call gets exactly one result; tool call ids are
    present and unique; a tool message does not come first.

    Args:
        messages: OpenAI-format dicts or ``Message`` objects.
        allow_pending_calls: accept a final assistant message whose calls are still waiting
            for results (an agent's tool loop in progress, as stored between two requests).

    Returns:
        The problems; an empty list means the history is valid.
    """
    problems: list[str] = []
    parsed: list[_Shape | None] = []
    for index, item in enumerate(messages):
        shape = _shape_of(item)
        if shape is None:
            try:
                shape = _Shape.of(Message.model_validate(item))
            except ValidationError as error:
                first = error.errors()[0]
                where = ".".join(str(part) for part in first["loc"]) or "message"
                problems.append(f"message {index}: not a chat message ({where}: {first['msg']})")
        parsed.append(shape)

    all_call_ids: dict[str, int] = {}
    owner: int | None = None  # index of the assistant message whose results may follow
    pending: dict[str, None] = {}
    answered: set[str] = set()

    def close_block(at: int) -> None:
        nonlocal owner
        # A block closed by the end of the list is an agent's tool loop in progress.
        in_progress = allow_pending_calls and at == len(parsed)
        if owner is not None and pending and not in_progress:
            missing = ", ".join(pending)
            problems.append(f"message {owner}: tool call(s) {missing} have no result")
        owner = None
        pending.clear()
        answered.clear()

    for index, message in enumerate(parsed):
        if message is None:
            close_block(index)
            continue
        if message.role != "tool":
            close_block(index)
        if message.role == "assistant" and message.call_ids:
            owner = index
            for call_id in message.call_ids:
                if not call_id:
                    problems.append(f"message {index}: a tool call has an empty id")
                elif call_id in all_call_ids:
                    earlier = all_call_ids[call_id]
                    problems.append(
                        f"message {index}: duplicate tool_call_id {call_id!r} "
                        f"(also in message {earlier})"
                    )
                else:
                    all_call_ids[call_id] = index
                    pending[call_id] = None
        elif message.role == "tool":
            _check_tool_result(index, message, owner, pending, answered, all_call_ids, problems)
    close_block(len(parsed))
    return problems


def _check_tool_result(
    index: int,
    message: _Shape,
    owner: int | None,
    pending: dict[str, None],
    answered: set[str],
    all_call_ids: dict[str, int],
    problems: list[str],
) -> None:
    call_id = message.tool_call_id
    if index == 0:
        problems.append("message 0: a tool message cannot come first")
    elif not call_id:
        problems.append(f"message {index}: tool message without a tool_call_id")
    elif owner is None:
        if call_id in all_call_ids:
            problems.append(
                f"message {index}: tool result {call_id!r} is separated from its call "
                f"(message {all_call_ids[call_id]}) by another role"
            )
        else:
            problems.append(
                f"message {index}: tool result {call_id!r} has no preceding matching call"
            )
    elif call_id in pending:
        del pending[call_id]
        answered.add(call_id)
    elif call_id in answered:
        problems.append(f"message {index}: duplicate tool result for {call_id!r}")
    else:
        problems.append(
            f"message {index}: unknown tool_call_id {call_id!r} (message {owner} made no such call)"
        )


class _Shape(NamedTuple):
    """What the structure of a history depends on, read from one message."""

    role: str
    call_ids: tuple[str, ...]
    tool_call_id: str | None

    @classmethod
    def of(cls, message: Message) -> _Shape:
        return cls(message.role, message.call_ids, message.tool_call_id)


_ROLES = frozenset(("system", "developer", "user", "assistant", "tool"))


def _shape_of(item: object) -> _Shape | None:
    """The shape of a ``Message``, or of a plain dict that surely parses as one.

    Building a pydantic model per message would dominate validating a long history, so a dict
    made only of the types ``Message`` accepts is read directly. ``None`` means "parse it to
    find out": every dict this accepts parses, but not every dict that parses is accepted here.
    """
    if type(item) is not dict:
        return _Shape.of(item) if isinstance(item, Message) else None
    if not _has_string_keys(item):
        return None
    role = item.get("role")
    content = item.get("content")
    tool_call_id = item.get("tool_call_id")
    if (
        type(role) is not str
        or role not in _ROLES
        or not (content is None or type(content) is str or _are_parts(content))
        or not _is_optional_str(item.get("name"))
        or not _is_optional_str(tool_call_id)
    ):
        return None
    tool_calls = item.get("tool_calls")
    if api_problem(role, content, tool_calls, item) is not None:
        return None  # parsing names the problem
    if tool_calls is None:
        return _Shape(role, (), tool_call_id)
    if type(tool_calls) not in (list, tuple) or not all(map(_is_tool_call, tool_calls)):
        return None
    return _Shape(role, tuple(call["id"] for call in tool_calls), tool_call_id)


def _is_optional_str(value: object) -> bool:
    return value is None or type(value) is str


def _has_string_keys(data: dict[Any, Any]) -> bool:
    # Joining the keys runs at C speed and fails on the first key that is not a string.
    try:
        "".join(data)
    except TypeError:
        return False
    return True


def _are_parts(content: object) -> bool:
    return type(content) is list and all(
        type(part) is dict and _has_string_keys(part) for part in content
    )


def _is_tool_call(call: object) -> bool:
    if type(call) is not dict or not _has_string_keys(call):
        return False
    function = call.get("function")
    return (
        type(call.get("id")) is str
        and type(call.get("type", "")) is str
        and type(function) is dict
        and _has_string_keys(function)
        and type(function.get("name")) is str
        and type(function.get("arguments", "")) is str
    )

"""The tool-call rules of a history's structure, run over what each message's structure
depends on (its ``MessageShape``).

A tool message answers a call of the assistant message right before its run of tool messages;
every call gets exactly one result; call ids are present and unique within one message; a tool
message does not come first. ``memory.context.units`` (``find_problems``) runs them; reading a
plain dict's shape without pydantic (``shape_of``) is what keeps a long history's check fast.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from memory.context.messages import Message, api_problem
from memory.errors import Problem

__all__ = ["MessageShape", "ToolBlock", "check_structure", "shape_of"]


def check_structure(
    block: ToolBlock,
    shapes: Iterable[tuple[int, MessageShape | None]],
    end: int,
    allow_pending_calls: bool,
) -> None:
    """Run the tool-call rules over the messages' shapes (by index), ``block`` collecting."""
    for index, message in shapes:
        if message is None or message.role != "tool":
            block.close(index, in_progress=False)
        if message is None:
            continue
        if message.role == "assistant" and message.call_ids:
            block.open(index, message.call_ids)
        elif message.role == "tool":
            block.answer(index, message.tool_call_id)
    block.close(end, in_progress=allow_pending_calls)


class ToolBlock:
    """The assistant message whose tool results may follow, and which of its calls are open."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        self.owner: int | None = None
        self.pending: dict[str, None] = {}
        self.answered: set[str] = set()
        self.last_call: dict[str, int] = {}  # id -> the latest assistant message that made it

    def open(self, index: int, call_ids: tuple[str, ...]) -> None:
        self.owner = index
        for call_id in call_ids:
            if not call_id:
                self.problems.append(Problem(index, "a tool call has an empty id"))
            elif call_id in self.pending:
                self.problems.append(
                    Problem(index, f"duplicate tool_call_id {call_id!r} in one message")
                )
            else:
                self.pending[call_id] = None
                self.last_call[call_id] = index

    def answer(self, index: int, call_id: str | None) -> None:
        if index == 0:
            self.problems.append(Problem(0, "a tool message cannot come first"))
        elif not call_id:
            self.problems.append(Problem(index, "tool message without a tool_call_id"))
        elif self.owner is None:
            if call_id in self.last_call:
                self.problems.append(
                    Problem(
                        index,
                        f"tool result {call_id!r} is separated from its call ({{related}}) "
                        "by another role",
                        related=self.last_call[call_id],
                    )
                )
            else:
                self.problems.append(
                    Problem(index, f"tool result {call_id!r} has no preceding matching call")
                )
        elif call_id in self.pending:
            del self.pending[call_id]
            self.answered.add(call_id)
        elif call_id in self.answered:
            self.problems.append(Problem(index, f"duplicate tool result for {call_id!r}"))
        else:
            self.problems.append(
                Problem(
                    index,
                    f"unknown tool_call_id {call_id!r} ({{related}} made no such call)",
                    related=self.owner,
                )
            )

    def close(self, at: int, *, in_progress: bool) -> None:
        """End the block before message ``at``; at the end of the list it may be in progress."""
        if self.owner is not None and self.pending and not in_progress:
            missing = ", ".join(self.pending)
            self.problems.append(Problem(self.owner, f"tool call(s) {missing} have no result"))
        self.owner = None
        self.pending.clear()
        self.answered.clear()


class MessageShape(NamedTuple):
    """What the structure of a history depends on, read from one message."""

    role: str
    call_ids: tuple[str, ...]
    tool_call_id: str | None

    @classmethod
    def of(cls, message: Message) -> MessageShape:
        return cls(message.role, message.call_ids, message.tool_call_id)


_ROLES = frozenset(("system", "developer", "user", "assistant", "tool"))


def shape_of(item: object) -> MessageShape | None:
    """The shape of a ``Message``, or of a plain dict that surely parses as one.

    Building a pydantic model per message would dominate validating a long history, so a dict
    made only of the types ``Message`` accepts is read directly. ``None`` means "parse it to
    find out": every dict this accepts parses, but not every dict that parses is accepted here.
    """
    if type(item) is not dict:
        return MessageShape.of(item) if isinstance(item, Message) else None
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
        return MessageShape(role, (), tool_call_id)
    if type(tool_calls) not in (list, tuple) or not all(map(_is_tool_call, tool_calls)):
        return None
    return MessageShape(role, tuple(call["id"] for call in tool_calls), tool_call_id)


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

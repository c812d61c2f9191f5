"""Atomic units of a chat history, the current turn, and structural validation.

A unit is what the window keeps or drops whole: the pinned system message; an assistant message
with ``tool_calls`` together with all its tool results; any other single message.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, NamedTuple, TypeVar

from pydantic import ValidationError

from memory.context.messages import Message, api_problem
from memory.context.tokens import TokenCounter
from memory.errors import Problem

__all__ = [
    "Unit",
    "UnitKind",
    "current_turn_start",
    "find_problems",
    "find_problems_past",
    "first_system_index",
    "fit_newest",
    "fit_newest_start",
    "make_unit",
    "split_units",
    "turn_start",
    "unit_spans",
    "unit_tokens",
    "units_tokens",
    "validate_history",
]

UnitKind = Literal["system", "tool_exchange", "message"]

#: What ``fit_newest`` fits: units, or anything standing for one (a span of a history).
Fitted = TypeVar("Fitted")


class Unit(NamedTuple):
    """A run of messages kept or dropped together.

    A named tuple rather than a frozen dataclass: every request splits its whole window into
    units, and a tuple is made several times faster.

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
    system = first_system_index([message.role for message in messages])
    spans = unit_spans([message.role for message in messages], len(messages))
    return [
        make_unit(start, messages[start:stop], pinned=start == system)
        for start, stop in reversed(list(spans))
    ]


def unit_spans(roles: Sequence[str], stop: int, start: int = 0) -> Iterator[tuple[int, int]]:
    """The ``(start, stop)`` of every unit ending at or before ``stop``, newest first.

    The one place units are found: a run of tool messages belongs to the message before it
    (in a valid history, the assistant message that made the calls); every other message is a
    unit of its own. Walking backwards lets a caller read a long history only as far as it
    needs. Units that begin before ``start`` are not reached.
    """
    while stop > start:
        first = stop - 1
        while first > start and roles[first] == "tool":
            first -= 1
        yield first, stop
        stop = first


def make_unit(start: int, messages: Sequence[Message], *, pinned: bool = False) -> Unit:
    """The unit of ``messages``, the first at index ``start``; ``pinned`` for the system one."""
    kind: UnitKind = (
        "system" if pinned else "tool_exchange" if messages[0].tool_calls else "message"
    )
    return Unit(start, tuple(messages), kind)


def first_system_index(roles: Sequence[str]) -> int | None:
    """Index of the pinned system message: the first system (or developer) message."""
    return next((i for i, role in enumerate(roles) if role in ("system", "developer")), None)


def current_turn_start(messages: Sequence[Message]) -> int:
    """Index of the last user message, where the current turn starts; ``len`` when there is none."""
    return turn_start([message.role for message in messages])


def turn_start(roles: Sequence[str]) -> int:
    """``current_turn_start`` over the roles alone: the one place the current turn is found."""
    for index in range(len(roles) - 1, -1, -1):
        if roles[index] == "user":
            return index
    return len(roles)


def unit_tokens(unit: Unit, counter: TokenCounter) -> int:
    """Tokens of all the messages of a unit (without the request's reply priming)."""
    return sum(counter.count_message(message) for message in unit.messages)


def units_tokens(units: Iterable[Unit], counter: TokenCounter) -> int:
    """Tokens of all the messages of some units."""
    return sum(counter.count_message(message) for unit in units for message in unit.messages)


def fit_newest(
    newest_first: Iterable[Fitted], budget: int, cost: Callable[[Fitted], int]
) -> list[Fitted]:
    """The longest run of the newest units whose costs fit ``budget`` together, oldest first.

    The one rule of every window: ``trim_history``, the hard cap, the recent-message cache and
    fold planning all keep what this keeps. The run stops at the first unit that does not fit:
    an older unit is never skipped to make room for a smaller one, so what is kept is always a
    contiguous, recent part of the history. ``newest_first`` is read only that far, so a lazy
    source is parsed and counted only as far as the budget reaches. A unit may be given as
    anything ``cost`` can price (the recent-message cache gives ``unit_spans``' spans).
    """
    kept: list[Fitted] = []
    spent = 0
    for unit in newest_first:
        spent += cost(unit)
        if spent > budget:
            break
        kept.append(unit)
    return kept[::-1]


def fit_newest_start(roles: Sequence[str], before: Sequence[int], stop: int, budget: int) -> int:
    """Where the run that ``fit_newest`` keeps of the units ending by ``stop`` starts.

    ``stop`` when no unit fits. For costs given as running totals: ``before[i]`` is the cost of
    the messages before index ``i``, so a run from a unit start ``s`` costs ``before[stop] -
    before[s]``. Costs are never negative, so the longest run that fits starts at the first
    unit start whose run fits: a bisection, not a walk over every unit (the recent-message
    cache fits its window on every request).
    """
    first = min(bisect_left(before, before[stop] - budget, 0, stop + 1), stop)
    while 0 < first < stop and roles[first] == "tool":
        first += 1  # inside a unit: the unit does not fit whole, the next one starts the run
    return first


def validate_history(
    messages: Iterable[Mapping[str, Any] | Message], *, allow_pending_calls: bool = False
) -> list[str]:
    """List every structural problem of a history, each sentence naming the message index.

    ``find_problems`` returns the same problems as records; see it for what is checked.

    Returns:
        The problems; an empty list means the history is valid.
    """
    return [
        str(problem) for problem in find_problems(messages, allow_pending_calls=allow_pending_calls)
    ]


def find_problems(
    messages: Iterable[Mapping[str, Any] | Message], *, allow_pending_calls: bool = False
) -> list[Problem]:
    """Every structural problem of a history, as records naming the message index.

    Checks: each item is a chat message; a tool message answers a call of the assistant message
    right before its run of tool messages; every call gets exactly one result; tool call ids are
    present and unique within one assistant message; a tool message does not come first. An id
    may be used again by a later assistant message once its earlier call is answered (local
    models emit ``call_0`` every turn): a result answers the nearest preceding open call.

    Args:
        messages: OpenAI-format dicts or ``Message`` objects.
        allow_pending_calls: accept a final assistant message whose calls are still waiting
            for results (an agent's tool loop in progress, as stored between two requests).
    """
    problems: list[Problem] = []
    parsed: list[_Shape | None] = []
    for index, item in enumerate(messages):
        shape = _shape_of(item)
        if shape is None:
            try:
                shape = _Shape.of(Message.model_validate(item))
            except ValidationError as error:
                first = error.errors()[0]
                where = ".".join(str(part) for part in first["loc"]) or "message"
                problems.append(Problem(index, f"not a chat message ({where}: {first['msg']})"))
        parsed.append(shape)
    block = _ToolBlock(problems)
    _check_structure(block, enumerate(parsed), len(parsed), allow_pending_calls)
    return problems


def find_problems_past(history: Sequence[Message], valid_through: int) -> list[Problem]:
    """``find_problems(history)`` when its first ``valid_through`` messages are known valid.

    Known valid but for calls of their last unit, which may still wait for results: a run of
    stored messages that starts a unit is such a history (each batch was checked against the
    session as it was stored). So only that last unit and what follows are checked; before
    it, no call is open, and of those messages only the ids of their calls are read (to name
    the call an orphan result belongs to, as ``find_problems`` does). The problems are the
    ones ``find_problems`` finds, at a cost that follows the unchecked part.
    """
    start = min(max(valid_through, 1), len(history)) - 1
    while start > 0 and history[start].role == "tool":
        start -= 1
    if start <= 0:
        return find_problems(history)
    problems: list[Problem] = []
    block = _ToolBlock(problems)
    for index in range(start):
        message = history[index]
        if message.tool_calls and message.role == "assistant":
            block.last_call.update((call.id, index) for call in message.tool_calls)
    shapes = ((index, _Shape.of(history[index])) for index in range(start, len(history)))
    _check_structure(block, shapes, len(history), allow_pending_calls=False)
    return problems


def _check_structure(
    block: _ToolBlock,
    shapes: Iterable[tuple[int, _Shape | None]],
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


class _ToolBlock:
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

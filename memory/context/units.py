"""Atomic units of a chat history, the current turn, and structural validation (its tool-call
rules in ``memory.context.tool_call_rules``).

A unit is what the window keeps or drops whole: the pinned system message; an assistant message
with ``tool_calls`` together with all its tool results; any other single message.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, NamedTuple, TypeVar

from pydantic import ValidationError

from memory.context.messages import Message
from memory.context.tokens import TokenCounter
from memory.context.tool_call_rules import MessageShape, ToolBlock, check_structure, shape_of
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
    parsed: list[MessageShape | None] = []
    for index, item in enumerate(messages):
        shape = shape_of(item)
        if shape is None:
            try:
                shape = MessageShape.of(Message.model_validate(item))
            except ValidationError as error:
                first = error.errors()[0]
                where = ".".join(str(part) for part in first["loc"]) or "message"
                problems.append(Problem(index, f"not a chat message ({where}: {first['msg']})"))
        parsed.append(shape)
    block = ToolBlock(problems)
    check_structure(block, enumerate(parsed), len(parsed), allow_pending_calls)
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
    block = ToolBlock(problems)
    for index in range(start):
        message = history[index]
        if message.tool_calls and message.role == "assistant":
            block.last_call.update((call.id, index) for call in message.tool_calls)
    shapes = ((index, MessageShape.of(history[index])) for index in range(start, len(history)))
    check_structure(block, shapes, len(history), allow_pending_calls=False)
    return problems

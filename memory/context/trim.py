"""Trimming a chat history to a token budget by atomic units, cutting oversized tool results.

``trim_history`` is the one-call entry point on plain OpenAI dicts; ``cap_tool_results`` and
``cut_turn_to_fit`` are the building blocks the hard cap reuses.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from memory.context.cut import cut_marker, cut_to_fit
from memory.context.messages import Message
from memory.context.tokens import (
    DEFAULT_MODEL,
    REPLY_PRIMING_TOKENS,
    TokenCounter,
    counter_for_model,
)
from memory.context.units import (
    Unit,
    find_problems,
    first_system_index,
    fit_newest,
    make_unit,
    turn_start,
    unit_spans,
    unit_tokens,
    units_tokens,
)
from memory.errors import ContextOverflowError, InvalidHistoryError

__all__ = [
    "cap_tool_results",
    "cut_tool_result",
    "cut_turn_to_fit",
    "tool_result_cap",
    "trim_history",
]


def cut_tool_result(message: Message, max_tokens: int, counter: TokenCounter) -> Message:
    """Cut a message's text to fit ``max_tokens``, keeping its head and tail around a marker.

    Meant for tool results, but works on any message with text content. The marker (see
    ``memory.context.cut.cut_marker``) says how many content tokens were cut. Content given as
    a list of parts comes back as one text part; non-text parts count as cut.

    Args:
        message: the message to cut; it is not modified.
        max_tokens: the most ``counter.count_message`` may return for the result.
        counter: counts the tokens.

    Returns:
        ``message`` itself when it already fits; otherwise a new message that fits, or, when not
        even the marker fits, the smaller of the marker alone and ``message`` (a cut never makes
        a result bigger), which the caller must treat as an overflow.
    """
    total = counter.count_message(message)
    if total <= max_tokens:
        return message
    frame = counter.count_message(_with_text(message, ""))
    content_tokens = max(total - frame, 1)

    def measure(text: str) -> int:
        return counter.count_message(_with_text(message, text))

    cut = cut_to_fit(
        message.text, max_tokens, measure, counter, keep="both", text_tokens=content_tokens
    )
    if cut is not None:
        return _with_text(message, cut)
    marker_only = _with_text(message, cut_marker(content_tokens))
    return marker_only if counter.count_message(marker_only) < total else message


def _with_text(message: Message, text: str) -> Message:
    """The message with its content replaced by ``text``, in the content's original shape."""
    if isinstance(message.content, list):
        return message.model_copy(update={"content": [{"type": "text", "text": text}]})
    return message.model_copy(update={"content": text})


def tool_result_cap(budget: int, tool_result_max_tokens: int | None = None) -> int:
    """The most one tool result may cost: ``tool_result_max_tokens``, or a quarter of ``budget``."""
    return budget // 4 if tool_result_max_tokens is None else tool_result_max_tokens


def cap_tool_results(unit: Unit, max_tokens: int, counter: TokenCounter) -> Unit:
    """The unit with every tool result above ``max_tokens`` cut by ``cut_tool_result``.

    Returns ``unit`` itself when nothing needed cutting.
    """
    if unit.kind != "tool_exchange":
        return unit
    messages = tuple(
        cut_tool_result(message, max_tokens, counter) if message.role == "tool" else message
        for message in unit.messages
    )
    if all(new is old for new, old in zip(messages, unit.messages, strict=True)):
        return unit
    return Unit(unit.start, messages, unit.kind)


def trim_history(
    messages: list[dict[str, Any]],
    max_tokens: int,
    *,
    model: str = DEFAULT_MODEL,
    tool_result_max_tokens: int | None = None,
    counter: TokenCounter | None = None,
) -> list[dict[str, Any]]:
    """Trim an OpenAI-format history to ``max_tokens`` without breaking its structure.

    The budget covers the whole request as ``count_tokens`` counts it (every message plus the
    reply priming). The first system (or developer) message is always kept where it stands; the
    current turn (the last user message and everything after it) is always kept whole; the rest
    is filled with the most recent whole units that fit, as one contiguous run back from the
    current turn. When the input fits it comes back unchanged. When it does not, tool results
    above ``tool_result_max_tokens`` are cut (head and tail kept around a marker) inside their
    unit, and tool results of the current turn are cut further, largest first, when the
    system message and the current turn would not fit otherwise.

    Args:
        messages: the history as OpenAI chat dicts; never modified.
        max_tokens: the token budget of the whole request.
        model: the model whose tokenizer counts, when no ``counter`` is given.
        tool_result_max_tokens: the most one tool result may cost; ``max_tokens // 4`` by
            default.
        counter: counts the tokens instead of the model's shared tiktoken counter.

    Returns:
        A new list of new dicts (shallow copies of the kept input dicts; fresh dicts for cut
        tool results), in their original order.

    Raises:
        ValueError: ``max_tokens`` is negative.
        InvalidHistoryError: an item is not a chat message or the structure is invalid.
        ContextOverflowError: the system message and the current turn do not fit even with
            their tool results cut to the bare marker.
    """
    if max_tokens < 0:
        raise ValueError(f"max_tokens must not be negative, got {max_tokens}")
    problems = find_problems(messages)
    if problems:
        raise InvalidHistoryError(problems)
    history = _History(messages, counter or counter_for_model(model))
    if history.fits(max_tokens - REPLY_PRIMING_TOKENS):
        return [dict(message) for message in messages]
    cap = tool_result_cap(max_tokens, tool_result_max_tokens)
    return history.render(_select_units(history, max_tokens, cap))


def _select_units(history: _History, max_tokens: int, cap: int) -> list[Unit]:
    """The units to keep, in order, with their tool results cut as needed."""
    counter = history.counter
    pinned = history.pinned()
    fixed = REPLY_PRIMING_TOKENS + units_tokens(pinned, counter)
    turn = history.turn_start()
    current = list(history.units_before(len(history.originals), stop_at=turn))[::-1]
    current = cut_turn_to_fit(current, max_tokens - fixed, cap, counter)
    spent = fixed + units_tokens(current, counter)
    if spent > max_tokens:
        raise ContextOverflowError(
            spent,
            max_tokens,
            "system message, current turn with tool results cut to the marker, reply priming",
        )
    capped = (cap_tool_results(unit, cap, counter) for unit in history.units_before(turn))
    recent = fit_newest(capped, max_tokens - spent, lambda unit: unit_tokens(unit, counter))
    return sorted([*pinned, *recent, *current], key=lambda unit: unit.start)


def cut_turn_to_fit(
    units: Sequence[Unit], room: int, cap: int, counter: TokenCounter
) -> list[Unit]:
    """The current turn with its tool results cut to ``cap``, and further if it must be.

    When the capped turn does not fit ``room`` tokens, bisection finds the largest per-result
    level below ``cap`` at which it does, so the largest results are cut first. Every level
    cuts the original results, so each marker counts from the original size.

    Returns:
        The cut units; when not even the bare markers fit, the units cut to the markers, which
        the caller reports as an overflow.
    """
    capped = [cap_tool_results(unit, cap, counter) for unit in units]
    if units_tokens(capped, counter) <= room:
        return capped
    best = [cap_tool_results(unit, 0, counter) for unit in units]
    if units_tokens(best, counter) > room:
        return best
    low, high = 0, min(cap, _largest_tool_result(units, counter))
    while high - low > 1:
        level = (low + high) // 2
        candidate = [cap_tool_results(unit, level, counter) for unit in units]
        if units_tokens(candidate, counter) <= room:
            low, best = level, candidate
        else:
            high = level
    return best


def _largest_tool_result(units: Sequence[Unit], counter: TokenCounter) -> int:
    return max(
        (
            counter.count_message(message)
            for unit in units
            for message in unit.messages
            if message.role == "tool"
        ),
        default=0,
    )


class _History:
    """A validated history of OpenAI dicts, parsed and counted only as far as it is read.

    Parsing every message of a long history into a model would cost more than the whole trim,
    so messages are parsed on demand, newest first, walking units backwards (``unit_spans``).
    """

    def __init__(self, originals: Sequence[Mapping[str, Any]], counter: TokenCounter) -> None:
        self.originals = originals
        self.counter = counter
        self.roles = [message["role"] for message in originals]
        self._parsed: list[Message | None] = [None] * len(originals)
        self._system = first_system_index(self.roles)

    def message(self, index: int) -> Message:
        parsed = self._parsed[index]
        if parsed is None:
            parsed = self._parsed[index] = Message.model_validate(self.originals[index])
        return parsed

    def fits(self, budget: int) -> bool:
        """Whether all the messages together cost at most ``budget`` tokens."""
        spent = 0
        for index in range(len(self.originals) - 1, -1, -1):
            spent += self.counter.count_message(self.message(index))
            if spent > budget:
                return False
        return spent <= budget

    def turn_start(self) -> int:
        """Index of the last user message; ``len`` when there is none."""
        return turn_start(self.roles)

    def pinned(self) -> list[Unit]:
        """The unit of the first system message, if there is one."""
        if self._system is None:
            return []
        return [make_unit(self._system, [self.message(self._system)], pinned=True)]

    def units_before(self, stop: int, *, stop_at: int = 0) -> Iterator[Unit]:
        """The units that end at or before ``stop``, newest first, down to index ``stop_at``.

        The pinned system message is left out.
        """
        for start, end in unit_spans(self.roles, stop, stop_at):
            if start != self._system:
                yield make_unit(start, [self.message(index) for index in range(start, end)])

    def render(self, units: Sequence[Unit]) -> list[dict[str, Any]]:
        """Kept messages as dicts: shallow copies of the originals, fresh renders of cut ones."""
        rendered: list[dict[str, Any]] = []
        for unit in units:
            for index, message in enumerate(unit.messages, start=unit.start):
                if message is self._parsed[index]:
                    rendered.append(dict(self.originals[index]))
                else:
                    rendered.append(message.to_openai())
        return rendered

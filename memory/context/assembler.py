"""The assembler: one request's context, in prompt order, within budget, with its report."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from memory.context.cap import CappedContext, apply_cap
from memory.context.messages import Message
from memory.context.parts import ContextParts, RetrievedMemory, SummaryContext, order_memories
from memory.context.report import ContextReport, LayerTokens, SummaryState
from memory.context.tokens import TokenCounter
from memory.context.units import Unit, current_turn_start, find_problems_past, split_units
from memory.errors import InvalidHistoryError

__all__ = [
    "AssembledContext",
    "RetrievedMemory",
    "SummaryContext",
    "assemble",
    "context_parts",
    "split_recent",
]


@dataclass(frozen=True, slots=True)
class AssembledContext:
    """The messages to send and the report of how they were chosen.

    Attributes:
        messages: OpenAI-format dicts in prompt order: system, summary, memories, window,
            current turn.
        report: tokens per layer, the budget, and what was dropped or cut and why.
    """

    messages: list[dict[str, Any]]
    report: ContextReport


def assemble(
    history: Sequence[Message],
    *,
    budget: int,
    counter: TokenCounter,
    system: str | Message | None = None,
    summary: SummaryContext | None = None,
    memories: Sequence[RetrievedMemory] = (),
    recent_messages: int = 5,
    tool_result_max_tokens: int | None = None,
    valid_through: int = 0,
    render: Callable[[Message], dict[str, Any]] = Message.to_openai,
) -> AssembledContext:
    """Assemble the context of one request within ``budget`` tokens.

    The prompt is ordered system, summary, memories (pins first, then in the order given), the
    window chosen from ``history``, and the current turn. The summary and memories are sent as
    system messages labelled as context. When the whole does not fit, the hard cap (see
    ``memory.context.cap.apply_cap``) cuts and drops parts in the priority order of
    ``docs/design.md`` ("The hard cap").

    Args:
        history: the conversation to choose the window from, the current turn (the last user
            message and everything after it) at its end; never modified.
        budget: the token budget of the whole request, reply priming included.
        counter: counts the tokens.
        system: the system message; by default the history's first system (or developer)
            message. When given, it replaces the history's one.
        summary: the rolling summary of what left the window.
        memories: memories recalled for this request; pinned ones are never dropped.
        recent_messages: how many of the newest messages before the current turn are dropped
            last (whole units holding them are protected), before only the summary and the
            memories below their floors (``memory.context.floors``).
        tool_result_max_tokens: the most one tool result may cost when the context does not
            fit; ``budget // 4`` by default. The current turn's are cut further while the
            summary and the memories need room for their floors.
        valid_through: the first ``valid_through`` messages of ``history`` are known to be a
            valid history, but for calls of their last unit that may still wait for results
            (a window of stored messages, checked as they were stored). Only their last unit
            and what follows are checked (``find_problems_past``): a long stored window is not
            checked again on every request. The problems found are the same.
        render: renders a message of the context as its OpenAI dict (``Message.to_openai``);
            a caller that holds the rendered dicts of its messages hands out fresh copies.

    Returns:
        The messages to send and their report.

    Raises:
        ValueError: ``budget`` or ``recent_messages`` is negative, or ``system`` is a message
            of another role.
        InvalidHistoryError: ``history`` breaks the chat structure.
        ContextOverflowError: the system message, pinned memories and current turn do not fit.
    """
    if recent_messages < 0:
        raise ValueError(f"recent_messages must not be negative, got {recent_messages}")
    problems = find_problems_past(history, valid_through)
    if problems:
        raise InvalidHistoryError(problems)
    parts = context_parts(
        history, system=system, summary=summary, memories=memories, recent_messages=recent_messages
    )
    measured = parts.measure(counter)
    capped = apply_cap(
        parts,
        budget=budget,
        counter=counter,
        tool_result_max_tokens=tool_result_max_tokens,
        tokens=measured,
    )
    # The cap keeps units whole, so a valid history gives a valid context: not re-checked here
    # (a third of the request's CPU); tests/memory/context/test_trim_properties.py proves it.
    messages = [render(message) for message in capped.parts.messages()]
    # Parts the cap left as they were are not measured again.
    tokens = measured if capped.parts is parts else capped.parts.measure(counter)
    return AssembledContext(messages, _report(capped, budget, tokens))


def context_parts(
    history: Sequence[Message],
    *,
    system: str | Message | None = None,
    summary: SummaryContext | None = None,
    memories: Sequence[RetrievedMemory] = (),
    recent_messages: int = 5,
) -> ContextParts:
    """Sort a valid history and the other inputs into the layers of a context.

    Raises:
        ValueError: ``system`` is a message of another role than system or developer.
    """
    units = split_units(history)
    turn = current_turn_start(history)
    pinned = next((unit.messages[0] for unit in units if unit.kind == "system"), None)
    if isinstance(system, str):
        pinned = Message(role="system", content=system)
    elif system is not None:
        if not system.is_system:
            raise ValueError(f"system must be a system or developer message, not {system.role}")
        pinned = system
    window, recent = split_recent(
        [unit for unit in units if unit.kind != "system" and unit.start < turn], recent_messages
    )
    return ContextParts(
        system=pinned,
        summary=summary,
        memories=order_memories(memories),
        window=window,
        recent=recent,
        current_turn=tuple(unit for unit in units if unit.kind != "system" and unit.start >= turn),
    )


def split_recent(
    units: Sequence[Unit], recent_messages: int
) -> tuple[tuple[Unit, ...], tuple[Unit, ...]]:
    """Split window units into older ones and the whole units holding the newest messages.

    Returns:
        ``(older, recent)``: ``recent`` is the shortest run of newest units that holds at least
        ``recent_messages`` messages (or all units when they hold fewer).
    """
    held = 0
    start = len(units)
    while start > 0 and held < recent_messages:
        start -= 1
        held += len(units[start].messages)
    return tuple(units[:start]), tuple(units[start:])


def _report(capped: CappedContext, budget: int, tokens: LayerTokens) -> ContextReport:
    summary = capped.parts.summary
    state = (
        SummaryState(summary.kind, summary.covered, summary.degraded, capped.summary_shortened)
        if summary
        else None
    )
    return ContextReport(
        budget=budget,
        tokens=tokens,
        dropped=capped.dropped,
        cut_tool_results=capped.cuts,
        summary=state,
    )

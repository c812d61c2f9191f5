"""The hard cap: a pipeline of plain functions that narrows a context's parts to a budget.

``apply_cap`` runs the steps in the priority order of ``docs/design.md`` ("The hard cap"): the
system message, pins and the current turn stay (the turn's big tool results are cut, further
where the summary and the memories need room for their floors: ``memory.context.floors``); the
oldest window units go first, then retrieved memories (the last in prompt order first) and the
summary (shortened or dropped) down to their floors, then the most recent units; the memories
and the summary go below their floors last. Each step returns a new ``CappedContext`` recording
its drops.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from memory.context.cut import preview
from memory.context.floors import Floors, memory_drop_order, retrieved_tokens
from memory.context.parts import (
    SUMMARY_MIN_TOKENS,
    ContextParts,
    RetrievedMemory,
    SummaryContext,
    describe_unit,
    memories_message,
    shorten_summary_text,
    summary_message,
)
from memory.context.report import Dropped, LayerTokens, ToolResultCut
from memory.context.tokens import REPLY_PRIMING_TOKENS, TokenCounter
from memory.context.trim import cap_tool_results, cut_turn_to_fit, tool_result_cap
from memory.context.units import Unit, fit_newest, unit_tokens, units_tokens
from memory.errors import ContextOverflowError

__all__ = [
    "CappedContext",
    "apply_cap",
    "cut_window_tool_results",
    "drop_memories",
    "drop_recent_units",
    "drop_window_units",
    "fit_current_turn",
    "shorten_summary",
]


@dataclass(frozen=True, slots=True)
class CappedContext:
    """The parts of a context as the cap narrows them, with what it dropped and cut.

    Attributes:
        parts: what is still in the context.
        dropped: every drop (and summary shortening), in the order it happened.
        cuts: tool results cut inside units (only those of kept units once ``apply_cap`` ends).
        summary_shortened: whether the summary's text was cut to fit.
        total: tokens of the whole request as ``parts`` stand, reply priming included; each
            step keeps it up to date from what it changed, so nothing is counted twice.
    """

    parts: ContextParts
    total: int
    dropped: tuple[Dropped, ...] = ()
    cuts: tuple[ToolResultCut, ...] = ()
    summary_shortened: bool = False


def apply_cap(
    parts: ContextParts,
    *,
    budget: int,
    counter: TokenCounter,
    tool_result_max_tokens: int | None = None,
    tokens: LayerTokens | None = None,
) -> CappedContext:
    """Narrow ``parts`` to ``budget`` tokens (reply priming included) in the priority order.

    When everything fits, nothing changes (the same ``parts`` are returned). Otherwise tool
    results above ``tool_result_max_tokens`` (``budget // 4`` by default) are cut first, the
    current turn's further while the summary and the memories need room for their floors
    (``Floors``), then parts are dropped until the context fits. ``tokens`` is
    ``parts.measure(counter)`` when the caller has it already.

    Raises:
        ValueError: ``budget`` is negative.
        ContextOverflowError: the system message, pinned memories and the current turn do not
            fit even with the turn's tool results cut to the bare marker.
    """
    if budget < 0:
        raise ValueError(f"budget must not be negative, got {budget}")
    measured = tokens if tokens is not None else parts.measure(counter)
    capped = CappedContext(parts, measured.total)
    if capped.total <= budget:
        return capped
    cap = tool_result_cap(budget, tool_result_max_tokens)
    floors = Floors.of(parts.summary, parts.memories, budget, counter)
    capped = fit_current_turn(capped, budget, cap, counter, reserve=floors.tokens)
    capped = cut_window_tool_results(capped, cap, counter)
    capped = drop_window_units(capped, budget, counter)
    capped = drop_memories(capped, budget, counter, floor=floors.memories_limit)
    capped = shorten_summary(capped, budget, counter, floor=floors.summary_limit)
    capped = drop_recent_units(capped, budget, counter)
    # Below the floors: only when the turn's tool results are at their markers already.
    capped = drop_memories(capped, budget, counter, reason=_BELOW_FLOOR_REASON)
    capped = shorten_summary(
        capped, budget, counter, source=parts.summary, reason=_BELOW_FLOOR_REASON
    )
    kept = {
        unit.start + offset
        for unit in (*capped.parts.window, *capped.parts.recent, *capped.parts.current_turn)
        for offset in range(len(unit.messages))
    }
    return replace(capped, cuts=tuple(cut for cut in capped.cuts if cut.index in kept))


def fit_current_turn(
    capped: CappedContext,
    budget: int,
    tool_result_max_tokens: int,
    counter: TokenCounter,
    *,
    reserve: int = 0,
) -> CappedContext:
    """Cut the current turn's tool results to ``tool_result_max_tokens``, and further if needed.

    The further cut (``cut_turn_to_fit``) finds the largest per-result size at which the system
    message, pins and turn fit with ``reserve`` tokens to spare (the floors of the summary and
    the memories), down to the bare markers.

    Raises:
        ContextOverflowError: the mandatory part does not fit even with the markers alone.
    """
    parts = capped.parts
    pins = memories_message([memory for memory in parts.memories if memory.pinned])
    system_tokens = counter.count_message(parts.system) if parts.system else 0
    pin_tokens = counter.count_message(pins) if pins else 0
    room = budget - REPLY_PRIMING_TOKENS - system_tokens - pin_tokens
    turn = tuple(
        cut_turn_to_fit(parts.current_turn, room - reserve, tool_result_max_tokens, counter)
    )
    tokens = units_tokens(turn, counter)
    if tokens > room:
        raise ContextOverflowError(
            budget - room + tokens,
            budget,
            f"system message {system_tokens} + pinned memories {pin_tokens} + current turn "
            f"{tokens} with its tool results cut to the marker + reply priming "
            f"{REPLY_PRIMING_TOKENS}",
        )
    cuts = _cuts(parts.current_turn, turn, "input", counter)
    saved = sum(cut.tokens_before - cut.tokens_after for cut in cuts)
    return replace(
        capped,
        parts=replace(parts, current_turn=turn),
        cuts=capped.cuts + cuts,
        total=capped.total - saved,
    )


def cut_window_tool_results(
    capped: CappedContext, tool_result_max_tokens: int, counter: TokenCounter
) -> CappedContext:
    """Cut every tool result above ``tool_result_max_tokens`` in the window and recent units."""
    parts = capped.parts
    window = tuple(cap_tool_results(unit, tool_result_max_tokens, counter) for unit in parts.window)
    recent = tuple(cap_tool_results(unit, tool_result_max_tokens, counter) for unit in parts.recent)
    cuts = _cuts(parts.window, window, "window", counter) + _cuts(
        parts.recent, recent, "recent", counter
    )
    saved = sum(cut.tokens_before - cut.tokens_after for cut in cuts)
    return replace(
        capped,
        parts=replace(parts, window=window, recent=recent),
        cuts=capped.cuts + cuts,
        total=capped.total - saved,
    )


def _cuts(
    before: Sequence[Unit],
    after: Sequence[Unit],
    layer: Literal["input", "window", "recent"],
    counter: TokenCounter,
) -> tuple[ToolResultCut, ...]:
    """A record of every message that differs between two runs of the same units."""
    return tuple(
        ToolResultCut(
            layer,
            unit.start + offset,
            old.tool_call_id or "",
            counter.count_message(old),
            counter.count_message(new),
        )
        for unit, cut in zip(before, after, strict=True)
        for offset, (old, new) in enumerate(zip(unit.messages, cut.messages, strict=True))
        if new is not old
    )


_WINDOW_REASON = "over budget: the oldest window units go first"
_MEMORY_REASON = (
    "still over budget without the older window: memories go next, the last in prompt order "
    "first, down to their floor"
)
_SHORTENED_REASON = (
    "still over budget with the memories at their floor: the summary is shortened, down to its "
    "floor"
)
_SUMMARY_REASON = (
    "still over budget with the memories at their floor: the summary would fall below "
    f"{SUMMARY_MIN_TOKENS} tokens"
)
_RECENT_REASON = (
    "still over budget with the summary and the memories at their floors: the most recent units "
    "go last"
)
_BELOW_FLOOR_REASON = (
    "still over budget with the current turn's tool results at their markers and no recent "
    "units: below its floor"
)


def drop_window_units(capped: CappedContext, budget: int, counter: TokenCounter) -> CappedContext:
    """Drop the oldest window units, one whole unit at a time, until the context fits."""
    parts = capped.parts
    return _drop_oldest(
        capped, budget, counter, parts.window, lambda kept: replace(parts, window=kept), "window"
    )


def drop_recent_units(capped: CappedContext, budget: int, counter: TokenCounter) -> CappedContext:
    """Drop the protected recent units, oldest first, until the context fits."""
    parts = capped.parts
    return _drop_oldest(
        capped, budget, counter, parts.recent, lambda kept: replace(parts, recent=kept), "recent"
    )


def _drop_oldest(
    capped: CappedContext,
    budget: int,
    counter: TokenCounter,
    units: tuple[Unit, ...],
    keep: Callable[[tuple[Unit, ...]], ContextParts],
    layer: Literal["window", "recent"],
) -> CappedContext:
    """Keep the newest ``units`` that bring the context within ``budget`` (``keep`` sets them)."""
    over = capped.total - budget
    if over <= 0:
        return capped
    tokens = {unit.start: unit_tokens(unit, counter) for unit in units}
    kept = fit_newest(reversed(units), sum(tokens.values()) - over, lambda u: tokens[u.start])
    gone = units[: len(units) - len(kept)]
    reason = _WINDOW_REASON if layer == "window" else _RECENT_REASON
    dropped = tuple(
        Dropped(layer, describe_unit(u), tokens[u.start], reason, (u.start, u.stop - 1))
        for u in gone
    )
    return replace(
        capped,
        parts=keep(tuple(kept)),
        dropped=capped.dropped + dropped,
        total=capped.total - sum(tokens[unit.start] for unit in gone),
    )


def drop_memories(
    capped: CappedContext,
    budget: int,
    counter: TokenCounter,
    *,
    floor: int = 0,
    reason: str = _MEMORY_REASON,
) -> CappedContext:
    """Drop retrieved (non-pinned) memories, the last in prompt order first, until the context
    fits (recall orders them best first by more than score: ``order_memories``). None goes
    once the retrieved memories cost at most ``floor`` tokens (``retrieved_tokens``).
    """
    over = capped.total - budget
    memories = capped.parts.memories
    gone: set[int] = set()

    def kept() -> list[RetrievedMemory]:
        return [memory for at, memory in enumerate(memories) if at not in gone]

    dropped: list[Dropped] = []
    for index in memory_drop_order(memories):
        if over <= 0 or retrieved_tokens(kept(), counter) <= floor:
            break
        before = _label_tokens(kept(), counter)
        gone.add(index)
        saved = before - _label_tokens(kept(), counter)
        memory = memories[index]
        name = f"memory {memory.id}" if memory.id else f'memory "{preview(memory.text)}"'
        dropped.append(Dropped("memories", f"{name} (score {memory.score:.3f})", saved, reason))
        over -= saved
    if not dropped:
        return capped
    return replace(
        capped,
        parts=replace(capped.parts, memories=tuple(kept())),
        dropped=capped.dropped + tuple(dropped),
        total=capped.total - sum(drop.tokens for drop in dropped),
    )


def shorten_summary(
    capped: CappedContext,
    budget: int,
    counter: TokenCounter,
    *,
    floor: int = 0,
    source: SummaryContext | None = None,
    reason: str | None = None,
) -> CappedContext:
    """Shorten the summary until the context fits (see ``shorten_summary_text``), or drop it.

    Its message is never shortened below ``floor`` tokens (nor touched when it has at most
    that many). ``source`` is the summary to cut from when the one in the context was cut
    already (so the marker counts from the original); ``reason`` replaces the default reasons.
    """
    parts = capped.parts
    over = capped.total - budget
    if over <= 0 or parts.summary is None:
        return capped
    summary = parts.summary
    tokens = counter.count_message(summary_message(summary))
    if floor and tokens <= floor:
        return capped
    name = f"summary ({summary.kind}, covers {summary.covered} messages)"
    shortened = shorten_summary_text(source or summary, max(tokens - over, floor), counter)
    if shortened is None:
        drop = Dropped("summary", name, tokens, reason or _SUMMARY_REASON)
        return replace(
            capped,
            parts=replace(parts, summary=None),
            dropped=(*capped.dropped, drop),
            total=capped.total - tokens,
        )
    left = counter.count_message(summary_message(shortened))
    drop = Dropped(
        "summary",
        f"{name} shortened from {tokens} to {left} tokens",
        tokens - left,
        reason or _SHORTENED_REASON,
    )
    return replace(
        capped,
        parts=replace(parts, summary=shortened),
        dropped=(*capped.dropped, drop),
        summary_shortened=True,
        total=capped.total - (tokens - left),
    )


def _label_tokens(memories: list[RetrievedMemory], counter: TokenCounter) -> int:
    message = memories_message(memories)
    return counter.count_message(message) if message else 0

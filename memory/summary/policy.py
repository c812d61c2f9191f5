"""When to fold old messages into the rolling summary, and how many: a pure planning step."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memory.context.messages import Message
from memory.context.units import Unit, current_turn_start, fit_newest, split_units
from memory.errors import BudgetError

__all__ = ["FoldPolicy", "limit_fold", "plan_fold"]

#: Consolidate when the raw messages after the boundary exceed this share of the history budget.
TRIGGER_RATIO = 0.5
#: After consolidating, keep about this share of the trigger as raw messages.
TARGET_RATIO = 0.6
#: The most recent messages kept raw whenever they fit under the trigger.
MIN_RECENT_MESSAGES = 5


def plan_fold(
    messages: Sequence[Message],
    tokens: Sequence[int],
    *,
    trigger_tokens: int,
    target_tokens: int,
    min_recent_messages: int = MIN_RECENT_MESSAGES,
) -> int:
    """How many leading messages to fold into the summary; 0 when no consolidation is due.

    ``messages`` are the raw messages after the stored summary's boundary, oldest first, without
    the pinned system message; ``tokens`` are their counts. Nothing is folded while the total is
    at most ``trigger_tokens``. Past it, the current turn (from the last user message on) is kept,
    then the most recent whole units while the kept total stays within ``target_tokens``; the
    units holding the last ``min_recent_messages`` messages are kept even past the target as
    long as the kept total stays within ``trigger_tokens`` (so folding never ends above the
    trigger because of them). Everything older is folded.

    The fold point is always a unit boundary: never inside a tool exchange, never inside the
    current turn. A leading run of tool messages whose call was folded earlier (which a fold
    made here never leaves) is folded with the rest.

    Raises:
        BudgetError: the lengths differ, or the trigger and target are not
            ``0 < target_tokens <= trigger_tokens``.
    """
    if len(messages) != len(tokens):
        raise BudgetError(f"{len(messages)} messages but {len(tokens)} token counts")
    if not 0 < target_tokens <= trigger_tokens:
        raise BudgetError(
            f"need 0 < target_tokens <= trigger_tokens, got {target_tokens} and {trigger_tokens}"
        )
    if sum(tokens) <= trigger_tokens:
        return 0

    turn = current_turn_start(messages)
    orphans_end = _orphan_tool_run(messages)
    older = [unit for unit in split_units(messages) if orphans_end <= unit.start < turn]
    recent_start = max(len(messages) - min_recent_messages, 0)
    holds_recent = [unit for unit in older if unit.stop > recent_start]
    rest = older[: len(older) - len(holds_recent)]

    def cost(unit: Unit) -> int:
        return sum(tokens[unit.start : unit.stop])

    kept_turn = sum(tokens[turn:])
    # The units holding the newest messages are kept while the total stays within the trigger,
    # then older units while it stays within the target: one rule (``fit_newest``) twice.
    kept = fit_newest(reversed(holds_recent), trigger_tokens - kept_turn, cost)
    if len(kept) == len(holds_recent):
        spent = kept_turn + sum(cost(unit) for unit in kept)
        kept = fit_newest(reversed(rest), target_tokens - spent, cost) + kept
    return kept[0].start if kept else turn


def limit_fold(
    messages: Sequence[Message], tokens: Sequence[int], fold: int, max_tokens: int
) -> int:
    """The longest run of whole units in ``messages[:fold]`` within ``max_tokens`` (at least one).

    A backlog (a worker that fell behind) is folded in several bounded summariser calls instead
    of one prompt of unbounded size.
    """
    limited = 0
    for unit in split_units(messages[:fold]):
        if limited and sum(tokens[: unit.stop]) > max_tokens:
            break
        limited = unit.stop
    return limited


def _orphan_tool_run(messages: Sequence[Message]) -> int:
    index = 0
    while index < len(messages) and messages[index].role == "tool":
        index += 1
    return index


@dataclass(frozen=True, slots=True)
class FoldPolicy:
    """The thresholds of consolidation, in tokens of raw messages after the boundary.

    Attributes:
        trigger_tokens: consolidate once the raw messages exceed this.
        target_tokens: keep about this much raw after consolidating.
        min_recent_messages: the most recent messages kept whenever they fit the trigger.
    """

    trigger_tokens: int
    target_tokens: int
    min_recent_messages: int = MIN_RECENT_MESSAGES

    def __post_init__(self) -> None:
        if not 0 < self.target_tokens <= self.trigger_tokens:
            raise BudgetError(
                "need 0 < target_tokens <= trigger_tokens, got "
                f"{self.target_tokens} and {self.trigger_tokens}"
            )
        if self.min_recent_messages < 0:
            raise BudgetError(f"min_recent_messages must be >= 0, got {self.min_recent_messages}")

    @classmethod
    def for_history_budget(
        cls,
        history_tokens: int,
        *,
        trigger_ratio: float = TRIGGER_RATIO,
        target_ratio: float = TARGET_RATIO,
        min_recent_messages: int = MIN_RECENT_MESSAGES,
    ) -> FoldPolicy:
        """The default policy for a history budget: trigger at 50%, target 60% of the trigger.

        Raises:
            BudgetError: the ratios leave no room (each must be in ``(0, 1]``).
        """
        if not (0 < trigger_ratio <= 1 and 0 < target_ratio <= 1):
            raise BudgetError(f"ratios must be in (0, 1], got {trigger_ratio}, {target_ratio}")
        trigger = max(int(history_tokens * trigger_ratio), 1)
        target = max(int(trigger * target_ratio), 1)
        return cls(trigger, target, min_recent_messages)

    def plan(self, messages: Sequence[Message], tokens: Sequence[int]) -> int:
        """``plan_fold`` with this policy's thresholds."""
        return plan_fold(
            messages,
            tokens,
            trigger_tokens=self.trigger_tokens,
            target_tokens=self.target_tokens,
            min_recent_messages=self.min_recent_messages,
        )

"""The floors of the hard cap: how much summary and memory a context keeps over everything else.

In a tool loop the current turn's tool results can fill the whole budget; cut only to a
quarter of the budget each, four of them left no room, and every step went out without the
summary and the memories. So the summary and the retrieved memories each have a floor, a share
of the budget: up to it they are kept like the mandatory part (system, pins, current turn), and
the current turn's tool results are cut further (head and tail around the marker) to make room
for them. Above their floors they go in the old order (after the older window, before the
most recent units); below them only when the turn's tool results are at their bare markers.

Measured on one step of a tool loop whose four results fill the budget
(``python -m benchmarks.tool_loop``; the table is in docs/design.md, "The hard cap"): the
results give up 0.6% of a 128k model's budget to keep a 1,024-token summary and four memories
whole, 11% of a 16k model's, and at most 15% of any budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memory.context.parts import (
    RetrievedMemory,
    SummaryContext,
    memories_message,
    shorten_summary_text,
    summary_message,
)
from memory.context.tokens import TokenCounter

__all__ = [
    "MEMORIES_FLOOR_SHARE",
    "SUMMARY_FLOOR_SHARE",
    "Floors",
    "memory_drop_order",
    "retrieved_tokens",
]

#: The summary keeps at least this share of the budget (all of it when it is smaller; cut like
#: any shortened summary, and dropped when less than ``SUMMARY_MIN_TOKENS`` would be left).
SUMMARY_FLOOR_SHARE = 0.10
#: The retrieved memories keep the best of them that fit this share of the budget.
MEMORIES_FLOOR_SHARE = 0.05


@dataclass(frozen=True, slots=True)
class Floors:
    """What the summary and the memories keep of one context at their floors.

    Attributes:
        summary: the summary's message tokens at its floor (0: none, or too short to keep).
        memories: the retrieved memories' tokens at their floor: what the best ones that fit
            ``MEMORIES_FLOOR_SHARE`` of the budget add to the pins' message (0: none fits).
        summary_limit: the most tokens the summary's message is shortened to at its floor.
        memories_limit: the most tokens the retrieved memories keep at their floor.
    """

    summary: int = 0
    memories: int = 0
    summary_limit: int = 0
    memories_limit: int = 0

    @property
    def tokens(self) -> int:
        """The room the floors take beside the mandatory part."""
        return self.summary + self.memories

    @classmethod
    def of(
        cls,
        summary: SummaryContext | None,
        memories: Sequence[RetrievedMemory],
        budget: int,
        counter: TokenCounter,
    ) -> Floors:
        """The floors of a context's summary and memories within ``budget``."""
        summary_limit = int(budget * SUMMARY_FLOOR_SHARE)
        memories_limit = int(budget * MEMORIES_FLOOR_SHARE)
        summary_tokens = 0
        if summary is not None:
            shortened = shorten_summary_text(summary, summary_limit, counter)
            summary_tokens = counter.count_message(summary_message(shortened)) if shortened else 0
        dropped: set[int] = set()
        for index in memory_drop_order(memories):
            kept = [memory for at, memory in enumerate(memories) if at not in dropped]
            if retrieved_tokens(kept, counter) <= memories_limit:
                break
            dropped.add(index)
        kept = [memory for at, memory in enumerate(memories) if at not in dropped]
        return cls(summary_tokens, retrieved_tokens(kept, counter), summary_limit, memories_limit)


def memory_drop_order(memories: Sequence[RetrievedMemory]) -> list[int]:
    """The indices of the retrieved (non-pinned) memories in the order the cap drops them:
    the last in prompt order first (``order_memories``: recall's least wanted)."""
    return [index for index in reversed(range(len(memories))) if not memories[index].pinned]


def retrieved_tokens(memories: Sequence[RetrievedMemory], counter: TokenCounter) -> int:
    """What the retrieved memories add to the pins' message (its header, when no pin has it)."""
    pins = [memory for memory in memories if memory.pinned]
    return _label_tokens(memories, counter) - _label_tokens(pins, counter)


def _label_tokens(memories: Sequence[RetrievedMemory], counter: TokenCounter) -> int:
    message = memories_message(memories)
    return counter.count_message(message) if message else 0

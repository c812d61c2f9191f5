"""The layers of an assembled context, and how the summary and memories are labelled and cut.

A context is, in prompt order: the system message, the rolling summary, the retrieved memories
(pins first), the window of older units, the protected recent units, and the current turn. The
summary and the memories are sent as system messages that say they are context, so the model
does not take them for things the user said.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Literal

from memory.context.cut import Keep, cut_to_fit, preview
from memory.context.messages import Message
from memory.context.report import LayerTokens
from memory.context.tokens import REPLY_PRIMING_TOKENS, TokenCounter
from memory.context.units import Unit, units_tokens

__all__ = [
    "SUMMARY_MIN_TOKENS",
    "ContextParts",
    "RetrievedMemory",
    "SummaryContext",
    "describe_unit",
    "memories_message",
    "order_memories",
    "shorten_summary_text",
    "summary_message",
]

#: A summary shortened below this many tokens of text is dropped instead: a stub misleads.
SUMMARY_MIN_TOKENS = 32

_SUMMARY_KINDS = {"llm": "LLM summary", "raw": "raw archive of the earlier messages"}


@dataclass(frozen=True, slots=True)
class RetrievedMemory:
    """A memory recalled for this request.

    Attributes:
        text: what is remembered, as one sentence or short paragraph.
        score: relevance to the request (higher is more relevant).
        pinned: pinned memories are always sent and never dropped.
        id: the memory's id in its store, when it has one.
    """

    text: str
    score: float
    pinned: bool = False
    id: str | None = None


@dataclass(frozen=True, slots=True)
class SummaryContext:
    """The rolling summary of what left the window.

    Attributes:
        text: the summary.
        covered: how many messages of the conversation it covers.
        kind: ``llm`` (written by a model) or ``raw`` (the dropped messages as plain text).
        degraded: whether it is a fallback because the summariser failed.
    """

    text: str
    covered: int
    kind: Literal["llm", "raw"]
    degraded: bool = False


def summary_message(summary: SummaryContext) -> Message:
    """The summary as a system message labelled as context, not as the user's words."""
    kind = _SUMMARY_KINDS[summary.kind]
    if summary.degraded:
        kind += ", degraded: the summariser failed, so parts may be missing"
    header = (
        f"Summary of the earlier conversation ({summary.covered} messages; {kind}). "
        "This is context, not instructions from the user:"
    )
    return Message(role="system", content=f"{header}\n{summary.text}")


def memories_message(memories: Iterable[RetrievedMemory]) -> Message | None:
    """The memories as one labelled system message of bullets, in the given order.

    Returns ``None`` when there are no memories.
    """
    bullets = [f"- {memory.text}" for memory in memories]
    if not bullets:
        return None
    header = (
        "Remembered context from earlier conversations with this user "
        "(recalled for this request; not said by the user now):"
    )
    return Message(role="system", content="\n".join([header, *bullets]))


def shorten_summary_text(
    summary: SummaryContext, max_tokens: int, counter: TokenCounter
) -> SummaryContext | None:
    """The summary with its text cut so that its labelled message fits ``max_tokens``.

    An LLM summary keeps its head (where a summary states the overall picture); a raw archive
    keeps its tail (the newest archived messages, which lead into the window). The cut is
    marked (see ``memory.context.cut.cut_marker``).

    Returns:
        The shortened summary, or ``None`` when less than ``SUMMARY_MIN_TOKENS`` tokens of its
        text would be left.
    """

    def measure(text: str) -> int:
        return counter.count_message(summary_message(replace(summary, text=text)))

    keep: Keep = "head" if summary.kind == "llm" else "tail"
    cut = cut_to_fit(summary.text, max_tokens, measure, counter, keep=keep)
    if cut is None:
        return None
    if cut is summary.text:
        return summary
    # The marker is the cut's last line (a head kept) or its first (a tail kept).
    kept = cut.rpartition("\n")[0] if keep == "head" else cut.partition("\n")[2]
    if counter.count_text(kept) < SUMMARY_MIN_TOKENS:
        return None
    return replace(summary, text=cut)


def order_memories(memories: Iterable[RetrievedMemory]) -> tuple[RetrievedMemory, ...]:
    """Memories in prompt order: pins first, then by score, highest first (stable on ties)."""
    return tuple(sorted(memories, key=lambda memory: (not memory.pinned, -memory.score)))


def describe_unit(unit: Unit) -> str:
    """A short description of a unit that names its message indices.

    For example ``messages 3-5 (assistant tool calls search, fetch + 2 results)`` or
    ``message 7 (user: "What about its export?")``.
    """
    first = unit.messages[0]
    if unit.kind == "tool_exchange":
        names = ", ".join(call.function.name for call in first.tool_calls or ())
        calls = "call" if len(first.call_ids) == 1 else "calls"
        results = len(unit.messages) - 1
        noun = "result" if results == 1 else "results"
        span = f"messages {unit.start}-{unit.stop - 1}"
        return f"{span} (assistant tool {calls} {names} + {results} {noun})"
    return f'message {unit.start} ({first.role}: "{preview(first.text)}")'


@dataclass(frozen=True, slots=True)
class ContextParts:
    """What a context holds, layer by layer, before or after the cap.

    Attributes:
        system: the system message, sent first.
        summary: the rolling summary.
        memories: retrieved memories in prompt order (see ``order_memories``).
        window: the older units of the window, oldest first (dropped first).
        recent: the units holding the most recent messages before the current turn, oldest
            first (dropped last).
        current_turn: the units of the current turn (never dropped).
    """

    system: Message | None = None
    summary: SummaryContext | None = None
    memories: tuple[RetrievedMemory, ...] = ()
    window: tuple[Unit, ...] = ()
    recent: tuple[Unit, ...] = ()
    current_turn: tuple[Unit, ...] = ()

    def messages(self) -> list[Message]:
        """The context as one message list, in prompt order."""
        head = [self.system, self.summary_message(), memories_message(self.memories)]
        units = (*self.window, *self.recent, *self.current_turn)
        return [
            *(message for message in head if message is not None),
            *(message for unit in units for message in unit.messages),
        ]

    def summary_message(self) -> Message | None:
        """The labelled summary message, if there is a summary."""
        return summary_message(self.summary) if self.summary else None

    def measure(self, counter: TokenCounter) -> LayerTokens:
        """Tokens per layer, and of the whole request (reply priming included)."""
        summary = self.summary_message()
        memories = memories_message(self.memories)
        system = counter.count_message(self.system) if self.system else 0
        summary_tokens = counter.count_message(summary) if summary else 0
        memory_tokens = counter.count_message(memories) if memories else 0
        window = units_tokens((*self.window, *self.recent), counter)
        current = units_tokens(self.current_turn, counter)
        total = system + summary_tokens + memory_tokens + window + current + REPLY_PRIMING_TOKENS
        return LayerTokens(system, summary_tokens, memory_tokens, window, current, total)

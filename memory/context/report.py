"""What an assembled context contains and leaves out: tokens per layer, drops, cuts."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from pydantic_core import to_jsonable_python

__all__ = [
    "ContextReport",
    "Dropped",
    "InterruptedCall",
    "LayerTokens",
    "MessageRef",
    "RecallState",
    "RecalledCard",
    "SummaryState",
    "ToolResultCut",
]

Layer = Literal["window", "memories", "summary", "recent"]


@dataclass(frozen=True, slots=True)
class Dropped:
    """One part left out of the context (or shortened), and why.

    Attributes:
        layer: ``window`` (an older window unit), ``memories`` (a retrieved, non-pinned memory),
            ``summary`` (the summary shortened or dropped) or ``recent`` (a protected recent unit).
        detail: what it was, e.g. ``messages 3-5 (assistant tool call + 2 results)``.
        tokens: tokens the drop saved.
        reason: why it went, in the words of the priority order.
        span: the first and last message of a dropped window unit: indices in the history
            given to ``assemble``; in a report of ``Memory.prepare``, seqs in the session (as
            ``detail`` names them). ``None`` for a memory or the summary.
    """

    layer: Layer
    detail: str
    tokens: int
    reason: str
    span: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class ToolResultCut:
    """A tool result cut inside its unit (head and tail kept, with a marker).

    Attributes:
        layer: ``input`` (the current turn), ``window`` or ``recent``.
        index: index of the tool message in the history; in a report of
            ``Memory.prepare``, its seq in the session.
        tool_call_id: the call the result answers.
        tokens_before: tokens of the message before the cut.
        tokens_after: tokens of the message after the cut.
    """

    layer: Literal["input", "window", "recent"]
    index: int
    tool_call_id: str
    tokens_before: int
    tokens_after: int


@dataclass(frozen=True, slots=True)
class LayerTokens:
    """Tokens per layer of an assembled context.

    Attributes:
        system: the system message.
        summary: the labelled summary message.
        memories: the labelled memories message (pins included).
        window: the window units before the current turn.
        input: the current turn.
        total: the whole request as ``count_tokens`` counts it, reply priming included.
    """

    system: int
    summary: int
    memories: int
    window: int
    input: int
    total: int


@dataclass(frozen=True, slots=True)
class SummaryState:
    """The summary as it was sent.

    Attributes:
        kind: ``llm`` (written by a model) or ``raw`` (an archive of the dropped messages).
        covered: how many messages of the conversation it covers.
        degraded: whether it is a fallback (the summariser failed at least once).
        shortened: whether the cap cut its text to fit the budget.
    """

    kind: Literal["llm", "raw"]
    covered: int
    degraded: bool
    shortened: bool


@dataclass(frozen=True, slots=True)
class InterruptedCall:
    """A tool call closed with an "interrupted: no result" result because the user went on.

    Attributes:
        call_id: the call's id.
        name: the function called.
        call_seq: the seq of the assistant message that made the call.
        result_seq: the seq of the stored result that closed it.
    """

    call_id: str
    name: str
    call_seq: int
    result_seq: int


@dataclass(frozen=True, slots=True)
class RecalledCard:
    """A memory recalled into the context, with its score's parts and why it was chosen.

    A memory is a pin, one card, or the lines of several overlapping turn cards merged into
    one excerpt (consecutive lines of a conversation, each sent once); ``card_id`` is then
    its best-ranked card and ``cards`` all of them.

    Attributes:
        card_id: the (best) card's id in the card store.
        score: its fused search score (1.0 for a pin): 1 means first in both rankings.
        pinned: whether it is a pin (always sent, first).
        type: the card's type (``turn``, ``fact``, ...).
        similarity: the cosine similarity of the card to the query (``None`` for a pin).
        keyword_score: the card's BM25 score for the query's terms (0 when none matched).
        keyword_share: the share of the query's search terms the card holds.
        rank: the card's place among the search's candidates (1 is the best).
        line_score: the score of the memory's best line (``retrieval.SearchConfig``).
        cards: every card whose lines the memory holds, best ranked first.
        message_ids: the stored messages whose lines the memory holds, in order.
        tokens: the tokens the memory takes in the prompt.
        reason: why it was chosen, in words: ``rank 1: cosine 0.52 >= 0.30, 67% of the
            query's words``, ``pinned``.
    """

    card_id: int
    score: float
    pinned: bool
    type: str
    similarity: float | None = None
    keyword_score: float | None = None
    keyword_share: float | None = None
    rank: int | None = None
    line_score: float | None = None
    cards: tuple[int, ...] = ()
    message_ids: tuple[int, ...] = ()
    tokens: int | None = None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class RecallState:
    """What long-term memory recalled for a request.

    Attributes:
        query: the rewritten query searched, or ``None`` when nothing was searched (no user
            message in the window, or ``k`` is 0).
        method: how the query was rewritten (``rules``, ``llm``, ``original``), or ``None``.
        cards: the cards recalled, pins first, then best first (the cap may still drop some:
            see ``ContextReport.dropped``).
        failed: recall failed (database or embedder) and the request went on without memories.
    """

    query: str | None
    method: str | None
    cards: tuple[RecalledCard, ...]
    failed: bool = False


@dataclass(frozen=True, slots=True)
class MessageRef:
    """A stored message, by its seq in the session and its id (an id is never reused)."""

    seq: int
    id: int


@dataclass(frozen=True, slots=True)
class ContextReport:
    """What went into one assembled context and what was left out.

    Attributes:
        budget: the token budget the context had to fit.
        tokens: tokens per layer, and the total.
        dropped: every part left out or shortened, in the order the cap dropped them.
        cut_tool_results: every tool result cut inside a unit that was kept.
        summary: the summary as sent, or ``None`` when there was none or it was dropped.
        interrupted_calls: tool calls this request closed as interrupted (a new user input
            while they waited for results).
        archived: how many messages this request folded into the summary as a raw archive
            because the window outgrew the budget before a background summary arrived.
        recall: what long-term memory recalled, or ``None`` when it is disabled.
        newest: the newest stored message the context was assembled from (``Memory.prepare``),
            or ``None``: a reply recorded with ``reply_to`` this context is stored only while
            the session still holds it (not erased since).
    """

    budget: int
    tokens: LayerTokens
    dropped: tuple[Dropped, ...]
    cut_tool_results: tuple[ToolResultCut, ...]
    summary: SummaryState | None
    interrupted_calls: tuple[InterruptedCall, ...] = ()
    archived: int = 0
    recall: RecallState | None = None
    newest: MessageRef | None = None

    def to_dict(self) -> dict[str, Any]:
        """The report as plain JSON-compatible data (dicts, lists, numbers, strings)."""
        data: dict[str, Any] = to_jsonable_python(self)
        return data

    def to_json(self) -> str:
        """The report as one line of JSON, for logs."""
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":"))

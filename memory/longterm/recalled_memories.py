"""What recall hands on: cards and excerpts as memories of the prompt, priced in its tokens,
and as lines of the report.

The excerpts are composed in ``retrieval`` (``pricing_excerpts``), which does not count
tokens: it asks for each memory's tokens as it goes, and recall answers, in its own loop over
the questions (``retrieval.excerpt_walk.Questions``), with ``memory_tokens``: the tokens the
memory's line takes in the prompt (``memories_message``). So the walk that fills the token
budget never calls back up into ``memory``.
"""

from __future__ import annotations

from dataclasses import dataclass

from memory.context.parts import RetrievedMemory, quote_memory
from memory.context.report import RecalledCard, RecallState
from memory.context.tokens import TokenCounter
from retrieval import Excerpt
from retrieval.turns import day_text
from storage import Card

__all__ = ["Recall", "card_memory", "memory_tokens", "recalled_excerpt"]


@dataclass(frozen=True, slots=True)
class Recall:
    """What one request recalled: the memories for the prompt and their report."""

    memories: tuple[RetrievedMemory, ...]
    state: RecallState


def memory_tokens(counter: TokenCounter, text: str) -> int:
    """The tokens a memory takes in the prompt: its line ``- "..."`` (``memories_message``)."""
    return counter.count_text(f"- {quote_memory(text)}\n")


def card_memory(card: Card, score: float) -> RetrievedMemory:
    """A card as a memory of the prompt, with its date (turn cards carry theirs already) and,
    when what it says no longer holds, until when it did: ``[3 March 2025, until 4 April
    2025] User lives in Lyon``, ``[until 4 April 2025] [3 March 2025] User: I live in Lyon``.

    A pin is shown as written: it holds whenever it was said, and its tokens are known when it
    is pinned (the pin budget is checked then).
    """
    text = card.text
    until = f"until {day_text(card.valid_to)}" if card.valid_to is not None else None
    if card.type != "turn" and not card.pinned:
        when = day_text(card.occurred_at or card.observed_at)
        text = f"[{when}, {until}] {text}" if until else f"[{when}] {text}"
    elif until:
        text = f"[{until}] {text}"
    return RetrievedMemory(text=text, score=score, pinned=card.pinned, id=str(card.id))


def recalled_excerpt(excerpt: Excerpt, tokens: int) -> RecalledCard:
    """An excerpt as the report shows it: the score's parts, its ``tokens`` in the prompt
    (``memory_tokens``) and the reason."""
    best, gate = excerpt.cards[0], excerpt.gates[0]
    return RecalledCard(
        card_id=best.card.id,
        score=best.score,
        pinned=False,
        type=best.card.type,
        similarity=best.similarity,
        keyword_score=best.keyword_score,
        keyword_share=gate.keyword_share,
        rank=excerpt.ranks[0],
        line_score=excerpt.line_score,
        cards=tuple(hit.card.id for hit in excerpt.cards),
        message_ids=excerpt.message_ids,
        tokens=tokens,
        reason=excerpt.reason(),
    )

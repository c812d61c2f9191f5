"""The relevance gate: whether a searched card may be recalled, and why.

A card passes when its cosine similarity to the query reaches the recipe's ``min_similarity``
(a user's setting may replace it; measured per embedder: ``retrieval.search_config_for``) or
it holds ``min_keyword_share`` of the query's search terms, or when the caller vouches for
it. A CJK query has no gate: the similarities were measured on English questions.
"""

from collections.abc import Collection, Sequence

from pydantic import BaseModel, ConfigDict

from retrieval.excerpt_text import line_terms
from retrieval.keywords import is_cjk_term
from retrieval.recipe import SearchConfig
from retrieval.search import ScoredCard

__all__ = ["Gate", "card_gate", "card_terms", "gate_threshold", "relevant_cards"]


class Gate(BaseModel):
    """How a card passed the relevance gate.

    Attributes:
        similarity: The card's cosine similarity to the query.
        min_similarity: The gate's similarity (``None``: no gate).
        keyword_share: The share of the query's search terms the card holds.
        min_keyword_share: The gate's keyword share.
        vouched: Why the caller vouches for the card (it then passes), or ``""``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    similarity: float
    min_similarity: float | None
    keyword_share: float
    min_keyword_share: float
    vouched: str = ""

    @property
    def passed(self) -> bool:
        """Whether the card may be recalled."""
        return (
            bool(self.vouched)
            or self.min_similarity is None
            or self.similarity >= self.min_similarity
            or self.keyword_share >= self.min_keyword_share
        )

    def describe(self) -> str:
        """Why the card passed (or not), in words: ``cosine 0.52 >= 0.30``."""
        cosine = f"cosine {self.similarity:.2f}"
        words = f"{self.keyword_share:.0%} of the query's words"
        if self.vouched:
            return self.vouched
        if self.min_similarity is None:
            return f"{cosine}, {words} (no gate for this embedder or language)"
        if self.similarity >= self.min_similarity:
            return f"{cosine} >= {self.min_similarity:.2f}, {words}"
        if self.keyword_share >= self.min_keyword_share:
            return f"{words} >= {self.min_keyword_share:.0%} ({cosine})"
        return f"{cosine} < {self.min_similarity:.2f} and {words}"


def relevant_cards(
    hits: Sequence[ScoredCard],
    query_terms: Sequence[str],
    config: SearchConfig,
    *,
    min_similarity: float | None = None,
) -> list[ScoredCard]:
    """The cards that pass the relevance gate, in order."""
    wanted = set(query_terms)
    threshold = gate_threshold(wanted, config, min_similarity)
    return [hit for hit in hits if card_gate(hit, wanted, threshold, config, vouched="").passed]


def gate_threshold(
    wanted: set[str], config: SearchConfig, min_similarity: float | None
) -> float | None:
    """The gate's similarity for a query of ``wanted`` terms: ``min_similarity`` if given (a
    user's setting), else the recipe's; none for a CJK query."""
    if any(is_cjk_term(term) for term in wanted):
        # The gate was measured on English questions; on CJK text the similarities of both
        # embedders (the hashing fake sees no CJK word at all) are a scale nobody measured.
        return None
    return config.min_similarity if min_similarity is None else min_similarity


def card_gate(
    hit: ScoredCard,
    wanted: set[str],
    threshold: float | None,
    config: SearchConfig,
    *,
    vouched: str,
) -> Gate:
    """How ``hit`` fares at the gate (``vouched``: why the caller lets it pass, or ``""``)."""
    held = card_terms(hit, config)
    return Gate(
        similarity=hit.similarity,
        min_similarity=threshold,
        keyword_share=len(wanted.intersection(held)) / len(wanted) if wanted else 0.0,
        min_keyword_share=config.min_keyword_share,
        vouched=vouched,
    )


def card_terms(hit: ScoredCard, config: SearchConfig) -> Collection[str]:
    """A card's search terms: as stored, when the search read them (the same analysis of the
    same text, made when the card was stored), else analysed now."""
    return hit.terms if hit.terms is not None else line_terms(hit.card.text, config)

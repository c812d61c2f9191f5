"""``ItemIndex``: a store's items embedded and keyword-indexed on the way in, ranked on the way out.

The same hybrid ranking as cards (``retrieval.search``): a vector ranking (an item's best
indexed text by cosine similarity) and a BM25 keyword ranking over ``analyze``'s terms, fused by
weighted reciprocal rank with the cards' keyword weight (``SearchConfig.keyword_weight``).
BM25's statistics are those of the items searched (the namespace prefix and filter chose them),
not of a user's whole store.
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from retrieval.embedder import Embedder
from retrieval.fusion import DEFAULT_RRF_K, weighted_rrf
from retrieval.keywords import analyze, term_frequencies
from retrieval.recipe import DEFAULT_SEARCH
from storage.cards.store import BM25_B, BM25_K1
from storage.items.search import RankableItem
from storage.items.store import ItemIndexing, ItemStore

__all__ = ["ItemIndex", "RankedItem"]


Ranked = TypeVar("Ranked", bound=RankableItem)


@dataclass(frozen=True, slots=True)
class RankedItem(Generic[Ranked]):
    """An item (a stored item, or its reference) with its fused score (1: first in both
    rankings), or ``None`` when it has no indexed text (ranked after every scored item)."""

    item: Ranked
    score: float | None


class ItemIndex:
    """Turns an item's texts into what finds it, and ranks items for a query."""

    def __init__(
        self,
        store: ItemStore,
        embedder: Embedder,
        *,
        keyword_weight: float = DEFAULT_SEARCH.keyword_weight,
        rrf_k: int = DEFAULT_RRF_K,
    ) -> None:
        """Combine the item store with the embedder of its vectors (the cards' embedder)."""
        self._store = store
        self._embedder = embedder
        self._weights = (1.0, keyword_weight)
        self._rrf_k = rrf_k

    @property
    def dimension(self) -> int:
        """The embedder's vector length."""
        return self._embedder.dimension

    @property
    def store(self) -> ItemStore:
        """The underlying item store."""
        return self._store

    def indexing(self, texts: Sequence[Mapping[str, str]]) -> list[ItemIndexing | None]:
        """What each item is found by, from its indexed texts (path -> text), in one
        embedding batch for all of them; ``None`` for an item with no text to index."""
        flat = [text for item_texts in texts for text in item_texts.values()]
        vectors = iter(self._embedder.embed(flat) if flat else [])
        indexings: list[ItemIndexing | None] = []
        for item_texts in texts:
            if not item_texts:
                indexings.append(None)
                continue
            terms: dict[str, int] = {}
            for text in item_texts.values():
                for term, frequency in term_frequencies(text).items():
                    terms[term] = terms.get(term, 0) + frequency
            indexings.append(
                ItemIndexing(
                    texts=dict(item_texts),
                    vectors={path: next(vectors) for path in item_texts},
                    terms=terms,
                )
            )
        return indexings

    def rank(self, items: Sequence[Ranked], query: str) -> list[RankedItem[Ranked]]:
        """Every given item, best match for ``query`` first, unindexed items last (in the
        order given). Items are what a scan returns, values or references alike."""
        if not items:
            return []
        [vector] = self._embedder.embed([query])
        dense = self._store.vector_ranking(items, vector)
        bm25 = self._bm25(items, analyze(query))
        fused = weighted_rrf(
            [[item_id for item_id, _ in dense], [item_id for item_id, _ in bm25]],
            self._weights,
            k=self._rrf_k,
        )
        # Scaled as card scores are: first in both rankings is 1.
        best = sum(self._weights) / (self._rrf_k + 1)
        by_id = {item.id: item for item in items}
        ranked = [RankedItem(by_id[item_id], min(1.0, score / best)) for item_id, score in fused]
        scored = {item_id for item_id, _ in fused}
        ranked += [RankedItem(item, None) for item in items if item.id not in scored]
        return ranked

    def _bm25(self, items: Sequence[RankableItem], terms: Sequence[str]) -> list[tuple[int, float]]:
        """The items matching any of ``terms``, by Okapi BM25 over the given items."""
        indexed = [item for item in items if item.keyword_length > 0]
        matches = self._store.term_matches(indexed, terms).frequencies
        if not matches:
            return []
        count = len(indexed)
        average = sum(item.keyword_length for item in indexed) / count
        length = {item.id: item.keyword_length for item in indexed}
        df: dict[str, int] = {}
        for found in matches.values():
            for term in found:
                df[term] = df.get(term, 0) + 1
        scores = []
        for item_id, found in matches.items():
            score = 0.0
            for term, frequency in found.items():
                idf = math.log(1 + (count - df[term] + 0.5) / (df[term] + 0.5))
                norm = frequency + BM25_K1 * (1 - BM25_B + BM25_B * length[item_id] / average)
                score += idf * frequency * (BM25_K1 + 1) / norm
            scores.append((item_id, score))
        return sorted(scores, key=lambda pair: (-pair[1], pair[0]))

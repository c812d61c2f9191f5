"""One user's current cards' keyword postings in this process, and their BM25 ranking.

Held beside the user's vectors (``retrieval.vectors``), at the same card version, so a search
whose vectors are held needs from the server only what no process can hold: the version, the
user's card count and keyword length, and the query terms' document frequencies (all of the
user's cards count there, superseded ones too), read by index lookups in one statement
(``storage.cards.search.statistics_sql``).

Why: with the vectors held, the keyword ranking was the search statement's whole cost, and the
largest wait of ``prepare`` with recall: 15-41 ms on the server for a user of 11,000 cards
whose query terms are in thousands of them (BENCHMARKS.md, "prepare with recall"). The same
BM25 over postings held in arrays takes about a millisecond here.

The scores are computed as the statement computes them (the same formula, in the same order of
operations, in float64), so the ranking is the statement's: the best ``limit`` current cards
by score, ties by id. Only the order in which one card's terms are summed may differ, which
can move a score by its last bit: among cards whose scores are equal in exact arithmetic the
statement's order is that of its rows (on the benchmark's templated cards, 23 of 60 queries
had two such cards swapped within the 18 candidates), here it is by id.
"""

import math
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from storage.cards.queries import BM25_B, BM25_K1
from storage.cards.store import CardMatch

__all__ = ["HeldPostings"]


class HeldPostings:
    """The keyword postings of one user's cards by term (immutable): rows of (card id, the
    term's frequency in the card, the card's keyword length).

    Cards that stopped being current (superseded, deleted) may keep rows here until enough of
    them gather to compact; rankings read only the rows of the current cards they are given.
    """

    __slots__ = ("_by_term", "_stale", "nbytes")

    def __init__(self, by_term: Mapping[str, npt.NDArray[np.int64]], stale: int = 0) -> None:
        """Hold ``by_term`` (not copied: its arrays must not change), of which ``stale``
        cards are no longer current."""
        self._by_term = dict(by_term)
        self._stale = stale
        #: The memory the postings' arrays take (not the dictionary's, about 100 bytes a term).
        self.nbytes = sum(rows.nbytes for rows in self._by_term.values())

    def updated(
        self,
        current: npt.NDArray[np.int64],
        removed: int,
        new_ids: npt.NDArray[np.int64],
        new_postings: Mapping[str, npt.NDArray[np.int64]],
    ) -> "HeldPostings":
        """These postings after a write: ``removed`` cards left the current ones (``current``,
        ascending, is what is left and ``new_ids``), and ``new_ids`` came with their postings.

        A card made current again (revived) may still have rows of its own here: they are
        dropped before its postings are added, so no card is counted twice.
        """
        by_term = dict(self._by_term)
        stale = self._stale + removed
        for term, rows in new_postings.items():
            old = by_term.get(term)
            if old is not None:
                if self._stale:
                    old = old[~np.isin(old[:, 0], new_ids)]
                rows = np.concatenate([old, rows])
            by_term[term] = rows
        if stale and stale * 4 > len(current):
            by_term = {term: _of(rows, current) for term, rows in by_term.items()}
            by_term = {term: rows for term, rows in by_term.items() if len(rows)}
            stale = 0
        return HeldPostings(by_term, stale)

    def ranking(
        self,
        current: npt.NDArray[np.int64],
        terms: Sequence[str],
        frequencies: Mapping[str, int],
        *,
        cards: int,
        keyword_length: int,
        limit: int,
    ) -> list[CardMatch]:
        """The ``limit`` current cards best scored by Okapi BM25 over ``terms``, best first,
        ties by id: the keyword ranking of the search statement without filters.

        Args:
            current: The current cards' ids, ascending (those the postings are ranked for).
            terms: The query's distinct terms.
            frequencies: How many of the user's cards hold each term (superseded included).
            cards: How many cards the user has (superseded included).
            keyword_length: The user's total keyword length (superseded included).
            limit: How many cards at most.

        Returns:
            Matches whose score is the BM25 score; only cards holding a term.
        """
        if limit <= 0 or len(current) == 0:
            return []
        n = float(cards)
        average = keyword_length / max(cards, 1)
        held: list[npt.NDArray[np.int64]] = []
        scores: list[npt.NDArray[np.float64]] = []
        # Each card's terms are summed in one order (``terms``'), so cards of the same terms
        # and lengths score the same float and go by id; the statement sums in the order its
        # rows arrive, which differs from card to card (the last bit of a score, measured).
        for term in terms:
            rows, df = self._by_term.get(term), frequencies.get(term, 0)
            if rows is None or df <= 0:
                continue
            # storage.cards.search's _bm25, operation by operation.
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            frequency = rows[:, 1].astype(np.float64)
            length = rows[:, 2].astype(np.float64)
            held.append(rows[:, 0])
            scores.append(
                idf
                * frequency
                * (BM25_K1 + 1)
                / (frequency + BM25_K1 * (1 - BM25_B + BM25_B * length / average))
            )
        if not held:
            return []
        card_ids, score = np.concatenate(held), np.concatenate(scores)
        at = np.minimum(np.searchsorted(current, card_ids), len(current) - 1)
        is_current = current[at] == card_ids
        if not is_current.all():
            at, score = at[is_current], score[is_current]
        totals = np.bincount(at, weights=score, minlength=len(current))
        found = np.flatnonzero(np.bincount(at, minlength=len(current)))
        if len(found) > limit:
            # Every card scored at least the limit-th best score: ties there go by id.
            kth = np.partition(totals[found], len(found) - limit)[len(found) - limit]
            found = found[totals[found] >= kth]
        order = found[np.lexsort((current[found], -totals[found]))][:limit]
        ids, best = current[order].tolist(), totals[order].tolist()
        return [CardMatch(card_id=i, score=s) for i, s in zip(ids, best, strict=True)]


def _of(rows: npt.NDArray[np.int64], current: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The rows of the cards in ``current`` (ascending ids)."""
    if len(current) == 0:
        return rows[:0]
    at = np.minimum(np.searchsorted(current, rows[:, 0]), len(current) - 1)
    kept: npt.NDArray[np.int64] = rows[current[at] == rows[:, 0]]
    return kept

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

Where each term's rows sit among the current cards is remembered, term by term, for the current
cards a ranking was last given (the ids of one ``UserVectors``), and so are their scores, for the
statistics they were computed with: finding the rows was most of a ranking (1.4-2.4 ms of
2.4-4.5 for a query whose common terms are in all of 10,628 cards), and a conversation's queries
repeat their terms. A score is computed as before the first time, so it is the same float.
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from storage.cards.queries import BM25_B, BM25_K1
from storage.cards.store import CardMatch

__all__ = ["HeldPostings"]

#: What remembering a ranked row takes at most: its position among the current cards (int32),
#: its score (float64) and whether its card is current (a byte, only while some rows' are not).
_PLACED_ROW_BYTES = 13


@dataclass(frozen=True, slots=True)
class _Placed:
    """One term's rows as last ranked: the positions of its current cards' rows among the
    current cards, which rows those are (None: all), and their scores for ``statistics``."""

    positions: npt.NDArray[np.int32]
    kept: npt.NDArray[np.bool_] | None
    statistics: tuple[float, int, float]
    scores: npt.NDArray[np.float64]


class HeldPostings:
    """The keyword postings of one user's cards by term (immutable but for what rankings
    remember): rows of (card id, the term's frequency in the card, the card's keyword length).

    Cards that stopped being current (superseded, deleted) may keep rows here until enough of
    them gather to compact; rankings read only the rows of the current cards they are given.
    """

    __slots__ = ("_by_term", "_placed", "_stale", "nbytes")

    def __init__(self, by_term: Mapping[str, npt.NDArray[np.int64]], stale: int = 0) -> None:
        """Hold ``by_term`` (not copied: its arrays must not change), of which ``stale``
        cards are no longer current."""
        self._by_term = dict(by_term)
        self._stale = stale
        # The current cards last ranked for, and where each term's rows sit among them.
        self._placed: tuple[npt.NDArray[np.int64] | None, dict[str, _Placed]] = (None, {})
        #: The memory the postings' arrays take, with the most that remembering where their
        #: rows sit can take (not the dictionaries', about 100 bytes a term).
        self.nbytes = sum(
            rows.nbytes + _PLACED_ROW_BYTES * len(rows) for rows in self._by_term.values()
        )

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
        positions: list[npt.NDArray[np.int32]] = []
        scores: list[npt.NDArray[np.float64]] = []
        # Each card's terms are summed in one order (``terms``'), so cards of the same terms
        # and lengths score the same float and go by id; the statement sums in the order its
        # rows arrive, which differs from card to card (the last bit of a score, measured).
        for term in terms:
            rows, df = self._by_term.get(term), frequencies.get(term, 0)
            if rows is None or df <= 0:
                continue
            at, score = self._scored(term, rows, current, (n, df, average))
            positions.append(at)
            scores.append(score)
        if not positions:
            return []
        at, score = np.concatenate(positions), np.concatenate(scores)
        totals = np.bincount(at, weights=score, minlength=len(current))
        found = np.flatnonzero(np.bincount(at, minlength=len(current)))
        if len(found) > limit:
            # Every card scored at least the limit-th best score: ties there go by id.
            kth = np.partition(totals[found], len(found) - limit)[len(found) - limit]
            found = found[totals[found] >= kth]
        order = found[np.lexsort((current[found], -totals[found]))][:limit]
        ids, best = current[order].tolist(), totals[order].tolist()
        return [CardMatch(card_id=i, score=s) for i, s in zip(ids, best, strict=True)]

    def _scored(
        self,
        term: str,
        rows: npt.NDArray[np.int64],
        current: npt.NDArray[np.int64],
        statistics: tuple[float, int, float],
    ) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.float64]]:
        """Where ``term``'s rows of current cards sit among ``current``, and their BM25
        scores for ``statistics`` (cards, the term's document frequency, the average keyword
        length); remembered for the last ``current`` and, the scores, for the last statistics
        (two threads ranking at once at worst both compute them)."""
        ranked_for, placed = self._placed
        if ranked_for is not current:
            placed = {}
            self._placed = (current, placed)
        found = placed.get(term)
        if found is not None and found.statistics == statistics:
            return found.positions, found.scores
        if found is None:
            card_ids = rows[:, 0]
            at = np.minimum(np.searchsorted(current, card_ids), len(current) - 1)
            is_current = current[at] == card_ids
            kept = None if is_current.all() else is_current
            positions = (at if kept is None else at[kept]).astype(np.int32)
        else:
            positions, kept = found.positions, found.kept
        n, df, average = statistics
        # storage.cards.search's _bm25, operation by operation.
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        frequency = rows[:, 1].astype(np.float64)
        length = rows[:, 2].astype(np.float64)
        score = (
            idf
            * frequency
            * (BM25_K1 + 1)
            / (frequency + BM25_K1 * (1 - BM25_B + BM25_B * length / average))
        )
        scores = score if kept is None else score[kept]
        placed[term] = _Placed(positions, kept, statistics, scores)
        return positions, scores


def _of(rows: npt.NDArray[np.int64], current: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The rows of the cards in ``current`` (ascending ids)."""
    if len(current) == 0:
        return rows[:0]
    at = np.minimum(np.searchsorted(current, rows[:, 0]), len(current) - 1)
    kept: npt.NDArray[np.int64] = rows[current[at] == rows[:, 0]]
    return kept

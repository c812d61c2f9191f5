"""``CardRanking``: the candidates of a hybrid search, with the vector ranking done here.

Storage runs the one statement of a search (``CardStore.candidates``: the keyword ranking in
SQL, and the vector rankings it can compute there) and reads vectors; the ranking of a user's
current vectors held in this process (``retrieval.vectors``) and the HNSW ranking of a user
too big for the exact scan run on this object's threads while that statement runs, and are
merged with it here. When the user's keyword postings are held too (``retrieval.postings``),
the statement reads only the user's version and keyword statistics (index lookups) and both
rankings run here. The query's embedding is asked for only once the vector is needed: with
the user's vectors held and no time window the statement needs none, so it runs while the
embedder (a prefetching one, on another thread) finishes.
"""

import functools
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime

import storage.cards.queries as card_queries
from retrieval.held_texts import hold_texts
from retrieval.vectors import DEFAULT_VECTOR_CACHE_BYTES, CardVectors, UserVectors
from storage.cards.rows import unit_vector
from storage.cards.store import Candidates, CardFilter, CardMatch, CardStore

__all__ = ["CardRanking"]

_NO_FILTER = CardFilter()

# How many users past the exact scan's size a ranking remembers as such.
_INDEXED_USERS_KEPT = 1_024


class CardRanking:
    """The candidates of hybrid searches over one card store, with each user's current
    vectors held in this process where that is exact (thread-safe)."""

    def __init__(
        self, store: CardStore, *, vector_cache_bytes: int = DEFAULT_VECTOR_CACHE_BYTES
    ) -> None:
        """Rank over ``store``.

        Args:
            store: The card store.
            vector_cache_bytes: The most memory this ranking may take to keep users' current
                card vectors (``retrieval.vectors``); 0 keeps none, and every search scans
                in SQL.
        """
        self._store = store
        # Threads up to the executor's default (cores + 4), started as needed: the searches of
        # a server's request threads do not queue behind one another's vector ranking.
        self._ahead = ThreadPoolExecutor(thread_name_prefix="stratamem-ranking")
        #: The users whose last search found more cards than the exact scan takes: the next
        #: search of one starts the index's ranking before the statement.
        self._indexed_users: dict[str, None] = {}
        self._vectors = (
            CardVectors(store, max_bytes=vector_cache_bytes) if vector_cache_bytes > 0 else None
        )
        hold_texts(self.forget)

    def forget(self, user_id: str) -> None:
        """Drop what this ranking holds of the user: the current cards' vectors and keyword
        postings (their terms are the words of the cards), and whether the user is large
        (``retrieval.held_texts``: a forget of the user calls it)."""
        self._indexed_users.pop(user_id, None)
        if self._vectors is not None:
            self._vectors.drop(user_id)

    @property
    def store(self) -> CardStore:
        """The card store ranked over."""
        return self._store

    @property
    def vectors(self) -> CardVectors | None:
        """The users' vectors held in this process (None: none are)."""
        return self._vectors

    def candidates(
        self,
        user_id: str,
        embedding: Sequence[float] | Callable[[], Sequence[float]],
        terms: Iterable[str],
        *,
        limit: int,
        where: CardFilter = _NO_FILTER,
        during: tuple[datetime, datetime] | None = None,
    ) -> Candidates:
        """Return the candidates of a hybrid search: the vector and keyword rankings, the
        nearest cards of a time window, and every similarity.

        One statement for a user with at most ``EXACT_SCAN_MAX_CARDS`` cards (the request
        path's common case); a bigger user's vector ranking walks the HNSW index in a second
        one (``CardStore.search_vector``, which falls back to the exact scan rather than cut
        a ranking short). Without filters, the vector ranking of a smaller user comes from
        the user's current vectors held here when the statement finds them at the user's
        version; otherwise the statement runs the exact scan and the vectors are loaded
        afterwards, for the next search.

        Args:
            user_id: The owner.
            embedding: The query vector (scaled to unit length), or a function that returns
                it, called once and only when the vector is needed.
            terms: The query's keyword terms (repeats are ignored).
            limit: How many candidates each ranking contributes at most.
            where: Filters, applied inside every ranking.
            during: A half-open time window for the ``timed`` ranking.

        Returns:
            The rankings, best first, and the cosine similarity of every candidate.
        """
        given, query = _when_needed(embedding)
        wanted = sorted(set(terms))
        # Only the default search (current cards, no other filter) can use the held vectors:
        # they are exactly the user's current cards.
        vectors = self._vectors if where == _NO_FILTER else None
        held = vectors.get(user_id) if vectors is not None else None
        if held is not None and held.postings is not None:
            found = self._from_postings(user_id, given, query, wanted, limit, during, held)
            if found is not None:
                return found
            assert vectors is not None  # held came from there
            held = vectors.get(user_id)  # refreshed since, or dropped
        return self._searched(user_id, given, query, wanted, limit, where, during, held)

    def _from_postings(
        self,
        user_id: str,
        given: Callable[[], Sequence[float]],
        query: Callable[[], list[float]],
        wanted: list[str],
        limit: int,
        during: tuple[datetime, datetime] | None,
        held: UserVectors,
    ) -> Candidates | None:
        """The candidates of a search without filters from the user's held vectors and
        postings, when they are at the version of the statement that reads the keyword
        statistics (``CardStore.candidates`` with ``postings_held``): both rankings here, the
        statement only index lookups (and the time window's ranking).

        When a write moved the user's version since they were loaded, only what changed is
        loaded first; when that load is at yet another version (a write since the statement)
        or nothing is held any longer, None: the caller searches in SQL.
        """
        assert self._vectors is not None  # held vectors come from there
        ahead = self._ahead.submit(lambda: held.nearest(query(), limit))
        found = self._store.candidates(
            user_id, given() if during is not None else None, wanted, limit=limit,
            during=during, held=True, postings_held=True,
        )  # fmt: skip
        fresh: UserVectors | None = held
        if held.version != found.version or found.cards > card_queries.EXACT_SCAN_MAX_CARDS:
            if not 0 < found.cards <= card_queries.EXACT_SCAN_MAX_CARDS:
                self._vectors.drop(user_id)
                return None
            fresh = self._vectors.refresh(user_id)
            if fresh is None or fresh.version != found.version or fresh.postings is None:
                return None
        assert fresh is not None and fresh.postings is not None  # checked, or just loaded
        # While the query's vector may still be on its way (``ahead`` waits for it).
        keyword = fresh.postings.ranking(
            fresh.ids, wanted, found.frequencies, cards=found.cards,
            keyword_length=found.keyword_length or 0, limit=limit,
        )  # fmt: skip
        dense = ahead.result() if fresh is held else fresh.nearest(query(), limit)
        held = fresh
        similarity = {
            **held.similarities(query(), [m.card_id for m in keyword]),
            **found.similarity,
            **{m.card_id: m.score for m in dense},
        }
        return Candidates(dense, keyword, found.timed, similarity, found.cards, found.version)

    def _searched(
        self,
        user_id: str,
        given: Callable[[], Sequence[float]],
        query: Callable[[], list[float]],
        wanted: list[str],
        limit: int,
        where: CardFilter,
        during: tuple[datetime, datetime] | None,
        held: UserVectors | None,
    ) -> Candidates:
        """The candidates of a search whose keyword ranking runs in SQL (``candidates``)."""
        vectors = self._vectors if where == _NO_FILTER else None
        # With held vectors only the time window's ranking needs the query in SQL.
        in_sql = given() if held is None or during is not None else None
        # The vector ranking that does not come from the statement runs on this object's
        # threads while the statement runs (waiting for the query's embedding, numpy and a
        # second connection all release the interpreter's lock).
        ahead: Future[list[CardMatch]] | None = None
        if held is not None:
            ahead = self._ahead.submit(lambda: held.nearest(query(), limit))
        elif user_id in self._indexed_users:
            ahead = self._ahead.submit(self._index_ranking, user_id, query(), limit, where)
        # The held vectors also say how many of the user's cards are current at their version:
        # the keyword ranking then reads fewer candidates for the same ranking.
        found = self._store.candidates(
            user_id, in_sql, wanted, limit=limit, where=where, during=during,
            held=held is not None,
            current=None if held is None else (held.version, len(held.ids)),
        )  # fmt: skip
        if held is not None and ahead is not None:
            return self._with_held(user_id, query, limit, found, held, ahead)
        if vectors is not None and 0 < found.cards <= card_queries.EXACT_SCAN_MAX_CARDS:
            # Answered by the exact scan in SQL: the next search of this user need not be.
            # Users past the exact scan's size keep the HNSW index instead (a matrix of
            # 100,000 cards measured no faster than the index, took 154 MB and 3 s to load).
            vectors.refresh(user_id)
        if found.cards > card_queries.EXACT_SCAN_MAX_CARDS:
            if len(self._indexed_users) >= _INDEXED_USERS_KEPT:
                self._indexed_users.clear()  # a hint only; each step is atomic, no lock
            self._indexed_users[user_id] = None
            if ahead is not None:
                dense = ahead.result()
            else:
                dense = self._index_ranking(user_id, query(), limit, where)
            similarity = {**found.similarity, **{m.card_id: m.score for m in dense}}
            return Candidates(
                dense, found.keyword, found.timed, similarity, found.cards, found.version
            )
        self._indexed_users.pop(user_id, None)
        return found

    def _index_ranking(
        self, user_id: str, query: Sequence[float], limit: int, where: CardFilter
    ) -> list[CardMatch]:
        """The vector ranking of a user past the exact scan's size, by the HNSW index."""
        return self._store.search_vector(user_id, query, limit=limit, where=where, method="index")

    def _with_held(
        self,
        user_id: str,
        query: Callable[[], list[float]],
        limit: int,
        found: Candidates,
        held: UserVectors,
        ahead: Future[list[CardMatch]],
    ) -> Candidates:
        """Complete a statement run without vector work from the user's held vectors, whose
        ranking ``ahead`` computed while it ran.

        When a write moved the user's version since they were loaded, only what changed is
        loaded first and the ranking computed again (a write after the statement may be in
        them then, as it would be in a second statement). When the user has no card left,
        outgrew what is held, or no longer fits, the vector work is done in SQL after all.
        """
        assert self._vectors is not None  # held vectors come from there
        dense = ahead.result()
        if held.version != found.version or found.cards > card_queries.EXACT_SCAN_MAX_CARDS:
            fresh = None
            if 0 < found.cards <= card_queries.EXACT_SCAN_MAX_CARDS:
                fresh = self._vectors.refresh(user_id)
            else:
                self._vectors.drop(user_id)
            if fresh is None:
                dense = self._store.search_vector(user_id, query(), limit=limit)
                keyword = [m.card_id for m in found.keyword]
                similarity = {
                    **self._store.similarities(user_id, query(), keyword),
                    **found.similarity,
                    **{m.card_id: m.score for m in dense},
                }
                return Candidates(
                    dense, found.keyword, found.timed, similarity, found.cards, found.version
                )
            held = fresh
            dense = held.nearest(query(), limit)
        similarity = {
            **held.similarities(query(), [m.card_id for m in found.keyword]),
            **found.similarity,
            **{m.card_id: m.score for m in dense},
        }
        return Candidates(dense, found.keyword, found.timed, similarity, found.cards, found.version)


def _when_needed(
    embedding: Sequence[float] | Callable[[], Sequence[float]],
) -> tuple[Callable[[], Sequence[float]], Callable[[], list[float]]]:
    """The query vector as given and at unit length, each computed (or waited for) on first
    use, once. Storage scales what it is given itself: it gets the vector as given, so the
    statement's query is the same float for float as when storage asked for it."""

    lock = threading.Lock()  # asked for on two threads at once, it is still computed once
    done: list[Sequence[float]] = []

    def given() -> Sequence[float]:
        with lock:
            if not done:
                done.append(embedding() if callable(embedding) else embedding)
            return done[0]

    @functools.cache
    def unit() -> list[float]:
        return unit_vector(given())

    return given, unit

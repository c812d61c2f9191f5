"""The searches of ``CardStore``: by vector (exact scan or HNSW), by BM25 keywords, and the
candidates of a hybrid search in one statement (``storage.card_search``), with each user's
current vectors held in this process where that is exact (``storage.card_vectors``)."""

import functools
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import text

from storage.card_records import CardFilter, CardMatch, filter_sql
from storage.card_rows import unit_vector, vector_literal
from storage.card_search import Candidates, candidate_sql
from storage.card_vectors import CardVectors, UserVectors
from storage.driver import driver_autocommit, driver_sql
from storage.engine import Database

__all__ = ["BM25_B", "BM25_K1", "EXACT_SCAN_MAX_CARDS", "CardQueries"]

#: Okapi BM25 parameters of the keyword search (the usual defaults).
BM25_K1 = 1.2
BM25_B = 0.75

#: Users with more cards than this are searched through the HNSW index, fewer by an exact scan
#: of their own rows (measured in BENCHMARKS.md, "Card search latency").
EXACT_SCAN_MAX_CARDS = 20_000

# HNSW candidates per search: pgvector 0.6 filters by user after the index scan, so a user with
# a share of the table gets about ef_search * share rows; too few falls back to the exact scan.
_EF_SEARCH = 400

_NO_FILTER = CardFilter()

# How many users past the exact scan's size a store remembers as such.
_INDEXED_USERS_KEPT = 1_024


class CardQueries:
    """``CardStore``'s searching half; every method is scoped by ``user_id``."""

    _database: Database
    _vectors: CardVectors | None
    #: The store's threads, for the vector ranking that runs while the statement runs.
    _ahead: ThreadPoolExecutor
    #: The users whose last search found more cards than the exact scan takes: the next
    #: search of one starts the index's ranking before the statement.
    _indexed_users: dict[str, None]

    def count(self, user_id: str) -> int:
        """Return how many cards the user has, superseded ones included."""
        with self._database.reading() as connection:
            found = connection.execute(
                text("SELECT cards FROM card_stats WHERE user_id = :user_id"),
                {"user_id": user_id},
            ).scalar_one_or_none()
        return int(found or 0)

    def search_vector(
        self,
        user_id: str,
        embedding: Sequence[float],
        *,
        limit: int,
        where: CardFilter = _NO_FILTER,
        method: Literal["auto", "exact", "index"] = "auto",
    ) -> list[CardMatch]:
        """Return the user's cards nearest to ``embedding`` by cosine similarity, best first.

        ``exact`` scans the user's own rows (through the user index) and is always complete;
        ``index`` walks the HNSW index with a raised ``hnsw.ef_search``, and falls back to the
        exact scan when the filter left fewer than ``limit`` rows, so it never returns fewer
        than ``limit`` cards when that many match. ``auto`` uses the index only for users with
        more than ``EXACT_SCAN_MAX_CARDS`` cards.

        Args:
            user_id: The owner.
            embedding: The query vector (scaled to unit length here), or a function that
                returns it, called only once the vector is needed: with the user's vectors
                held and no time window the statement needs none, so it runs while the
                caller's embedder (on another thread) finishes.
            limit: How many cards at most.
            where: Filters.
            method: ``auto``, ``exact`` or ``index``.

        Returns:
            Matches whose score is the cosine similarity.
        """
        if method == "auto":
            method = "index" if self.count(user_id) > EXACT_SCAN_MAX_CARDS else "exact"
        clause, params = filter_sql(where)
        params.update(user_id=user_id, query=vector_literal(unit_vector(embedding)), limit=limit)
        # Stored vectors and the query are unit length, so cosine similarity is the inner
        # product, which the exact scan computes about 30% faster (no norms; measured).
        # The distance is computed once per row (the sort key is the select-list column), and
        # ``+ 0`` hides it from the planner's index matching: the exact scan must never turn
        # into an HNSW scan that drops rows filtered out after it.
        exact_sql = (
            "SELECT id, (embedding <#> CAST(:query AS vector)) + 1 AS distance FROM cards "
            f"WHERE user_id = :user_id{clause} ORDER BY 2 LIMIT :limit"
        )
        distance = "(embedding <=> CAST(:query AS vector))"
        sql = (
            f"SELECT id, {distance} AS distance FROM cards "
            f"WHERE user_id = :user_id{clause} ORDER BY {distance} LIMIT :limit"
        )
        if method == "index":
            # SET LOCAL needs a transaction; the setting ends with it.
            with self._database.transaction() as session:
                session.execute(text(f"SET LOCAL hnsw.ef_search = {_EF_SEARCH}"))
                rows = session.execute(text(sql), params).all()
            if len(rows) < limit:
                method = "exact"
        if method == "exact":
            with self._database.reading() as connection:
                rows = connection.execute(text(exact_sql), params).all()
        return [CardMatch(card_id=row.id, score=1.0 - float(row.distance)) for row in rows]

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
        """Return the candidates of a hybrid search: the rankings ``search_vector`` and
        ``search_keywords`` give, the nearest cards of a time window, and every similarity.

        One statement for a user with at most ``EXACT_SCAN_MAX_CARDS`` cards (the request
        path's common case); a bigger user's vector ranking walks the HNSW index in a second
        one, with ``search_vector``'s fallback, so no ranking is ever cut short by the index.
        Without filters, the vector ranking of such a user comes from the user's current
        vectors held in this process (``storage.card_vectors``) when the statement finds
        them at the user's version; otherwise the statement runs the exact scan and the
        vectors are loaded afterwards, for the next search.

        Args:
            user_id: The owner.
            embedding: The query vector (scaled to unit length here), or a function that
                returns it, called only once the vector is needed: with the user's vectors
                held and no time window the statement needs none, so it runs while the
                caller's embedder (on another thread) finishes.
            terms: The query's keyword terms (repeats are ignored).
            limit: How many candidates each ranking contributes at most.
            where: Filters, applied inside every ranking.
            during: A half-open time window: the ``timed`` ranking holds the user's cards
                said (``observed_at``) or happening (``occurred_at``) in it, nearest first.

        Returns:
            The rankings, best first, and the cosine similarity of every candidate.
        """
        wanted = sorted(set(terms))
        query = _unit_vector_when_needed(embedding)
        # Only the default search (current cards, no other filter) can use the in-memory
        # vectors: they are exactly the user's current cards.
        vectors = self._vectors if where == _NO_FILTER else None
        held = vectors.get(user_id) if vectors is not None else None
        # With held vectors only the time window's ranking needs the query in SQL.
        in_sql = vector_literal(query()) if held is None or during is not None else None
        # The vector ranking that does not come from the statement runs on the store's thread
        # while the statement runs (waiting for the query's embedding, numpy and a second
        # connection all release the interpreter's lock): from the held vectors, or by the
        # HNSW index for a user whose last search found too many cards for the exact scan.
        ahead: Future[list[CardMatch]] | None = None
        if held is not None:
            ahead = self._ahead.submit(lambda: held.nearest(query(), limit))
        elif user_id in self._indexed_users:
            ahead = self._ahead.submit(self._index_ranking, user_id, query(), limit, where)
        sql, params = candidate_sql(where, dense=True, keywords=bool(wanted), during=during)
        params.update(
            user_id=user_id,
            query=in_sql,
            limit=limit,
            exact_max=EXACT_SCAN_MAX_CARDS,
            held=held is not None,
            terms=wanted,
            k1=BM25_K1,
            b=BM25_B,
        )
        window = 4 * limit
        statement = driver_sql(self._database, sql)
        with driver_autocommit(self._database) as connection:
            while True:
                params["window"] = window
                found = _candidates(connection.execute(statement, params).fetchall())
                # Filters dropped so many of the best-scored cards that fewer than ``limit``
                # are left: widen the window to every scored card at once. A filter that keeps
                # few cards (superseded ones, one type) would otherwise cost a statement per
                # step of widening, each scoring every matching term again; the ranking is
                # the same for any window that holds ``limit`` filtered cards.
                if not wanted or len(found.keyword) >= limit or window >= found.scored:
                    break
                window = found.scored
        if held is not None and ahead is not None:
            return self._with_held(user_id, query, limit, found, held, ahead)
        if vectors is not None and 0 < found.cards <= EXACT_SCAN_MAX_CARDS:
            # Answered by the exact scan in SQL: the next search of this user need not be.
            # Users past the exact scan's size keep the HNSW index instead (a matrix of
            # 100,000 cards measured no faster than the index, took 154 MB and 3 s to load).
            vectors.refresh(user_id)
        similarity = found.similarity
        if found.cards > EXACT_SCAN_MAX_CARDS:
            if len(self._indexed_users) >= _INDEXED_USERS_KEPT:
                self._indexed_users.clear()  # a hint only; each step is atomic, no lock
            self._indexed_users[user_id] = None
            if ahead is not None:
                dense = ahead.result()
            else:
                dense = self._index_ranking(user_id, query(), limit, where)
            similarity = {**similarity, **{m.card_id: m.score for m in dense}}
            return Candidates(dense, found.keyword, found.timed, similarity, found.cards)
        self._indexed_users.pop(user_id, None)
        return Candidates(found.dense, found.keyword, found.timed, similarity, found.cards)

    def _index_ranking(
        self, user_id: str, query: Sequence[float], limit: int, where: CardFilter
    ) -> list[CardMatch]:
        """The vector ranking of a user past the exact scan's size, by the HNSW index."""
        return self.search_vector(user_id, query, limit=limit, where=where, method="index")

    def _with_held(
        self,
        user_id: str,
        query: Callable[[], list[float]],
        limit: int,
        found: "_Found",
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
        if held.version != found.version or found.cards > EXACT_SCAN_MAX_CARDS:
            fresh = None
            if 0 < found.cards <= EXACT_SCAN_MAX_CARDS:
                fresh = self._vectors.refresh(user_id)
            else:
                self._vectors.drop(user_id)
            if fresh is None:
                dense = self.search_vector(user_id, query(), limit=limit)
                keyword = [m.card_id for m in found.keyword]
                similarity = {
                    **self.similarities(user_id, query(), keyword),
                    **found.similarity,
                    **{m.card_id: m.score for m in dense},
                }
                return Candidates(dense, found.keyword, found.timed, similarity, found.cards)
            held = fresh
            dense = held.nearest(query(), limit)
        similarity = {
            **held.similarities(query(), [m.card_id for m in found.keyword]),
            **found.similarity,
            **{m.card_id: m.score for m in dense},
        }
        return Candidates(dense, found.keyword, found.timed, similarity, found.cards)

    def similarities(
        self, user_id: str, embedding: Sequence[float], card_ids: Sequence[int]
    ) -> dict[int, float]:
        """Return the cosine similarity of ``embedding`` to each of the user's given cards."""
        if not card_ids:
            return {}
        with self._database.reading() as connection:
            rows = connection.execute(
                text(
                    "SELECT id, -(embedding <#> CAST(:query AS vector)) AS score FROM cards "
                    "WHERE user_id = :user_id AND id = ANY(:ids)"
                ),
                {
                    "user_id": user_id,
                    "query": vector_literal(unit_vector(embedding)),
                    "ids": list(card_ids),
                },
            ).all()
        return {row.id: float(row.score) for row in rows}

    def search_keywords(
        self,
        user_id: str,
        terms: Iterable[str],
        *,
        limit: int,
        where: CardFilter = _NO_FILTER,
    ) -> list[CardMatch]:
        """Return the user's cards ranked by Okapi BM25 over the given terms, best first.

        Document frequencies, the number of cards and the average card length are the user's
        own (all of the user's cards, superseded ones included), so one user's cards never
        change another's scores. Only cards holding at least one term are returned.

        Args:
            user_id: The owner.
            terms: The query's terms (repeats are ignored).
            limit: How many cards at most.
            where: Filters.

        Returns:
            Matches whose score is the BM25 score.
        """
        wanted = sorted(set(terms))
        if not wanted:
            return []
        clause, params = filter_sql(where, alias="c")
        params.update(user_id=user_id, terms=wanted, limit=limit, k1=BM25_K1, b=BM25_B)
        # Scored from card_terms alone (an index-only scan); only the best ``window`` are
        # joined to cards for the filters, and the window grows when the filters drop so
        # many that fewer than ``limit`` are left while more scored cards exist.
        sql = f"""
            WITH stats AS (
                SELECT cards::float8 AS n, keyword_length::float8 / greatest(cards, 1) AS avgdl
                FROM card_stats WHERE user_id = :user_id
            ),
            matches AS MATERIALIZED (
                SELECT term, card_id, frequency, keyword_length FROM card_terms
                WHERE user_id = :user_id AND term = ANY(CAST(:terms AS text[]))
            ),
            df AS (SELECT term, count(*)::float8 AS df FROM matches GROUP BY term),
            scored AS MATERIALIZED (
                SELECT m.card_id, sum(
                    ln(1 + (s.n - df.df + 0.5) / (df.df + 0.5)) * m.frequency * (:k1 + 1)
                    / (m.frequency + :k1 * (1 - :b + :b * m.keyword_length / s.avgdl))
                ) AS score
                FROM matches AS m JOIN df USING (term) CROSS JOIN stats AS s
                GROUP BY m.card_id
            ),
            top AS (SELECT * FROM scored ORDER BY score DESC, card_id LIMIT :window)
            SELECT c.id, top.score, (SELECT count(*) FROM scored) AS scored
            FROM top JOIN cards AS c ON c.user_id = :user_id AND c.id = top.card_id
            WHERE true{clause}
            ORDER BY top.score DESC, c.id
            LIMIT :limit
        """
        window = 4 * limit
        with self._database.reading() as connection:
            while True:
                params["window"] = window
                rows = connection.execute(text(sql), params).all()
                if len(rows) >= limit:
                    break
                # How many cards matched at all (the user's count bounds it when none passed).
                matched = rows[0].scored if rows else self.count(user_id)
                if window >= matched:
                    break
                window *= 4
        return [CardMatch(card_id=row.id, score=float(row.score)) for row in rows]


@dataclass(frozen=True, slots=True)
class _Found(Candidates):
    scored: int = 0
    version: int | None = None


def _candidates(rows: Sequence[tuple[Any, ...]]) -> _Found:
    """Split ``candidate_sql``'s rows (ranking, id, score, rank) into rankings, each ordered
    by its rank."""
    rankings: dict[str, list[tuple[int, CardMatch]]] = {"d": [], "k": [], "t": []}
    similarity: dict[int, float] = {}
    cards = scored = 0
    version: int | None = None
    for ranking, card_id, score, rank in rows:
        if ranking == "n":
            cards, scored, version = int(score), int(rank), card_id
        elif ranking == "s":
            similarity[card_id] = float(score)
        else:
            rankings[ranking].append((rank, CardMatch(card_id=int(card_id), score=float(score))))
            if ranking != "k":
                similarity[card_id] = float(score)
    dense, keyword, timed = (
        [m for _, m in sorted(rankings[r], key=lambda item: item[0])] for r in ("d", "k", "t")
    )
    return _Found(dense, keyword, timed, similarity, cards, scored, version)


def _unit_vector_when_needed(
    embedding: Sequence[float] | Callable[[], Sequence[float]],
) -> Callable[[], list[float]]:
    """The query vector at unit length, computed (or waited for) on first use, once."""

    @functools.cache
    def vector() -> list[float]:
        return unit_vector(embedding() if callable(embedding) else embedding)

    return vector

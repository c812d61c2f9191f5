"""The searches of the card store: by vector (exact scan or HNSW), the candidates of a hybrid
search in one statement (``storage.cards.search``; for a caller holding the user's vectors and
keyword postings, only the statistics their ranking needs), and a user's current vectors and
postings for a caller that ranks them itself (``storage.cards.vectors``). Persistence only: the
ranking of held vectors and postings and the fusion are ``retrieval``'s."""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import text

from storage.cards.records import CardFilter, CardMatch, filter_sql
from storage.cards.rows import unit_vector, vector_literal
from storage.cards.search import Candidates, candidate_sql, statistics_sql
from storage.cards.vectors import CurrentVectors, current_vectors
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


class CardQueries:
    """Searches a user's cards; every method is scoped by ``user_id``."""

    def __init__(self, database: Database, *, dimension: int) -> None:
        """Search the cards of ``database``, whose vectors have ``dimension`` floats."""
        self._database = database
        self.dimension = dimension

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
            embedding: The query vector (scaled to unit length here).
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
        query: Sequence[float] | None,
        terms: Iterable[str],
        *,
        limit: int,
        where: CardFilter = _NO_FILTER,
        during: tuple[datetime, datetime] | None = None,
        held: bool = False,
        current: tuple[int, int] | None = None,
        postings_held: bool = False,
    ) -> Candidates:
        """Return the candidates of a hybrid search in one statement: the vector ranking
        ``search_vector`` gives (exact scan), the keyword ranking (Okapi BM25 over the user's
        own statistics), the nearest cards of a time window, and every similarity.

        The statement leaves out the vector ranking of a user with more than
        ``EXACT_SCAN_MAX_CARDS`` cards (``dense`` is empty, ``cards`` says why: the caller
        ranks them by ``search_vector(method="index")``), and, with ``held``, every vector
        work but the time window's: the caller ranks the user's current vectors it holds
        (``current_vectors``) and checks that they are at the ``version`` returned.

        Args:
            user_id: The owner.
            query: The query vector (scaled to unit length here); may be None only with
                ``held`` and no ``during``.
            terms: The query's keyword terms (repeats are ignored).
            limit: How many candidates each ranking contributes at most.
            where: Filters, applied inside every ranking.
            during: A half-open time window: the ``timed`` ranking holds the user's cards
                said (``observed_at``) or happening (``occurred_at``) in it, nearest first.
            held: The caller holds the user's current vectors: no ``dense`` ranking, and no
                similarity of the keyword ranking's cards.
            current: A version of the user's cards and how many were current at it (the
                caller's held vectors): when the statement sees that version, a search
                without filters reads fewer keyword candidates, for the same ranking
                (``candidate_sql``). Ignored with filters.
            postings_held: With ``held``, without filters: the caller also holds the
                keyword postings of the user's current cards and ranks them itself. The
                statement (``statistics_sql``) then runs no keyword ranking and returns
                what that ranking needs instead: the user's total keyword length and the
                query terms' document frequencies, at the version it returns.

        Returns:
            The rankings, best first, the cosine similarity of every candidate scored in
            SQL, the user's card count and version (and with ``postings_held`` the keyword
            statistics).
        """
        if query is None and (not held or during is not None):
            raise ValueError("the query vector is needed unless held and without a time window")
        wanted = sorted(set(terms))
        if postings_held:
            if not held or where != _NO_FILTER:
                raise ValueError("held postings are the current cards: held, without filters")
            return self._statistics(user_id, query, wanted, limit=limit, during=during)
        sql, params = candidate_sql(where, dense=True, keywords=bool(wanted), during=during)
        params.update(
            user_id=user_id,
            query=None if query is None else vector_literal(unit_vector(query)),
            limit=limit,
            exact_max=EXACT_SCAN_MAX_CARDS,
            held=held,
            terms=wanted,
            k1=BM25_K1,
            b=BM25_B,
        )
        if where != _NO_FILTER:
            current = None  # the other filters leave out more than the superseded cards
        params.update(
            current_version=None if current is None else current[0],
            current_cards=None if current is None else current[1],
        )
        window = 4 * limit
        statement = driver_sql(self._database, sql)
        with driver_autocommit(self._database) as connection:
            while True:
                params["window"] = window
                found = _candidates(connection.execute(statement, params).fetchall())
                if current is not None and found.version == current[0]:
                    # The statement read this many (``candidate_sql``'s ``win``).
                    window = min(window, limit + max(found.cards - current[1], 0))
                # Filters dropped so many of the best-scored cards that fewer than ``limit``
                # are left: widen the window to every scored card at once. A filter that keeps
                # few cards (superseded ones, one type) would otherwise cost a statement per
                # step of widening, each scoring every matching term again; the ranking is
                # the same for any window that holds ``limit`` filtered cards.
                if not wanted or len(found.keyword) >= limit or window >= found.scored:
                    break
                # Widened once, to every scored card, without the count: narrowed again by
                # it, the window would never reach them, and the loop never end.
                window = found.scored
                current = None
                params.update(current_version=None, current_cards=None)
        return Candidates(
            found.dense, found.keyword, found.timed, found.similarity, found.cards, found.version
        )

    def _statistics(
        self,
        user_id: str,
        query: Sequence[float] | None,
        wanted: list[str],
        *,
        limit: int,
        during: tuple[datetime, datetime] | None,
    ) -> Candidates:
        """``candidates`` for a caller holding the current cards' vectors and postings."""
        sql, params = statistics_sql(during=during)
        # The statement compares the query vector only to rank a time window's cards: without
        # one, its text (Python over 384 floats, 0.38 ms of every search) would go unused.
        params.update(
            user_id=user_id,
            terms=wanted,
            query=None if query is None or during is None else vector_literal(unit_vector(query)),
            limit=limit,
        )
        with driver_autocommit(self._database) as connection:
            found = _candidates(
                connection.execute(driver_sql(self._database, sql), params).fetchall()
            )
        return Candidates(
            timed=found.timed,
            similarity=found.similarity,
            cards=found.cards,
            version=found.version,
            keyword_length=found.keyword_length,
            frequencies={wanted[at - 1]: count for at, count in found.positions.items()},
        )

    def current_vectors(
        self,
        user_id: str,
        *,
        known: Sequence[int] | None,
        max_cards: int,
        postings_known: bool = True,
    ) -> CurrentVectors | None:
        """The user's current card vectors and keyword postings at the user's version, read
        in one snapshot: only those of the cards not in ``known`` (a card's vector and terms
        never change; with ``postings_known`` False, the postings of every current card).

        Returns:
            The version, every current card's id and the new cards' vectors and postings,
            or None when the user has no cards or more than ``max_cards``.
        """
        return current_vectors(
            self._database,
            self.dimension,
            user_id,
            known=known,
            max_cards=max_cards,
            postings_known=postings_known,
        )

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


@dataclass(frozen=True, slots=True)
class _Found(Candidates):
    scored: int = 0
    #: ``statistics_sql``'s document frequencies by the term's position in ``terms`` (from 1).
    positions: dict[int, int] = field(default_factory=dict)


def _candidates(rows: Sequence[tuple[Any, ...]]) -> _Found:
    """Split ``candidate_sql``'s (or ``statistics_sql``'s) rows (ranking, id, score, rank)
    into rankings, each ordered by its rank."""
    rankings: dict[str, list[tuple[int, CardMatch]]] = {"d": [], "k": [], "t": []}
    similarity: dict[int, float] = {}
    positions: dict[int, int] = {}
    cards = scored = 0
    version: int | None = None
    keyword_length: int | None = None
    for ranking, card_id, score, rank in rows:
        if ranking == "n":
            cards, scored, version = int(score), int(rank), card_id
        elif ranking == "l":
            keyword_length = int(card_id)
        elif ranking == "f":
            positions[int(card_id)] = int(rank)
        elif ranking == "s":
            similarity[card_id] = float(score)
        else:
            rankings[ranking].append((rank, CardMatch(card_id=int(card_id), score=float(score))))
            if ranking != "k":
                similarity[card_id] = float(score)
    dense, keyword, timed = (
        [m for _, m in sorted(rankings[r], key=lambda item: item[0])] for r in ("d", "k", "t")
    )
    return _Found(
        dense,
        keyword,
        timed,
        similarity,
        cards,
        version=version,
        keyword_length=keyword_length,
        scored=scored,
        positions=positions,
    )

"""``CardStore``: a user's long-term memory cards, their keyword terms and embeddings, in Postgres.

Storage does no text analysis and computes no embeddings: callers (``retrieval``) hand it the
vector and the keyword terms of each card, and the same for queries.
"""

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import Connection, Row, bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.exc import IntegrityError
from sqlalchemy.types import BigInteger, Text

from storage.card_records import (
    Card,
    CardFilter,
    CardMatch,
    CardType,
    NewCard,
    content_hash,
    filter_sql,
)
from storage.card_search import Candidates, candidate_sql
from storage.card_vectors import DEFAULT_VECTOR_CACHE_BYTES, CardVectors
from storage.engine import Database
from storage.errors import StorageError
from storage.migrations import EMBEDDING_DIM

__all__ = [
    "BM25_B",
    "BM25_K1",
    "Candidates",
    "Card",
    "CardFilter",
    "CardMatch",
    "CardStore",
    "CardType",
    "EmbeddingModelMismatchError",
    "NewCard",
    "content_hash",
]

#: Okapi BM25 parameters of the keyword search (the usual defaults).
BM25_K1 = 1.2
BM25_B = 0.75

#: Users with more cards than this are searched through the HNSW index, fewer by an exact scan
#: of their own rows (measured in BENCHMARKS.md, "Card search latency").
EXACT_SCAN_MAX_CARDS = 20_000

# HNSW candidates per search: pgvector 0.6 filters by user after the index scan, so a user with
# a share of the table gets about ef_search * share rows; too few falls back to the exact scan.
_EF_SEARCH = 400


class EmbeddingModelMismatchError(StorageError):
    """The database holds embeddings of another model or dimension than the one given."""


_NO_FILTER = CardFilter()

_CARD_COLUMNS = (
    "id, user_id, type, text, topic, tags, session_id, source_message_ids, source_client_ids, "
    "observed_at, occurred_at, valid_from, valid_to, superseded_by, pinned, created_at, "
    "subject, attribute"
)


class CardStore:
    """The cards of every user; every method is scoped by ``user_id``.

    Opening checks that the database's cards were embedded by the same model and dimension.
    """

    def __init__(
        self,
        database: Database,
        *,
        model: str,
        dimension: int,
        vector_cache_bytes: int = DEFAULT_VECTOR_CACHE_BYTES,
    ) -> None:
        """Open the card store, recording the embedding model on first use.

        Args:
            database: The database to use.
            model: The name of the embedding model whose vectors are stored.
            dimension: Its dimension; must be ``EMBEDDING_DIM``.
            vector_cache_bytes: The most memory this store may take to keep users' current
                card vectors for ``candidates`` (``storage.card_vectors``); 0 keeps none, and
                every search scans in SQL.

        Raises:
            EmbeddingModelMismatchError: The database holds vectors of another model or size.
        """
        if dimension != EMBEDDING_DIM:
            raise EmbeddingModelMismatchError(
                f"embedding dimension {dimension} does not fit the cards table "
                f"(vector({EMBEDDING_DIM})): use a {EMBEDDING_DIM}-dimensional model"
            )
        self._database = database
        self._vectors = (
            CardVectors(database, dimension, max_bytes=vector_cache_bytes)
            if vector_cache_bytes > 0
            else None
        )
        with database.transaction() as session:
            session.execute(
                text(
                    "INSERT INTO card_embedding_model (name, dimension) VALUES (:name, :dim) "
                    "ON CONFLICT (singleton) DO NOTHING"
                ),
                {"name": model, "dim": dimension},
            )
            stored = session.execute(text("SELECT name, dimension FROM card_embedding_model")).one()
        if (stored.name, stored.dimension) != (model, dimension):
            raise EmbeddingModelMismatchError(
                f"the cards in this database were embedded with {stored.name!r} "
                f"({stored.dimension} dimensions), not {model!r} ({dimension}); "
                "re-embed them or use that model"
            )
        self.model = model
        self.dimension = dimension

    # --- writing --------------------------------------------------------------------------

    def add(self, user_id: str, cards: Sequence[NewCard]) -> list[Card]:
        """Store cards; a card whose content the user already has merges its sources instead.

        Identity is the normalized content hash, enforced by a unique constraint, so two
        processes adding the same card at once store one row.

        Args:
            user_id: The owner.
            cards: The cards; duplicates inside the batch are merged too.

        Returns:
            The stored cards, in the order given (a merged duplicate appears once per mention).
        """
        if not cards:
            return []
        merged: dict[str, NewCard] = {}
        order: list[str] = []
        for card in cards:
            key = content_hash(card.type, card.text)
            order.append(key)
            if key in merged:
                first = merged[key]
                merged[key] = first.model_copy(
                    update={
                        "source_message_ids": _union(
                            first.source_message_ids, card.source_message_ids
                        ),
                        "source_client_ids": _union(
                            first.source_client_ids, card.source_client_ids
                        ),
                    }
                )
            else:
                merged[key] = card
        stored: dict[str, Card] = {}
        added_cards = 0
        added_terms = 0
        with self._database.transaction() as session:
            connection = session.connection()
            # One lock order for every writer (by hash), so two batches cannot deadlock.
            for key in sorted(merged):
                row, inserted = _upsert(connection, user_id, key, merged[key])
                stored[key] = _card(row)
                if inserted:
                    terms = merged[key].terms
                    if terms:
                        connection.execute(
                            text(
                                "INSERT INTO card_terms "
                                "(user_id, term, card_id, frequency, keyword_length) "
                                "SELECT :user_id, t.term, :card_id, t.frequency, :length "
                                "FROM unnest(CAST(:terms AS text[]), CAST(:freqs AS int[])) "
                                "AS t(term, frequency)"
                            ),
                            {
                                "user_id": user_id,
                                "card_id": row.id,
                                "length": sum(terms.values()),
                                "terms": list(terms),
                                "freqs": list(terms.values()),
                            },
                        )
                    added_cards += 1
                    added_terms += sum(terms.values())
            if added_cards:
                _bump_stats(connection, user_id, added_cards, added_terms)
        return [stored[key] for key in order]

    def supersede(self, user_id: str, old_id: int, new_id: int) -> Card:
        """Close an old card because a newer one replaces it; the old card is kept.

        Args:
            user_id: The owner of both cards.
            old_id: The card no longer valid.
            new_id: The card that replaces it.

        Returns:
            The old card with ``valid_to`` (the new card's ``valid_from``) and ``superseded_by``.

        Raises:
            LookupError: Either card is not one of the user's.
            ValueError: The two ids are the same.
        """
        if old_id == new_id:
            raise ValueError("a card cannot supersede itself")
        with self._database.transaction() as session:
            row = session.execute(
                text(
                    f"UPDATE cards AS old SET superseded_by = new.id, "
                    f"valid_to = greatest(new.valid_from, old.valid_from) "
                    f"FROM cards AS new "
                    f"WHERE old.user_id = :user_id AND old.id = :old_id "
                    f"AND new.user_id = :user_id AND new.id = :new_id "
                    f"RETURNING {_qualified('old')}"
                ),
                {"user_id": user_id, "old_id": old_id, "new_id": new_id},
            ).one_or_none()
            if row is not None:
                _new_version(session.connection(), user_id)
        if row is None:
            raise LookupError(f"user {user_id!r} has no card {old_id} or no card {new_id}")
        return _card(row)

    def revive(self, user_id: str, card_id: int, valid_from: datetime | None = None) -> Card:
        """Make a superseded card valid again: the fact it states came back.

        Its validity restarts at ``valid_from`` (the database clock when None), so the card
        that superseded it in between can be closed at that time in turn.

        Raises:
            LookupError: The card is not one of the user's.
        """
        with self._database.transaction() as session:
            row = session.execute(
                text(
                    "UPDATE cards SET valid_to = NULL, superseded_by = NULL, "
                    "valid_from = greatest(valid_from, coalesce(:valid_from, now())) "
                    f"WHERE user_id = :user_id AND id = :id RETURNING {_CARD_COLUMNS}"
                ),
                {"valid_from": valid_from, "user_id": user_id, "id": card_id},
            ).one_or_none()
            if row is not None:
                _new_version(session.connection(), user_id)
        if row is None:
            raise LookupError(f"user {user_id!r} has no card {card_id}")
        return _card(row)

    def merge_sources(
        self,
        user_id: str,
        card_id: int,
        *,
        message_ids: Sequence[int] = (),
        client_ids: Sequence[str] = (),
    ) -> Card:
        """Add sources to an existing card (a near-duplicate said again); nothing else changes.

        Raises:
            LookupError: The card is not one of the user's.
        """
        statement = text(
            f"""
            UPDATE cards SET
                source_message_ids = ARRAY(
                    SELECT DISTINCT unnest(source_message_ids || :message_ids) ORDER BY 1
                ),
                source_client_ids = ARRAY(
                    SELECT DISTINCT unnest(source_client_ids || :client_ids) ORDER BY 1
                )
            WHERE user_id = :user_id AND id = :id
            RETURNING {_CARD_COLUMNS}
            """
        ).bindparams(
            bindparam("message_ids", type_=ARRAY(BigInteger)),
            bindparam("client_ids", type_=ARRAY(Text)),
        )
        with self._database.transaction() as session:
            row = session.execute(
                statement,
                {
                    "message_ids": list(message_ids),
                    "client_ids": list(client_ids),
                    "user_id": user_id,
                    "id": card_id,
                },
            ).one_or_none()
        if row is None:
            raise LookupError(f"user {user_id!r} has no card {card_id}")
        return _card(row)

    def set_pinned(self, user_id: str, card_id: int, pinned: bool) -> Card:
        """Pin or unpin a card.

        Raises:
            LookupError: The card is not one of the user's.
        """
        with self._database.transaction() as session:
            row = session.execute(
                text(
                    f"UPDATE cards SET pinned = :pinned WHERE user_id = :user_id AND id = :id "
                    f"RETURNING {_CARD_COLUMNS}"
                ),
                {"pinned": pinned, "user_id": user_id, "id": card_id},
            ).one_or_none()
        if row is None:
            raise LookupError(f"user {user_id!r} has no card {card_id}")
        return _card(row)

    def delete(
        self, user_id: str, *, card_id: int | None = None, session_id: str | None = None
    ) -> int:
        """Delete cards for real: one card, a session's cards, or (neither given) all the user's.

        Returns:
            How many cards were deleted.
        """
        where = "user_id = :user_id"
        params: dict[str, Any] = {"user_id": user_id}
        if card_id is not None:
            where += " AND id = :card_id"
            params["card_id"] = card_id
        if session_id is not None:
            where += " AND session_id = :session_id"
            params["session_id"] = session_id
        with self._database.transaction() as session:
            connection = session.connection()
            gone = connection.execute(
                text(f"DELETE FROM cards WHERE {where} RETURNING id, keyword_length"), params
            ).all()
            if not gone:
                return 0
            ids = [row.id for row in gone]
            connection.execute(
                text("DELETE FROM card_terms WHERE user_id = :user_id AND card_id = ANY(:ids)"),
                {"user_id": user_id, "ids": ids},
            )
            # A card superseded by a deleted one keeps its valid_to: it was still replaced.
            connection.execute(
                text(
                    "UPDATE cards SET superseded_by = NULL "
                    "WHERE user_id = :user_id AND superseded_by = ANY(:ids)"
                ),
                {"user_id": user_id, "ids": ids},
            )
            _bump_stats(connection, user_id, -len(gone), -sum(r.keyword_length for r in gone))
            # A user with no card left keeps no statistics either (forget leaves nothing).
            connection.execute(
                text("DELETE FROM card_stats WHERE user_id = :user_id AND cards <= 0"),
                {"user_id": user_id},
            )
        return len(gone)

    # --- reading --------------------------------------------------------------------------

    def get(self, user_id: str, card_id: int) -> Card | None:
        """Return one of the user's cards, or None."""
        found = self.get_many(user_id, [card_id])
        return found[0] if found else None

    def get_many(self, user_id: str, card_ids: Sequence[int]) -> list[Card]:
        """Return the user's cards among ``card_ids``, in the order of ``card_ids``."""
        if not card_ids:
            return []
        with self._database.reading() as connection:
            rows = connection.execute(
                text(
                    f"SELECT {_CARD_COLUMNS} FROM cards WHERE user_id = :user_id AND id = ANY(:ids)"
                ),
                {"user_id": user_id, "ids": list(card_ids)},
            ).all()
        by_id = {row.id: _card(row) for row in rows}
        return [by_id[i] for i in card_ids if i in by_id]

    def list_cards(
        self, user_id: str, where: CardFilter = _NO_FILTER, *, limit: int | None = None
    ) -> list[Card]:
        """Return the user's cards that pass the filter, oldest first (by id)."""
        clause, params = filter_sql(where)
        params["user_id"] = user_id
        sql = f"SELECT {_CARD_COLUMNS} FROM cards WHERE user_id = :user_id{clause} ORDER BY id"
        if limit is not None:
            sql += " LIMIT :limit"
            params["limit"] = limit
        with self._database.reading() as connection:
            return [_card(row) for row in connection.execute(text(sql), params)]

    def current_keyed(
        self,
        user_id: str,
        keys: Iterable[tuple[str, str]],
        *,
        prefixes: Iterable[tuple[str, str]] = (),
    ) -> list[Card]:
        """Return the user's valid cards with one of the given (subject, attribute) pairs.

        What a new card on the same subject and attribute may supersede; served by the partial
        index on (user_id, subject, attribute) of valid cards.

        Args:
            user_id: The owner.
            keys: (subject, attribute) pairs matched exactly.
            prefixes: (subject, attribute prefix) pairs: an attribute starting with the prefix
                matches (task attributes ``task:...`` are compared word by word by the caller).

        Returns:
            The cards, oldest first (by id).
        """
        exact, starts = sorted(set(keys)), sorted(set(prefixes))
        if not exact and not starts:
            return []
        statement = text(
            f"""
            SELECT {_CARD_COLUMNS} FROM cards AS c
            WHERE c.user_id = :user_id AND c.valid_to IS NULL AND c.subject IS NOT NULL AND (
                (c.subject, c.attribute) IN (
                    SELECT k.subject, k.attribute
                    FROM unnest(:subjects, :attributes) AS k(subject, attribute)
                )
                OR EXISTS (
                    SELECT 1 FROM unnest(:prefix_subjects, :prefixes) AS p(subject, prefix)
                    WHERE c.subject = p.subject AND starts_with(c.attribute, p.prefix)
                )
            )
            ORDER BY c.id
            """
        ).bindparams(
            *(
                bindparam(name, type_=ARRAY(Text))
                for name in ("subjects", "attributes", "prefix_subjects", "prefixes")
            )
        )
        with self._database.reading() as connection:
            rows = connection.execute(
                statement,
                {
                    "user_id": user_id,
                    "subjects": [subject for subject, _ in exact],
                    "attributes": [attribute for _, attribute in exact],
                    "prefix_subjects": [subject for subject, _ in starts],
                    "prefixes": [prefix for _, prefix in starts],
                },
            ).all()
        return [_card(row) for row in rows]

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
        params.update(user_id=user_id, query=_vector(_unit(embedding)), limit=limit)
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
        embedding: Sequence[float],
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
            embedding: The query vector (scaled to unit length here).
            terms: The query's keyword terms (repeats are ignored).
            limit: How many candidates each ranking contributes at most.
            where: Filters, applied inside every ranking.
            during: A half-open time window: the ``timed`` ranking holds the user's cards
                said (``observed_at``) or happening (``occurred_at``) in it, nearest first.

        Returns:
            The rankings, best first, and the cosine similarity of every candidate.
        """
        wanted = sorted(set(terms))
        query = _unit(embedding)
        # Only the default search (current cards, no other filter) can use the in-memory
        # vectors: they are exactly the user's current cards.
        vectors = self._vectors if where == _NO_FILTER else None
        held = vectors.get(user_id) if vectors is not None else None
        sql, params = candidate_sql(where, dense=True, keywords=bool(wanted), during=during)
        params.update(
            user_id=user_id,
            query=_vector(query),
            limit=limit,
            exact_max=EXACT_SCAN_MAX_CARDS,
            held_version=held.version if held is not None else -1,
            terms=wanted,
            k1=BM25_K1,
            b=BM25_B,
        )
        window = 4 * limit
        with self._database.reading() as connection:
            while True:
                params["window"] = window
                found = _candidates(connection.execute(text(sql), params).all())
                # Filters dropped so many of the best-scored cards that fewer than ``limit``
                # are left: widen the window while more scored cards exist.
                if not wanted or len(found.keyword) >= limit or window >= found.scored:
                    break
                window *= 4
        similarity = found.similarity
        if held is not None and held.version == found.version:
            # The statement left the vector work to the held matrix (it is exact here).
            keyword = [m.card_id for m in found.keyword]
            similarity = {**held.similarities(query, keyword), **found.similarity}
            if found.cards <= EXACT_SCAN_MAX_CARDS:
                dense = held.nearest(query, limit)
                similarity.update((m.card_id, m.score) for m in dense)
                return Candidates(dense, found.keyword, found.timed, similarity, found.cards)
        if vectors is not None:
            # Not held at this version: the statement ran the exact scan, the next need not.
            # Users past the exact scan's size keep the HNSW index instead (a matrix of
            # 100,000 cards measured no faster than the index, took 154 MB and 3 s to load).
            if 0 < found.cards <= EXACT_SCAN_MAX_CARDS:
                vectors.refresh(user_id)
            else:
                vectors.drop(user_id)
        if found.cards > EXACT_SCAN_MAX_CARDS:
            dense = self.search_vector(user_id, embedding, limit=limit, where=where, method="index")
            similarity = {**similarity, **{m.card_id: m.score for m in dense}}
            return Candidates(dense, found.keyword, found.timed, similarity, found.cards)
        return Candidates(found.dense, found.keyword, found.timed, similarity, found.cards)

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
                {"user_id": user_id, "query": _vector(_unit(embedding)), "ids": list(card_ids)},
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


def _candidates(rows: Sequence[Row[Any]]) -> _Found:
    """Split ``candidate_sql``'s rows into rankings, each ordered by its rank."""
    rankings: dict[str, list[tuple[int, CardMatch]]] = {"d": [], "k": [], "t": []}
    similarity: dict[int, float] = {}
    cards = scored = 0
    version: int | None = None
    for row in rows:
        if row.ranking == "n":
            cards, scored, version = int(row.score), int(row.rank), row.id
        elif row.ranking == "s":
            similarity[row.id] = float(row.score)
        else:
            rankings[row.ranking].append((row.rank, CardMatch(card_id=row.id, score=row.score)))
            if row.ranking != "k":
                similarity[row.id] = float(row.score)
    dense, keyword, timed = (
        [m for _, m in sorted(rankings[r], key=lambda item: item[0])] for r in ("d", "k", "t")
    )
    return _Found(dense, keyword, timed, similarity, cards, scored, version)


def _upsert(connection: Connection, user_id: str, key: str, card: NewCard) -> tuple[Row[Any], bool]:
    """Insert one card or merge its sources into the existing one; say whether it was new."""
    statement = text(
        f"""
        INSERT INTO cards (
            user_id, type, text, topic, tags, session_id, source_message_ids,
            source_client_ids, observed_at, occurred_at, valid_from, pinned, content_hash,
            embedding, keyword_length, subject, attribute
        ) VALUES (
            :user_id, :type, :text, :topic, :tags, :session_id, :message_ids, :client_ids,
            coalesce(:observed_at, now()), :occurred_at, coalesce(:observed_at, now()),
            :pinned, :hash, CAST(:embedding AS vector), :keyword_length, :subject, :attribute
        )
        ON CONFLICT (user_id, content_hash) DO UPDATE SET
            subject = coalesce(cards.subject, excluded.subject),
            attribute = coalesce(cards.attribute, excluded.attribute),
            source_message_ids = ARRAY(
                SELECT DISTINCT unnest(cards.source_message_ids || excluded.source_message_ids)
                ORDER BY 1
            ),
            source_client_ids = ARRAY(
                SELECT DISTINCT unnest(cards.source_client_ids || excluded.source_client_ids)
                ORDER BY 1
            )
        RETURNING {_CARD_COLUMNS}, (xmax = 0) AS inserted
        """
    ).bindparams(
        bindparam("tags", type_=ARRAY(Text)),
        bindparam("message_ids", type_=ARRAY(BigInteger)),
        bindparam("client_ids", type_=ARRAY(Text)),
    )
    try:
        row = connection.execute(
            statement,
            {
                "user_id": user_id,
                "type": card.type,
                "text": card.text,
                "topic": card.topic,
                "tags": card.tags,
                "session_id": card.session_id,
                "message_ids": card.source_message_ids,
                "client_ids": card.source_client_ids,
                "observed_at": card.observed_at,
                "occurred_at": card.occurred_at,
                "pinned": card.pinned,
                "hash": key,
                "embedding": _vector(_unit(card.embedding)),
                "keyword_length": sum(card.terms.values()),
                "subject": card.subject,
                "attribute": card.attribute,
            },
        ).one()
    except IntegrityError as error:
        raise StorageError(f"cannot store a card of user {user_id!r}: {error.orig}") from error
    return row, bool(row.inserted)


def _bump_stats(connection: Connection, user_id: str, cards: int, terms: int) -> None:
    """Add to (or, negative, take from) the user's keyword statistics; a new card version."""
    connection.execute(
        text(
            "INSERT INTO card_stats (user_id, cards, keyword_length) VALUES (:u, :c, :t) "
            "ON CONFLICT (user_id) DO UPDATE SET cards = card_stats.cards + excluded.cards, "
            "keyword_length = card_stats.keyword_length + excluded.keyword_length, "
            "version = nextval('card_stats_version_seq')"
        ),
        {"u": user_id, "c": cards, "t": terms},
    )


def _new_version(connection: Connection, user_id: str) -> None:
    """Mark the user's current cards as changed (``storage.card_vectors``): call it in the
    transaction of every write that adds, removes, closes or reopens one of them."""
    connection.execute(
        text(
            "UPDATE card_stats SET version = nextval('card_stats_version_seq') "
            "WHERE user_id = :user_id"
        ),
        {"user_id": user_id},
    )


def _qualified(alias: str) -> str:
    """The card columns, each prefixed with a table alias."""
    return ", ".join(f"{alias}.{name.strip()}" for name in _CARD_COLUMNS.split(","))


def _vector(values: Sequence[float]) -> str:
    """Render a vector as pgvector's text input."""
    return "[" + ",".join(repr(float(v)) for v in values) + "]"


def _unit(values: Sequence[float]) -> list[float]:
    """Scale a vector to unit length (cosine similarity is then the inner product)."""
    length = math.sqrt(math.fsum(v * v for v in values))
    return [float(v) / length for v in values] if length else [float(v) for v in values]


def _union(first: Sequence[Any], second: Sequence[Any]) -> list[Any]:
    """Merge two source lists, keeping the first occurrence of each."""
    return list(dict.fromkeys([*first, *second]))


def _card(row: Row[Any]) -> Card:
    """Turn a row of ``_CARD_COLUMNS`` into the record callers see."""
    values = row._mapping
    return Card(**{name: values[name] for name in Card.model_fields})

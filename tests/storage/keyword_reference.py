"""The full keyword scan the pruned one of ``CardStore.candidates`` is checked against."""

from collections.abc import Iterable

from sqlalchemy import text

from storage import CardFilter, Database
from storage.cards.queries import BM25_B, BM25_K1
from storage.cards.records import CardMatch, filter_sql

_NO_FILTER = CardFilter()


def search_keywords(
    database: Database,
    user_id: str,
    terms: Iterable[str],
    *,
    limit: int,
    where: CardFilter = _NO_FILTER,
) -> list[CardMatch]:
    """Return the user's cards ranked by Okapi BM25 over the given terms, best first: every
    card holding a term scored by all of them, the reference ``CardStore.candidates``'
    pruned keyword ranking must equal (this was ``CardStore.search_keywords``).

    Document frequencies, the number of cards and the average card length are the user's
    own (all of the user's cards, superseded ones included), so one user's cards never
    change another's scores. Only cards holding at least one term are returned.

    Args:
        database: The database.
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
    with database.reading() as connection:
        while True:
            params["window"] = window
            rows = connection.execute(text(sql), params).all()
            if len(rows) >= limit:
                break
            # How many cards matched at all (the user's count bounds it when none passed).
            matched = rows[0].scored if rows else _count(database, user_id)
            if window >= matched:
                break
            window *= 4
    return [CardMatch(card_id=row.id, score=float(row.score)) for row in rows]


def _count(database: Database, user_id: str) -> int:
    with database.reading() as connection:
        found = connection.execute(
            text("SELECT cards FROM card_stats WHERE user_id = :user_id"), {"user_id": user_id}
        ).scalar_one_or_none()
    return int(found or 0)

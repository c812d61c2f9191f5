"""The candidates of one hybrid card search, gathered in one SQL statement.

A search used to cost five round trips (the user's card count, the vector ranking, the keyword
ranking, the similarities of keyword-only hits, the cards); on the request path each costs a
connection checkout, a parse and a plan. ``candidate_sql`` gathers the three rankings (nearest
vectors, BM25, and the nearest cards of a time window when the query names one) and the cosine
similarity of every candidate in one statement. Fusing them is ``retrieval``'s business.
"""

from dataclasses import dataclass, field
from datetime import datetime

from storage.card_records import CardFilter, CardMatch, filter_sql

__all__ = ["Candidates", "candidate_sql", "during_sql"]


@dataclass(frozen=True, slots=True)
class Candidates:
    """The rankings of one search, best first, before fusion.

    Attributes:
        dense: Nearest cards by cosine similarity (score: the similarity).
        keyword: Cards by BM25 over the query's terms (score: BM25).
        timed: Nearest cards said or happening in the query's time window (score: similarity).
        similarity: The cosine similarity of every candidate of the three rankings.
        cards: How many cards the user has (superseded ones included).
    """

    dense: list[CardMatch] = field(default_factory=list)
    keyword: list[CardMatch] = field(default_factory=list)
    timed: list[CardMatch] = field(default_factory=list)
    similarity: dict[int, float] = field(default_factory=dict)
    cards: int = 0


def during_sql(alias: str = "") -> str:
    """The condition "said or happened in ``[:d_since, :d_until)``" on a card."""
    p = f"{alias}." if alias else ""
    return (
        f"(({p}observed_at >= :d_since AND {p}observed_at < :d_until) "
        f"OR ({p}occurred_at >= :d_since AND {p}occurred_at < :d_until))"
    )


def candidate_sql(
    where: CardFilter, *, dense: bool, keywords: bool, during: tuple[datetime, datetime] | None
) -> tuple[str, dict[str, object]]:
    """The statement returning one row per candidate of each ranking, and its filter params.

    Columns: ``ranking`` (``d`` dense, ``k`` keyword, ``t`` timed, ``s`` the similarity of a
    keyword-only hit, ``n`` one row with the user's card version in ``id``, card count in
    ``score`` and how many cards matched any term in ``rank``), ``id``, ``score``, ``rank``.

    Bound parameters the caller adds: ``user_id``, ``query`` (pgvector text, unit length),
    ``limit``, ``exact_max`` (the dense ranking is an exact scan, run only for users with at
    most that many cards; bigger users take the HNSW index in a second statement),
    ``held`` (the caller holds the user's current vectors in memory, ``storage.card_vectors``:
    the ``d`` and ``s`` rows are left out, the caller computes them at the version the ``n``
    row gives), and with
    ``keywords``: ``terms``, ``k1``, ``b``, ``window``; with ``during``: nothing more.

    The vector distances are inner products of unit vectors (the same order as cosine, and
    cheaper: no norms), each computed once per row; ``+ 0`` hides them from the planner's index
    matching, so an exact scan never becomes an HNSW scan that drops rows filtered after it.
    """
    clause, params = filter_sql(where)
    c_clause, _ = filter_sql(where, alias="c")
    ctes = [
        "stats AS MATERIALIZED (SELECT cards, version, cards::float8 AS n, "
        "keyword_length::float8 / greatest(cards, 1) AS avgdl "
        "FROM card_stats WHERE user_id = :user_id)",
    ]
    parts = ["SELECT 'n' AS ranking, (SELECT version FROM stats) AS id, "
             "coalesce((SELECT cards FROM stats), 0)::float8 AS score, "
             f"{'(SELECT count(*) FROM scored)' if keywords else '0'}::int AS rank"]  # fmt: skip
    if dense:
        ctes.append(
            "dense AS MATERIALIZED (SELECT id, "
            "row_number() OVER (ORDER BY distance, id) AS rank, 1 - distance AS score FROM ("
            "SELECT id, (embedding <#> CAST(:query AS vector)) + 1 AS distance FROM cards "
            f"WHERE user_id = :user_id{clause} "
            "AND coalesce((SELECT cards FROM stats), 0) <= :exact_max "
            "AND NOT CAST(:held AS boolean) "
            "ORDER BY 2 LIMIT :limit) AS nearest)"
        )
        parts.append("SELECT 'd', id, score, rank FROM dense")
    else:
        ctes.append("dense AS (SELECT NULL::bigint AS id WHERE false)")
    if keywords:
        ctes += [
            "matches AS MATERIALIZED (SELECT term, card_id, frequency, keyword_length "
            "FROM card_terms WHERE user_id = :user_id AND term = ANY(CAST(:terms AS text[])))",
            "df AS (SELECT term, count(*)::float8 AS df FROM matches GROUP BY term)",
            "scored AS MATERIALIZED (SELECT m.card_id, sum("
            "ln(1 + (s.n - df.df + 0.5) / (df.df + 0.5)) * m.frequency * (:k1 + 1) "
            "/ (m.frequency + :k1 * (1 - :b + :b * m.keyword_length / s.avgdl))) AS score "
            "FROM matches AS m JOIN df USING (term) CROSS JOIN stats AS s GROUP BY m.card_id)",
            # Only the best ``window`` scored cards are joined to cards for the filters; the
            # caller widens the window when the filters left fewer than ``limit``.
            "top AS (SELECT * FROM scored ORDER BY score DESC, card_id LIMIT :window)",
            # One index lookup per scored card (``OFFSET 0`` keeps the lateral subquery from
            # being flattened into a join that reads every current card id of the user).
            "keyword AS MATERIALIZED (SELECT c.id, top.score, "
            "row_number() OVER (ORDER BY top.score DESC, c.id) AS rank "
            "FROM top CROSS JOIN LATERAL (SELECT c.id FROM cards AS c "
            f"WHERE c.user_id = :user_id AND c.id = top.card_id{c_clause} OFFSET 0) AS c "
            "ORDER BY top.score DESC, c.id LIMIT :limit)",
        ]
        parts += [
            "SELECT 'k', id, score, rank FROM keyword",
            "SELECT 's', c.id, -(c.embedding <#> CAST(:query AS vector)), 0 FROM cards AS c "
            "WHERE NOT CAST(:held AS boolean) AND c.user_id = :user_id AND c.id IN "
            "(SELECT id FROM keyword EXCEPT SELECT id FROM dense)",
        ]
    if during is not None:
        ctes.append(
            "timed AS MATERIALIZED (SELECT id, "
            "row_number() OVER (ORDER BY distance, id) AS rank, 1 - distance AS score FROM ("
            "SELECT id, (embedding <#> CAST(:query AS vector)) + 1 AS distance FROM cards "
            f"WHERE user_id = :user_id{clause} AND {during_sql()} "
            "ORDER BY 2 LIMIT :limit) AS nearest)"
        )
        parts.append("SELECT 't', id, score, rank FROM timed")
        params.update(d_since=during[0], d_until=during[1])
    sql = "WITH " + ",\n".join(ctes) + "\n" + "\nUNION ALL ".join(parts)
    return sql, params

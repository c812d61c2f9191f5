"""The candidates of one hybrid card search, gathered in one SQL statement.

A search used to cost five round trips (the user's card count, the vector ranking, the keyword
ranking, the similarities of keyword-only hits, the cards); on the request path each costs a
connection checkout, a parse and a plan. ``candidate_sql`` gathers the three rankings (nearest
vectors, BM25, and the nearest cards of a time window when the query names one) and the cosine
similarity of every candidate in one statement. Fusing them is ``retrieval``'s business.
"""

from dataclasses import dataclass, field
from datetime import datetime

from storage.cards.records import CardFilter, CardMatch, filter_sql

__all__ = ["Candidates", "candidate_sql", "during_sql", "statistics_sql"]


@dataclass(frozen=True, slots=True)
class Candidates:
    """The rankings of one search, best first, before fusion.

    Attributes:
        dense: Nearest cards by cosine similarity (score: the similarity).
        keyword: Cards by BM25 over the query's terms (score: BM25).
        timed: Nearest cards said or happening in the query's time window (score: similarity).
        similarity: The cosine similarity of every candidate of the three rankings.
        cards: How many cards the user has (superseded ones included).
        version: The user's card version the statement saw (``card_stats.version``): the
            vectors a caller holds rank exactly these cards when theirs is the same.
        keyword_length: The user's total count of keyword terms (superseded cards included),
            when the caller ranks the keywords itself (``statistics_sql``), else None.
        frequencies: Then, how many of the user's cards hold each of the query's terms
            (superseded ones included; a term no card holds is absent).
    """

    dense: list[CardMatch] = field(default_factory=list)
    keyword: list[CardMatch] = field(default_factory=list)
    timed: list[CardMatch] = field(default_factory=list)
    similarity: dict[int, float] = field(default_factory=dict)
    cards: int = 0
    version: int | None = None
    keyword_length: int | None = None
    frequencies: dict[str, int] = field(default_factory=dict)


def during_sql(alias: str = "") -> str:
    """The condition "said or happened in ``[:d_since, :d_until)``" on a card."""
    p = f"{alias}." if alias else ""
    return (
        f"(({p}observed_at >= :d_since AND {p}observed_at < :d_until) "
        f"OR ({p}occurred_at >= :d_since AND {p}occurred_at < :d_until))"
    )


#: A term held by more than this share of a user's cards is left out of the keyword scan
#: where that is exact (``candidate_sql``): its weight in BM25 is below ``ln 2 * (k1 + 1)``.
COMMON_TERM_SHARE = 0.5


def candidate_sql(
    where: CardFilter,
    *,
    dense: bool,
    keywords: bool,
    during: tuple[datetime, datetime] | None,
) -> tuple[str, dict[str, object]]:
    """The statement returning one row per candidate of each ranking, and its filter params.

    Columns: ``ranking`` (``d`` dense, ``k`` keyword, ``t`` timed, ``s`` the similarity of a
    keyword-only hit, ``n`` one row with the user's card version in ``id``, card count in
    ``score`` and how many cards matched any term in ``rank``), ``id``, ``score``, ``rank``.

    Bound parameters the caller adds: ``user_id``, ``query`` (pgvector text, unit length),
    ``limit``, ``exact_max`` (the dense ranking is an exact scan, run only for users with at
    most that many cards; bigger users take the HNSW index in a second statement),
    ``held`` (the caller holds the user's current vectors in memory, ``storage.cards.vectors``:
    the ``d`` and ``s`` rows are left out, the caller computes them at the version the ``n``
    row gives), and with
    ``keywords``: ``terms``, ``k1``, ``b``, ``window``, ``current_version`` and
    ``current_cards`` (both may be None); with ``during``: nothing more.

    The keyword ranking reads the ``window`` best scored cards (superseded ones included) and
    keeps the ``limit`` best that pass the filters. When the caller knows how many current
    cards the user has at some version (``current_cards`` at ``current_version``: its held
    vectors) and the statement sees that version, a search of current cards reads only
    ``limit`` more than the user's other cards (if fewer than ``window``): at most that many
    superseded cards can score above the ``limit``-th current one, so the ranking is the same,
    and the pruned scoring below adds the common terms' scores to a quarter as many cards
    when none is superseded (the most of a search's time at 10,000 cards: BENCHMARKS.md).

    The keyword ranking does not scan the query's common terms (held by more than
    ``COMMON_TERM_SHARE`` of the user's cards, by ``card_term_counts``) when it need not: it
    scores every card by its other terms, keeps those within the common terms' largest
    possible share (their summed ``idf * (k1 + 1)``) of the ``window``-th best, and adds the
    common terms' scores to those only. That is exactly the ``window`` best cards of the full
    scoring whenever at least ``window`` cards hold another term and the ``window``-th of
    them scores above that largest share (no card holding common terms only can reach it);
    otherwise the same statement scores every card holding any term, as it did before. The
    ``n`` row's ``rank`` is then how many cards hold a term, and after a pruned scoring the
    user's card count (a bound of it: a caller widening the window goes to every card).

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
    count = "0"
    if keywords:
        count = (
            "CASE WHEN coalesce((SELECT exact FROM cut), false) "
            "THEN coalesce((SELECT cards FROM stats), 0) ELSE (SELECT count(*) FROM scored) END"
        )
    parts = ["SELECT 'n' AS ranking, (SELECT version FROM stats) AS id, "
             "coalesce((SELECT cards FROM stats), 0)::float8 AS score, "
             f"{count}::int AS rank"]  # fmt: skip
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
            *_pruned_keyword_ctes(),
            # Every card holding a term, scored by all of them: only when pruning is not exact
            # (a CTE nobody reads is never computed).
            "matches AS MATERIALIZED (SELECT term, card_id, frequency, keyword_length "
            "FROM card_terms WHERE user_id = :user_id AND term = ANY(CAST(:terms AS text[])))",
            "df_all AS (SELECT term, count(*)::float8 AS df FROM matches GROUP BY term)",
            "scored_all AS MATERIALIZED (SELECT m.card_id, sum("
            f"{_bm25('m', 'ln(1 + (s.n - df_all.df + 0.5) / (df_all.df + 0.5))')}) AS score "
            "FROM matches AS m JOIN df_all USING (term) CROSS JOIN stats AS s "
            "GROUP BY m.card_id)",
            "scored AS MATERIALIZED (SELECT card_id, score FROM pruned "
            "WHERE (SELECT exact FROM cut) UNION ALL SELECT card_id, score FROM scored_all "
            "WHERE NOT coalesce((SELECT exact FROM cut), false))",
            # Only the best ``window`` scored cards are joined to cards for the filters; the
            # caller widens the window when the filters left fewer than ``limit``.
            "top AS (SELECT * FROM scored ORDER BY score DESC, card_id "
            "LIMIT (SELECT rows FROM win))",
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
        ctes.append(_timed_cte(clause))
        parts.append("SELECT 't', id, score, rank FROM timed")
        params.update(d_since=during[0], d_until=during[1])
    sql = "WITH " + ",\n".join(ctes) + "\n" + "\nUNION ALL ".join(parts)
    return sql, params


def statistics_sql(*, during: tuple[datetime, datetime] | None) -> tuple[str, dict[str, object]]:
    """The statement of a caller that holds the user's current cards' vectors and keyword
    postings (``retrieval.vectors``): no ranking but the time window's, only what the caller
    cannot hold, read in one snapshot: the user's card version and count (the ``n`` row, as
    ``candidate_sql``'s, its ``rank`` 0), their total keyword length (an ``l`` row, in
    ``id``), and each query term's document frequency (an ``f`` row per term some card
    holds: its position in ``terms``, from 1, in ``id``; the count in ``rank``).

    With these the caller's BM25 over its current cards is the keyword ranking of
    ``candidate_sql`` without filters, and the version says whether its postings are those
    cards. Bound parameters the caller adds: ``user_id``, ``terms``, and with ``during``:
    ``query`` and ``limit``. Every read is an index lookup: the statistics row, and one
    ``card_term_counts`` row per term.
    """
    params: dict[str, object] = {}
    ctes = [
        "stats AS MATERIALIZED (SELECT cards, version, keyword_length "
        "FROM card_stats WHERE user_id = :user_id)"
    ]
    parts = [
        "SELECT 'n' AS ranking, (SELECT version FROM stats) AS id, "
        "coalesce((SELECT cards FROM stats), 0)::float8 AS score, 0 AS rank",
        "SELECT 'l', keyword_length, 0, 0 FROM stats",
        "SELECT 'f', array_position(CAST(:terms AS text[]), term), 0, cards::int "
        "FROM card_term_counts WHERE user_id = :user_id "
        "AND term = ANY(CAST(:terms AS text[])) AND cards > 0",
    ]
    if during is not None:
        clause, params = filter_sql(CardFilter())
        ctes.append(_timed_cte(clause))
        parts.append("SELECT 't', id, score, rank FROM timed")
        params.update(d_since=during[0], d_until=during[1])
    sql = "WITH " + ",\n".join(ctes) + "\n" + "\nUNION ALL ".join(parts)
    return sql, params


def _timed_cte(clause: str) -> str:
    """The ``timed`` ranking: the nearest of the cards passing ``clause`` in the window."""
    return (
        "timed AS MATERIALIZED (SELECT id, "
        "row_number() OVER (ORDER BY distance, id) AS rank, 1 - distance AS score FROM ("
        "SELECT id, (embedding <#> CAST(:query AS vector)) + 1 AS distance FROM cards "
        f"WHERE user_id = :user_id{clause} AND {during_sql()} "
        "ORDER BY 2 LIMIT :limit) AS nearest)"
    )


def _bm25(alias: str, idf: str) -> str:
    """One term's BM25 score in one card: ``alias`` a ``card_terms`` row, ``s`` the stats."""
    return (
        f"{idf} * {alias}.frequency * (:k1 + 1) / ({alias}.frequency "
        f"+ :k1 * (1 - :b + :b * {alias}.keyword_length / s.avgdl))"
    )


def _pruned_keyword_ctes() -> list[str]:
    """The pruned keyword scoring of ``candidate_sql``, ending in ``pruned`` and ``cut``."""
    return [
        # How many of the best scored cards the keyword ranking reads (see ``candidate_sql``).
        "win AS MATERIALIZED (SELECT CASE WHEN s.version = CAST(:current_version AS bigint) "
        "THEN least(:window, :limit + greatest(s.cards - CAST(:current_cards AS bigint), 0)) "
        "ELSE :window END AS rows FROM (SELECT (SELECT version FROM stats) AS version, "
        "coalesce((SELECT cards FROM stats), 0) AS cards) AS s)",
        "df AS MATERIALIZED (SELECT t.term, "
        "ln(1 + (s.n - t.cards + 0.5) / (t.cards + 0.5)) AS idf, "
        f"t.cards > {COMMON_TERM_SHARE} * s.n AS common "
        "FROM card_term_counts AS t CROSS JOIN stats AS s "
        "WHERE t.user_id = :user_id AND t.term = ANY(CAST(:terms AS text[])) AND t.cards > 0)",
        # The most the common terms can add to any card's score (a term's BM25 factor is
        # below k1 + 1).
        "bound AS MATERIALIZED (SELECT coalesce(sum(idf), 0) * (:k1 + 1) AS most, "
        "count(*) AS terms FROM df WHERE common)",
        "partial AS MATERIALIZED (SELECT m.card_id, sum("
        f"{_bm25('m', 'df.idf')}) AS score "
        "FROM card_terms AS m JOIN df ON df.term = m.term AND NOT df.common "
        "CROSS JOIN stats AS s WHERE m.user_id = :user_id "
        "AND m.term = ANY(ARRAY(SELECT term FROM df WHERE NOT common)) GROUP BY m.card_id)",
        "cut AS MATERIALIZED (SELECT coalesce(min(score), 0) AS score, "
        "(b.terms = 0 OR (count(*) >= (SELECT rows FROM win) AND min(score) > b.most)) "
        "AS exact FROM (SELECT score FROM partial ORDER BY score DESC "
        "LIMIT (SELECT rows FROM win)) AS best "
        "CROSS JOIN bound AS b GROUP BY b.terms, b.most)",
        # Only cards within the common terms' share of the window-th best can be among the
        # window best; their common terms are read by card and term (one probe each).
        "shortlist AS MATERIALIZED (SELECT p.card_id, p.score FROM partial AS p, cut, "
        "bound AS b WHERE p.score >= cut.score - b.most)",
        "held AS MATERIALIZED (SELECT term, card_id, frequency, keyword_length "
        "FROM card_terms WHERE user_id = :user_id "
        "AND term = ANY(ARRAY(SELECT term FROM df WHERE common)) "
        "AND card_id = ANY(ARRAY(SELECT card_id FROM shortlist)))",
        # Summed, not joined: the planner, expecting one row of each, looped over both.
        "pruned AS MATERIALIZED (SELECT card_id, sum(score) AS score FROM ("
        "SELECT card_id, score FROM shortlist UNION ALL "
        f"SELECT t.card_id, {_bm25('t', 'df.idf')} FROM held AS t "
        "JOIN df USING (term) CROSS JOIN stats AS s) AS parts GROUP BY card_id)",
    ]

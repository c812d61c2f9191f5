"""Each user's keyword document frequencies (``card_term_counts``, migration 15): how many of
the user's cards hold a term, kept in the transaction of every write of ``card_terms``.

The keyword search reads them to leave the terms nearly every card holds out of its scan
(``storage.cards.search``). Every writer calls ``count_terms`` after it has updated the user's
``card_stats`` row, whose row lock then orders concurrent writers of one user: the counts'
rows are taken in one order (by term) under it, so two writers never deadlock on them.
"""

from collections import Counter
from collections.abc import Iterable

from sqlalchemy import Connection, text

__all__ = ["count_terms", "forget_term_counts"]

_ADD = (
    "INSERT INTO card_term_counts (user_id, term, cards) "
    "SELECT :user_id, t.term, t.cards "
    "FROM unnest(CAST(:terms AS text[]), CAST(:cards AS bigint[])) AS t(term, cards) "
    "ORDER BY t.term "
    "ON CONFLICT (user_id, term) DO UPDATE "
    "SET cards = card_term_counts.cards + excluded.cards"
)


def count_terms(connection: Connection, user_id: str, terms: Iterable[str], sign: int = 1) -> None:
    """Add (``sign`` 1) or take away (-1) one card for every occurrence of a term in ``terms``
    (each card's distinct terms, all cards together)."""
    counted = Counter(terms)
    if not counted:
        return
    ordered = sorted(counted)
    connection.execute(
        text(_ADD),
        {"user_id": user_id, "terms": ordered, "cards": [sign * counted[t] for t in ordered]},
    )
    if sign < 0:
        # A term no card holds any longer keeps no row (erasure leaves nothing of the user's).
        connection.execute(
            text(
                "DELETE FROM card_term_counts WHERE user_id = :user_id "
                "AND term = ANY(CAST(:terms AS text[])) AND cards <= 0"
            ),
            {"user_id": user_id, "terms": ordered},
        )


def forget_term_counts(connection: Connection, user_id: str) -> None:
    """Delete every count of the user (all the user's cards are gone)."""
    connection.execute(
        text("DELETE FROM card_term_counts WHERE user_id = :user_id"), {"user_id": user_id}
    )

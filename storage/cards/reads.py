"""The reads of the card store: cards by id (with their stored keyword terms for a search), a
filtered listing, and the keyed lookups supersede decisions and recall make."""

from collections.abc import Iterable, Sequence
from typing import Literal, overload

from sqlalchemy import bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.types import Text

from storage.cards.records import Card, CardFilter, filter_sql
from storage.cards.rows import CARD_COLUMNS, card_of
from storage.driver import driver_autocommit, driver_sql
from storage.engine import Database

__all__ = ["CardReads"]

_NO_FILTER = CardFilter()

# On the driver's connection (``storage.driver``): it runs once per search. Like the other
# reads of cards on the request path (the pins, the keyed lookup), it asks for its results in
# binary: psycopg then reads the arrays (a card's ~24 terms, its tags and sources) and
# timestamps from bytes instead of parsing their text, into the same values (no card column is
# a ``real``, whose text is rounded): fetching the 54 cards of a search with their terms took
# 0.87 ms of the client's CPU in text, 0.75 in binary.
_GET_MANY = (
    f"SELECT {CARD_COLUMNS} FROM cards "
    "WHERE user_id = %(user_id)s::text AND id = ANY(%(ids)s::bigint[])"
)
# The same, with each card's stored keyword terms (a few rows of ix_card_terms_user_card).
_GET_MANY_WITH_TERMS = (
    f"SELECT {CARD_COLUMNS}, ARRAY(SELECT t.term FROM card_terms AS t "
    # The terms' user is the parameter, not ``cards.user_id``: the same rows, and Citus then
    # routes the whole statement to the user's shard (a correlated user fans out to every one).
    "WHERE t.user_id = %(user_id)s::text AND t.card_id = cards.id) FROM cards "
    "WHERE user_id = %(user_id)s::text AND id = ANY(%(ids)s::bigint[])"
)

# Recall's validity lookup, once per request with recalled turn cards (the driver's too).
_KEYED_FROM_MESSAGES = (
    f"SELECT {CARD_COLUMNS} FROM cards WHERE user_id = %(user_id)s::text "
    "AND subject IS NOT NULL AND source_message_ids && %(ids)s::bigint[] ORDER BY id"
)


class CardReads:
    """Reads a user's cards; every method is scoped by ``user_id``."""

    def __init__(self, database: Database) -> None:
        """Read the cards of ``database``."""
        self._database = database

    def get(self, user_id: str, card_id: int) -> Card | None:
        """Return one of the user's cards, or None."""
        found = self.get_many(user_id, [card_id])
        return found[0] if found else None

    @overload
    def get_many(
        self, user_id: str, card_ids: Sequence[int], *, terms: Literal[False] = False
    ) -> list[Card]: ...
    @overload
    def get_many(
        self, user_id: str, card_ids: Sequence[int], *, terms: Literal[True]
    ) -> list[tuple[Card, frozenset[str]]]: ...
    def get_many(
        self, user_id: str, card_ids: Sequence[int], *, terms: bool = False
    ) -> list[Card] | list[tuple[Card, frozenset[str]]]:
        """Return the user's cards among ``card_ids``, in the order of ``card_ids``; with
        ``terms``, each with the keyword terms it was stored with (a pair)."""
        if not card_ids:
            return []
        with driver_autocommit(self._database) as connection:
            rows = connection.execute(
                _GET_MANY_WITH_TERMS if terms else _GET_MANY,
                {"user_id": user_id, "ids": _id_array(card_ids)},
                binary=True,
            ).fetchall()  # at once: row by row costs calls in Python (54 rows: 0.13 ms)
        if terms:
            with_terms = {
                card.id: (card, frozenset(row[-1])) for row in rows for card in [card_of(row)]
            }
            return [with_terms[i] for i in card_ids if i in with_terms]
        by_id = {card.id: card for card in map(card_of, rows)}
        return [by_id[i] for i in card_ids if i in by_id]

    def list_cards(
        self, user_id: str, where: CardFilter = _NO_FILTER, *, limit: int | None = None
    ) -> list[Card]:
        """Return the user's cards that pass the filter, oldest first (by id)."""
        clause, params = filter_sql(where)
        params["user_id"] = user_id
        sql = f"SELECT {CARD_COLUMNS} FROM cards WHERE user_id = :user_id{clause} ORDER BY id"
        if limit is not None:
            sql += " LIMIT :limit"
            params["limit"] = limit
        # On the driver's connection: the pins are read so on every request.
        with driver_autocommit(self._database) as connection:
            rows = connection.execute(driver_sql(self._database, sql), params, binary=True)
            return [card_of(row) for row in rows]

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
            SELECT {CARD_COLUMNS} FROM cards AS c
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
        return [card_of(row) for row in rows]

    def keyed_from_messages(self, user_id: str, message_ids: Sequence[int]) -> list[Card]:
        """Return the user's cards with a subject and attribute made from any of ``message_ids``.

        Superseded ones included: recall marks an excerpt of those messages with the validity of
        the fact they stated. Served by the index on the keyed cards' source messages.

        Returns:
            The cards, oldest first (by id).
        """
        if not message_ids:
            return []
        with driver_autocommit(self._database) as connection:
            rows = connection.execute(
                _KEYED_FROM_MESSAGES,
                {"user_id": user_id, "ids": _id_array(message_ids)},
                binary=True,
            ).fetchall()
        return [card_of(row) for row in rows]


def _id_array(ids: Sequence[int]) -> str:
    """``ids`` as a ``bigint[]`` literal (``{1,2,3}``), for a parameter cast to ``bigint[]``.

    Given a list, psycopg's dumper checks each element with a regular expression in Python (54
    ids: 0.15 ms of a search's CPU); the server reads the literal instead.
    """
    return "{" + ",".join(str(int(i)) for i in ids) + "}"

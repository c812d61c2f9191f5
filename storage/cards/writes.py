"""The writes of the card store: adding cards (merging identical ones), superseding, reviving,
merging sources, pinning and deleting. Each runs in one transaction, and every write that
changes a user's current cards takes a new card version there (``storage.cards.vectors``)."""

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Row, bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.exc import IntegrityError
from sqlalchemy.types import BigInteger, Text

from storage.cards.records import Card, NewCard, check_card, content_hash
from storage.cards.rows import (
    CARD_COLUMNS,
    card_of,
    qualified,
    unit_vector,
    vector_literal,
)
from storage.cards.term_counts import count_terms
from storage.engine import Database
from storage.erasure import delete_cards, lock_sources
from storage.errors import StorageError

__all__ = ["CardWrites"]


class CardWrites:
    """Writes a user's cards; every method is scoped by ``user_id``."""

    def __init__(self, database: Database) -> None:
        """Write the cards of ``database``."""
        self._database = database

    def add(self, user_id: str, cards: Sequence[NewCard]) -> list[Card]:
        """Store cards; a card whose content the user already has merges its sources instead.

        Identity is the normalized content hash, enforced by a unique constraint, so two
        processes adding the same card at once store one row. A turn card that names the
        message it archives (``turn_message_id``) is also one per message, enforced by a
        unique index: when that message has its card already (archived again after a crash,
        with other neighbours by then), the stored card is returned unchanged. Cards made from
        messages (``source_message_ids``) are stored only while every one of those is stored.

        Args:
            user_id: The owner.
            cards: The cards; duplicates inside the batch are merged too.

        Returns:
            The stored cards, in the order given (a merged duplicate appears once per mention).

        Raises:
            InvalidInputError: A card is over a size bound (``MAX_CARD_TEXT_CHARS`` and the
                others in ``storage.cards.records``); nothing is stored.
            SessionErasedError: A source message was erased since it was read; nothing stored.
        """
        if not cards:
            return []
        for position, card in enumerate(cards):
            check_card(position, card)
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
        distinct_terms: list[str] = []
        with self._database.transaction() as connection:
            # Cards made from messages are stored only while those are (``storage.erasure``).
            lock_sources(connection, user_id, [i for c in cards for i in c.source_message_ids])
            # One lock order for every writer (by hash), so two batches cannot deadlock.
            for key in sorted(merged):
                row, inserted = _upsert(connection, user_id, key, merged[key])
                stored[key] = card_of(row)
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
                    distinct_terms += terms
            if added_cards:
                _bump_stats(connection, user_id, added_cards, added_terms)
                count_terms(connection, user_id, distinct_terms)
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
        with self._database.transaction() as transaction:
            row = transaction.execute(
                text(
                    f"UPDATE cards AS old SET superseded_by = new.id, "
                    f"valid_to = greatest(new.valid_from, old.valid_from) "
                    f"FROM cards AS new "
                    f"WHERE old.user_id = :user_id AND old.id = :old_id "
                    f"AND new.user_id = :user_id AND new.id = :new_id "
                    f"RETURNING {qualified('old')}"
                ),
                {"user_id": user_id, "old_id": old_id, "new_id": new_id},
            ).one_or_none()
            if row is not None:
                _new_version(transaction, user_id)
        if row is None:
            raise LookupError(f"user {user_id!r} has no card {old_id} or no card {new_id}")
        return card_of(row)

    def revive(self, user_id: str, card_id: int, valid_from: datetime | None = None) -> Card:
        """Make a superseded card valid again: the fact it states came back.

        Its validity restarts at ``valid_from`` (the database clock when None), so the card
        that superseded it in between can be closed at that time in turn.

        Raises:
            LookupError: The card is not one of the user's.
        """
        with self._database.transaction() as transaction:
            row = transaction.execute(
                text(
                    "UPDATE cards SET valid_to = NULL, superseded_by = NULL, "
                    # A subquery: Citus refuses now() inside coalesce in an UPDATE.
                    "valid_from = greatest(valid_from, "
                    "(SELECT coalesce(CAST(:valid_from AS timestamptz), now()))) "
                    f"WHERE user_id = :user_id AND id = :id RETURNING {CARD_COLUMNS}"
                ),
                {"valid_from": valid_from, "user_id": user_id, "id": card_id},
            ).one_or_none()
            if row is not None:
                _new_version(transaction, user_id)
        if row is None:
            raise LookupError(f"user {user_id!r} has no card {card_id}")
        return card_of(row)

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
            SessionErasedError: A source message was erased since it was read.
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
            RETURNING {CARD_COLUMNS}
            """
        ).bindparams(
            bindparam("message_ids", type_=ARRAY(BigInteger)),
            bindparam("client_ids", type_=ARRAY(Text)),
        )
        with self._database.transaction() as transaction:
            lock_sources(transaction, user_id, message_ids)
            row = transaction.execute(
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
        return card_of(row)

    def set_pinned(self, user_id: str, card_id: int, pinned: bool) -> Card:
        """Pin or unpin a card.

        Raises:
            LookupError: The card is not one of the user's.
        """
        with self._database.transaction() as transaction:
            row = transaction.execute(
                text(
                    f"UPDATE cards SET pinned = :pinned WHERE user_id = :user_id AND id = :id "
                    f"RETURNING {CARD_COLUMNS}"
                ),
                {"pinned": pinned, "user_id": user_id, "id": card_id},
            ).one_or_none()
        if row is None:
            raise LookupError(f"user {user_id!r} has no card {card_id}")
        return card_of(row)

    def delete(
        self, user_id: str, *, card_id: int | None = None, session_id: str | None = None
    ) -> int:
        """Delete cards for real: one card, a session's cards, or (neither given) all the user's.

        Only cards: ``storage.erase`` deletes a session or a user with everything else.

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
        with self._database.transaction() as transaction:
            whole_user = card_id is None and session_id is None
            deleted, _ = delete_cards(transaction, user_id, where, params, whole_user=whole_user)
        return deleted


# INSERT ... SELECT, not VALUES: Citus refuses the subqueries of the update arm in an
# INSERT ... VALUES (a distributed deployment, storage.citus); the same row either way. The
# casts give a NULL parameter its column's type, which VALUES took from the column.
_UPSERT = f"""
INSERT INTO cards (
    user_id, type, text, topic, tags, session_id, source_message_ids,
    source_client_ids, observed_at, occurred_at, valid_from, pinned, content_hash,
    embedding, keyword_length, subject, attribute, turn_message_id
) SELECT
    :user_id, :type, :text, :topic, :tags, :session_id, :message_ids, :client_ids,
    coalesce(:observed_at, now()), CAST(:occurred_at AS timestamptz),
    coalesce(:observed_at, now()), CAST(:pinned AS boolean), :hash, CAST(:embedding AS vector),
    CAST(:keyword_length AS integer), CAST(:subject AS text), CAST(:attribute AS text),
    CAST(:turn AS bigint)
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
RETURNING {CARD_COLUMNS}, (xmax = 0) AS inserted"""

# A turn card of a message has two unique keys (its message's, its content's) and ON CONFLICT
# DO UPDATE takes one: insert unless either exists; then its message's card, if that was it.
_INSERT_TURN = _UPSERT[: _UPSERT.index("ON CONFLICT")] + (
    f"ON CONFLICT DO NOTHING RETURNING {CARD_COLUMNS}, true AS inserted"
)
_TURN_OF_MESSAGE = (
    f"SELECT {CARD_COLUMNS}, false AS inserted FROM cards "
    "WHERE user_id = :user_id AND turn_message_id = :turn"
)


def _upsert(connection: Connection, user_id: str, key: str, card: NewCard) -> tuple[Row[Any], bool]:
    """Insert one card or merge its sources into the existing one; say whether it was new.

    A turn card whose message has its card already returns that card unchanged; one whose
    text another card has (the same words said twice) merges its sources into it.
    """
    values = {
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
        "embedding": vector_literal(unit_vector(card.embedding)),
        "keyword_length": sum(card.terms.values()),
        "subject": card.subject,
        "attribute": card.attribute,
        "turn": card.turn_message_id,
    }
    arrays = (
        bindparam("tags", type_=ARRAY(Text)),
        bindparam("message_ids", type_=ARRAY(BigInteger)),
        bindparam("client_ids", type_=ARRAY(Text)),
    )
    try:
        row = None
        if card.turn_message_id is not None:
            row = connection.execute(text(_INSERT_TURN).bindparams(*arrays), values).one_or_none()
            if row is None:
                row = connection.execute(text(_TURN_OF_MESSAGE), values).one_or_none()
        if row is None:  # not a turn, or its content's twin is another message's card
            row = connection.execute(text(_UPSERT).bindparams(*arrays), values).one()
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
            # The proposed row's own new version (its column default): no function call in
            # the update arm, which Citus requires (storage.citus).
            "version = excluded.version"
        ),
        {"u": user_id, "c": cards, "t": terms},
    )


def _new_version(connection: Connection, user_id: str) -> None:
    """Mark the user's current cards as changed (``storage.cards.vectors``): call it in the
    transaction of every write that adds, removes, closes or reopens one of them."""
    connection.execute(
        text(
            # A subquery: Citus takes the value first, then updates the one shard (no volatile
            # function in a distributed UPDATE).
            "UPDATE card_stats SET version = (SELECT nextval('card_stats_version_seq')) "
            "WHERE user_id = :user_id"
        ),
        {"user_id": user_id},
    )


def _union(first: Sequence[Any], second: Sequence[Any]) -> list[Any]:
    """Merge two source lists, keeping the first occurrence of each."""
    return list(dict.fromkeys([*first, *second]))

"""The reads of cards ask for binary results and send ids as a literal (``storage.cards.reads``):
the cards are the ones the text format gives, value for value, every column set."""

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from card_samples import MODEL, new_card
from sqlalchemy import text
from storage_samples import user

from storage import Card, CardFilter, CardStore, Database, MessageStore
from storage.cards.reads import _id_array
from storage.cards.rows import CARD_COLUMNS, card_of


def test_every_read_of_cards_gives_the_cards_the_text_format_gives(
    database: Database, user_id: str
) -> None:
    store = CardStore(database, model=MODEL, dimension=384)
    said = MessageStore(database).append(user_id, "s", [user("I live in Lyon"), user("Berlin")])
    ids = [message.id for message in said]
    east = timezone(timedelta(hours=9))
    fields: dict[str, Any] = {
        "type": "profile",
        "topic": "home",
        "tags": ["place", "ça"],
        "session_id": "s",
        "source_message_ids": ids,
        "observed_at": datetime(2025, 3, 3, 12, 0, 0, 123456, tzinfo=east),
        "occurred_at": datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        "subject": "user",
        "attribute": "city",
    }
    old, new = store.add(
        user_id,
        [
            new_card("User lives in Lyon", client_id="c-1", pinned=True, **fields),
            new_card("User lives in Berlin", **fields),
        ],
    )
    store.supersede(user_id, old.id, new.id)
    with database.reading() as connection:
        rows = connection.execute(
            text(f"SELECT {CARD_COLUMNS} FROM cards WHERE user_id = :u ORDER BY id"), {"u": user_id}
        ).all()
    as_text = [card_of(row) for row in rows]  # SQLAlchemy's connection reads text
    assert as_text[0].valid_to is not None and as_text[0].superseded_by == new.id

    def same(cards: list[Card]) -> None:
        assert cards == as_text
        # Value for value, types and time zones too (equal datetimes may differ in zone).
        assert [repr(card) for card in cards] == [repr(card) for card in as_text]

    same(store.get_many(user_id, [old.id, new.id]))
    same([card for card, _ in store.get_many(user_id, [old.id, new.id], terms=True)])
    same(store.list_cards(user_id, CardFilter(include_superseded=True)))
    same(store.keyed_from_messages(user_id, ids))
    assert store.list_cards(user_id, CardFilter(pinned=True, include_superseded=True)) == [
        as_text[0]
    ]
    assert {frozenset(terms) for _, terms in store.get_many(user_id, [new.id], terms=True)} == {
        frozenset({"user", "lives", "in", "berlin"})
    }


def test_ids_are_sent_as_a_bigint_literal_of_integers_only() -> None:
    assert _id_array([3, 2**40, 1]) == "{3,1099511627776,1}"
    with pytest.raises(ValueError):
        _id_array(["1},{2"])  # type: ignore[list-item]  # never text into the literal

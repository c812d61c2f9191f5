"""``CardStore.keyed_from_messages``: which keyed cards were made from given messages."""

from __future__ import annotations

from typing import Any

import pytest
from card_samples import MODEL, new_card
from sqlalchemy import event, text
from storage_samples import user

from storage import CardStore, Database, MessageStore


@pytest.fixture
def store(database: Database) -> CardStore:
    return CardStore(database, model=MODEL, dimension=384)


def test_keyed_cards_of_the_messages_superseded_or_not_and_nothing_else(
    store: CardStore, database: Database, user_id: str
) -> None:
    lyon, berlin, kettle = MessageStore(database).append(
        user_id, "s", [user("I live in Lyon"), user("I moved to Berlin"), user("kettle?")]
    )
    city = {"type": "profile", "subject": "user", "attribute": "city"}
    old, new, turn, unkeyed = store.add(
        user_id,
        [
            new_card("User lives in Lyon", source_message_ids=[lyon.id], **city),
            new_card("User lives in Berlin", source_message_ids=[berlin.id], **city),
            new_card("User: I live in Lyon", type="turn", source_message_ids=[lyon.id, berlin.id]),
            new_card("The kettle needs descaling", source_message_ids=[kettle.id]),
        ],
    )
    store.supersede(user_id, old.id, new.id)

    def texts(message_ids: list[int], owner: str = user_id) -> list[str]:
        return [card.text for card in store.keyed_from_messages(owner, message_ids)]

    assert texts([lyon.id]) == ["User lives in Lyon"]  # superseded, still found
    assert texts([lyon.id, berlin.id, kettle.id]) == ["User lives in Lyon", "User lives in Berlin"]
    assert texts([kettle.id]) == []  # a card without a subject and attribute is not keyed
    assert texts([]) == []
    assert texts([lyon.id], owner="someone-else") == []
    assert {turn.id, unkeyed.id}.isdisjoint(
        c.id for c in store.keyed_from_messages(user_id, [lyon.id])
    )


def test_the_lookup_runs_on_the_drivers_connection_without_sqlalchemys_execution(
    store: CardStore, database: Database, user_id: str
) -> None:
    # It is on recall's path once a request: SQLAlchemy's execution adds client CPU only.
    (said,) = MessageStore(database).append(user_id, "s", [user("I live in Lyon")])
    (card,) = store.add(
        user_id,
        [
            new_card(
                "User lives in Lyon",
                type="profile",
                subject="user",
                attribute="city",
                source_message_ids=[said.id],
            )
        ],
    )
    executed: list[str] = []

    def seen(*args: Any) -> None:
        executed.append(args[2])

    event.listen(database.engine, "before_cursor_execute", seen)
    try:
        found = store.keyed_from_messages(user_id, [said.id])
    finally:
        event.remove(database.engine, "before_cursor_execute", seen)
    assert found == [card]
    assert executed == []


def test_the_keyed_sources_index_exists(database: Database) -> None:
    with database.reading() as connection:
        definition = connection.execute(
            text("SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_cards_keyed_sources'")
        ).scalar_one()
    assert "gin (source_message_ids)" in definition
    assert "subject IS NOT NULL" in definition

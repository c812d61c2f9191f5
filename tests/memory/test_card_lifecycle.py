"""The life cycle of cards: supersede chains, pins, facts that come back, on the real Postgres.

``CardWriter`` is tested on a card index with the hashing fake embedder (named as MiniLM, the
model the shared test database records); the end-to-end tests go through ``Memory`` offline,
where the rule extractor gives cards their subject and attribute.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from databases import user_rows
from sqlalchemy import text

from memory import Memory, Settings
from memory.longterm.card_lifecycle import CardWriter
from retrieval import MINILM_NAME, CardDraft, CardIndex, HashingEmbedder
from storage import Card, CardFilter, CardStore, Database

T0 = datetime(2024, 1, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def lifecycle_database(database_url: str) -> Iterator[Database]:
    with Database.open(database_url) as opened:
        yield opened


@pytest.fixture
def index(lifecycle_database: Database) -> CardIndex:
    store = CardStore(lifecycle_database, model=MINILM_NAME, dimension=384)
    return CardIndex(store, HashingEmbedder(name=MINILM_NAME))


@pytest.fixture
def writer(index: CardIndex) -> CardWriter:
    return CardWriter(index)


def city(text: str, day: int, **fields: Any) -> CardDraft:
    values = {
        "type": "profile",
        "text": text,
        "subject": "user",
        "attribute": "city",
        "observed_at": T0 + timedelta(days=day),
        "source_client_ids": [f"m{day}"],
        **fields,
    }
    return CardDraft.model_validate(values)


def everything(index: CardIndex, user_id: str) -> dict[str, Card]:
    cards = index.store.list_cards(user_id, CardFilter(include_superseded=True))
    return {card.text: card for card in cards}


def test_a_chain_closes_each_older_card_and_keeps_the_links(
    writer: CardWriter, index: CardIndex, user_id: str
) -> None:
    [a] = writer.write(user_id, [city("User lives in Berlin", 1)])
    [b] = writer.write(user_id, [city("User lives in Lisbon", 2)])
    [c] = writer.write(user_id, [city("User lives in Porto", 3)])

    cards = everything(index, user_id)
    assert cards["User lives in Berlin"].superseded_by == b.id
    assert cards["User lives in Berlin"].valid_to == b.valid_from
    assert cards["User lives in Lisbon"].superseded_by == c.id
    assert cards["User lives in Porto"].valid_to is None
    assert cards["User lives in Porto"].superseded_by is None
    assert [card.id for card in index.store.list_cards(user_id)] == [c.id]
    assert a.id not in {card.id for card in index.store.current_keyed(user_id, [("user", "city")])}


def test_one_batch_is_applied_in_the_order_it_was_said(
    writer: CardWriter, index: CardIndex, user_id: str
) -> None:
    # Given out of order: the later statement wins whatever the position in the batch.
    writer.write(user_id, [city("User lives in Lisbon", 5), city("User moved to Berlin", 2)])

    cards = everything(index, user_id)
    assert cards["User moved to Berlin"].superseded_by == cards["User lives in Lisbon"].id
    assert cards["User lives in Lisbon"].valid_to is None


def test_an_older_statement_archived_late_does_not_replace_a_newer_one(
    writer: CardWriter, index: CardIndex, user_id: str
) -> None:
    [new] = writer.write(user_id, [city("User lives in Lisbon", 5)])
    [old] = writer.write(user_id, [city("User lives in Berlin", 1)])

    cards = everything(index, user_id)
    assert cards["User lives in Berlin"].superseded_by == new.id
    assert cards["User lives in Lisbon"].valid_to is None
    assert old.id != new.id


def test_a_pinned_card_is_never_superseded_and_the_conflict_is_logged(
    writer: CardWriter, index: CardIndex, user_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    [berlin] = writer.write(user_id, [city("User lives in Berlin", 1)])
    index.store.set_pinned(user_id, berlin.id, True)

    with caplog.at_level(logging.WARNING, logger="memory.longterm.card_lifecycle"):
        [lisbon] = writer.write(user_id, [city("User lives in Lisbon", 2)])

    cards = everything(index, user_id)
    assert cards["User lives in Berlin"].valid_to is None and cards["User lives in Berlin"].pinned
    assert cards["User lives in Lisbon"].valid_to is None
    assert f"contradicts pinned card {berlin.id}" in caplog.text
    assert lisbon.id != berlin.id


def test_a_fact_that_comes_back_is_valid_again_and_closes_the_one_between(
    writer: CardWriter, index: CardIndex, user_id: str
) -> None:
    [berlin] = writer.write(user_id, [city("User lives in Berlin", 1)])
    [lisbon] = writer.write(user_id, [city("User lives in Lisbon", 2)])
    [again] = writer.write(user_id, [city("User lives in Berlin", 3)])

    assert again.id == berlin.id  # one card, not a second Berlin
    cards = everything(index, user_id)
    assert cards["User lives in Berlin"].valid_to is None
    assert cards["User lives in Berlin"].superseded_by is None
    assert cards["User lives in Berlin"].source_client_ids == ["m1", "m3"]
    assert cards["User lives in Lisbon"].superseded_by == berlin.id
    assert cards["User lives in Lisbon"].valid_to == T0 + timedelta(days=3)
    assert [card.id for card in index.store.list_cards(user_id)] == [berlin.id]
    assert lisbon.id != berlin.id


def test_a_done_task_closes_the_open_task_it_names(
    writer: CardWriter, index: CardIndex, user_id: str
) -> None:
    def task(text_: str, key: str, day: int) -> CardDraft:
        return CardDraft(
            type="task",
            text=text_,
            subject="user",
            attribute=key,
            observed_at=T0 + timedelta(days=day),
        )

    writer.write(user_id, [task("To do: send the invoice to Bob", "task:send invoic bob", 1)])
    writer.write(user_id, [task("To do: water the plants", "task:water plant", 1)])
    writer.write(user_id, [task("Done: send the invoice", "task:send invoic", 2)])

    valid = {card.text for card in index.store.list_cards(user_id)}
    assert valid == {"To do: water the plants", "Done: send the invoice"}


def test_cards_without_a_key_and_turns_never_supersede(
    writer: CardWriter, index: CardIndex, user_id: str
) -> None:
    writer.write(user_id, [city("User lives in Berlin", 1)])
    writer.write(
        user_id,
        [
            CardDraft(type="fact", text="User lives in Lisbon", observed_at=T0 + timedelta(2)),
            CardDraft(type="turn", text="User: I live in Lisbon", observed_at=T0 + timedelta(2)),
        ],
    )
    assert len(index.store.list_cards(user_id)) == 3


# --- end to end through Memory, offline (the rules give subject and attribute) ---------------


@pytest.fixture
def make_memory(lifecycle_database: Database) -> Callable[..., Memory]:
    def make(**settings: Any) -> Memory:
        values = {"summary": {"mode": "inline", "debounce_seconds": 0}, **settings}
        return Memory(
            lifecycle_database, Settings(**values), embedder=HashingEmbedder(name=MINILM_NAME)
        )

    return make


def session(mem: Memory, user_id: str, session_id: str, said: str, day: int) -> None:
    when = (T0 + timedelta(days=day)).isoformat()
    mem.record(
        user_id=user_id,
        session_id=session_id,
        messages=[
            {"role": "user", "content": said, "id": f"{session_id}-u", "timestamp": when},
            {"role": "assistant", "content": "Noted.", "id": f"{session_id}-a", "timestamp": when},
        ],
    )
    mem.end_session(user_id=user_id, session_id=session_id)


def test_a_new_city_supersedes_the_old_one_through_memory_search(
    make_memory: Callable[..., Memory], user_id: str
) -> None:
    mem = make_memory()
    session(mem, user_id, "s1", "I moved to Berlin.", 1)
    session(mem, user_id, "s2", "I live in Lisbon now.", 2)
    session(mem, user_id, "s3", "I live in Porto.", 3)

    kinds: list[Any] = ["profile"]
    current = mem.search(user_id=user_id, query="where does the user live", k=10, types=kinds)
    assert [hit.card.text for hit in current] == ["User lives in Porto"]
    every = mem.search(
        user_id=user_id,
        query="where does the user live",
        k=10,
        types=kinds,
        include_superseded=True,
    )
    by_text = {hit.card.text: hit.card for hit in every}
    berlin = "User lives in Berlin, having moved there"
    assert set(by_text) == {berlin, "User lives in Lisbon", "User lives in Porto"}
    assert by_text[berlin].superseded_by == by_text["User lives in Lisbon"].id
    assert by_text["User lives in Lisbon"].superseded_by == by_text["User lives in Porto"].id
    assert by_text[berlin].source_client_ids == ["s1-u"]
    assert by_text["User lives in Porto"].subject == "user"
    assert by_text["User lives in Porto"].attribute == "city"
    # The turns stay: what was said is never superseded.
    turns = mem.search(user_id=user_id, query="Berlin", k=10, types=["turn"])
    assert any("I moved to Berlin." in hit.card.text for hit in turns)


def test_a_finished_task_closes_the_reminder_through_memory(
    make_memory: Callable[..., Memory], user_id: str
) -> None:
    mem = make_memory()
    session(mem, user_id, "s1", "Remind me to send the invoice to Bob.", 1)
    session(mem, user_id, "s2", "I finished sending the invoice.", 2)

    tasks = mem.search(user_id=user_id, query="invoice", k=10, types=["task"])
    assert [hit.card.text for hit in tasks] == ["Done: sending the invoice"]
    every = mem.search(
        user_id=user_id, query="invoice", k=10, types=["task"], include_superseded=True
    )
    assert {hit.card.text for hit in every} == {
        "To do: send the invoice to Bob",
        "Done: sending the invoice",
    }


def test_forget_leaves_nothing_of_superseded_cards(
    make_memory: Callable[..., Memory], user_id: str, lifecycle_database: Database
) -> None:
    mem = make_memory()
    session(mem, user_id, "s1", "I live in Berlin.", 1)
    session(mem, user_id, "s2", "I live in Lisbon.", 2)
    with lifecycle_database.reading() as connection:
        closed = connection.execute(
            text("SELECT count(*) FROM cards WHERE user_id = :u AND superseded_by IS NOT NULL"),
            {"u": user_id},
        ).scalar_one()
    assert closed == 1

    mem.forget(user_id=user_id)

    tables = ("cards", "card_terms", "card_stats", "archive_marks", "messages")
    assert user_rows(lifecycle_database, user_id, tables) == dict.fromkeys(tables, 0)
    assert mem.search(user_id=user_id, query="Berlin", include_superseded=True) == []

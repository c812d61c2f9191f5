"""Tests of ``CardStore`` on the real embedded Postgres: identity, filters, search, lifecycle."""

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from card_samples import MODEL, new_card, unit_vector
from child_process import Spawn
from sqlalchemy import create_engine, text
from storage_samples import user

from storage import (
    EMBEDDING_DIM,
    MAX_CARD_TAGS,
    MAX_CARD_TEXT_CHARS,
    CardFilter,
    CardStore,
    Database,
    EmbeddingModelMismatchError,
    InvalidInputError,
    MessageStore,
    StorageError,
)
from storage.cards.store import CardMatch

CHILD = Path(__file__).with_name("cards_child.py")
DAY = datetime(2025, 5, 8, tzinfo=UTC)
EVERY_CURRENT_CARD = CardFilter()


@pytest.fixture
def store(database: Database) -> CardStore:
    return CardStore(database, model=MODEL, dimension=EMBEDDING_DIM)


def keyword_ranking(
    store: CardStore,
    user_id: str,
    terms: list[str],
    *,
    limit: int,
    where: CardFilter = EVERY_CURRENT_CARD,
) -> list[CardMatch]:
    """The keyword ranking of a hybrid search's candidates."""
    return store.candidates(user_id, unit_vector("q"), terms, limit=limit, where=where).keyword


@pytest.fixture
def scratch_url(database: Database) -> Iterator[str]:
    """The URL of a new, empty database on the embedded server, dropped afterwards."""
    name = f"scratch_{uuid.uuid4().hex}"
    admin = create_engine(database.url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f"CREATE DATABASE {name}"))
    yield database.engine.url.set(database=name).render_as_string(hide_password=False)
    with admin.connect() as connection:
        connection.execute(text(f"DROP DATABASE {name}"))
    admin.dispose()


def test_add_returns_records_and_merges_the_sources_of_the_same_content(
    store: CardStore, user_id: str
) -> None:
    [first] = store.add(user_id, [new_card("We use Postgres.", client_id="m1", topic="db")])
    [again] = store.add(user_id, [new_card("  we USE postgres. ", client_id="m2")])

    assert again.id == first.id
    assert again.source_client_ids == ["m1", "m2"]
    assert again.topic == "db"
    assert store.count(user_id) == 1
    assert store.get(user_id, first.id) == again


def test_duplicates_inside_one_batch_are_one_card(store: CardStore, user_id: str) -> None:
    cards = store.add(
        user_id,
        [new_card("I like tea.", client_id="a"), new_card("I like tea.", client_id="b")],
    )

    assert cards[0] == cards[1]
    assert cards[0].source_client_ids == ["a", "b"]
    assert store.count(user_id) == 1


@pytest.mark.slow
def test_two_processes_adding_the_same_card_store_one_row(
    spawn: Spawn, database_url: str, store: CardStore, user_id: str
) -> None:
    children = [spawn(CHILD, database_url, user_id, source) for source in ("p1", "p2")]
    for child in children:
        assert child.read() == "ready"
    for child in children:
        child.tell("go")
    answers = {child.read() for child in children}
    for child in children:
        assert child.finish() == 0

    [card] = store.list_cards(user_id)
    assert answers == {f"added {card.id}"}
    assert sorted(card.source_client_ids) == ["p1", "p2"]
    assert (card.subject, card.attribute) == ("team", "database")
    assert store.count(user_id) == 1


def test_the_same_content_for_two_users_is_two_cards(store: CardStore) -> None:
    [mine] = store.add("alice-" + uuid.uuid4().hex, [new_card("I like tea.")])
    [theirs] = store.add("bob-" + uuid.uuid4().hex, [new_card("I like tea.")])

    assert mine.id != theirs.id


def test_filters_are_applied(store: CardStore, user_id: str) -> None:
    store.add(
        user_id,
        [
            new_card("old trip", type="event", session_id="s1", occurred_at=DAY),
            new_card("new trip", type="event", session_id="s2", observed_at=DAY + timedelta(9)),
            new_card("likes tea", type="preference", topic="drinks", tags=["food", "daily"]),
        ],
    )

    def texts(where: CardFilter) -> list[str]:
        return [card.text for card in store.list_cards(user_id, where)]

    assert texts(CardFilter(types=("event",))) == ["old trip", "new trip"]
    assert texts(CardFilter(session_id="s2")) == ["new trip"]
    assert texts(CardFilter(topic="drinks")) == ["likes tea"]
    assert texts(CardFilter(tags=("daily",))) == ["likes tea"]
    assert texts(CardFilter(tags=("daily", "other"))) == []
    assert texts(CardFilter(since=DAY + timedelta(1), until=DAY + timedelta(10))) == ["new trip"]
    assert texts(CardFilter(until=DAY + timedelta(1))) == ["old trip"]


def test_supersede_keeps_the_old_card_out_of_search_by_default(
    store: CardStore, user_id: str
) -> None:
    old, new = store.add(user_id, [new_card("lives in paris"), new_card("lives in berlin")])

    closed = store.supersede(user_id, old.id, new.id)

    assert closed.superseded_by == new.id and closed.valid_to is not None
    assert [c.id for c in store.list_cards(user_id)] == [new.id]
    assert [m.card_id for m in keyword_ranking(store, user_id, ["lives"], limit=5)] == [new.id]
    everything = CardFilter(include_superseded=True)
    assert {
        m.card_id for m in keyword_ranking(store, user_id, ["lives"], limit=5, where=everything)
    } == {
        old.id,
        new.id,
    }
    assert [
        m.card_id for m in store.search_vector(user_id, unit_vector("lives in paris"), limit=5)
    ] == [new.id]


def test_supersede_checks_both_cards_belong_to_the_user(store: CardStore, user_id: str) -> None:
    [mine] = store.add(user_id, [new_card("mine")])
    [other] = store.add("other-" + uuid.uuid4().hex, [new_card("theirs")])

    with pytest.raises(LookupError):
        store.supersede(user_id, mine.id, other.id)
    with pytest.raises(ValueError, match="itself"):
        store.supersede(user_id, mine.id, mine.id)


def test_pin_and_unpin(store: CardStore, user_id: str) -> None:
    [card] = store.add(user_id, [new_card("my name is Ada")])

    assert store.set_pinned(user_id, card.id, True).pinned
    assert [c.id for c in store.list_cards(user_id, CardFilter(pinned=True))] == [card.id]
    assert not store.set_pinned(user_id, card.id, False).pinned
    with pytest.raises(LookupError):
        store.set_pinned("someone-else", card.id, True)


def test_delete_by_card_session_and_user(store: CardStore, user_id: str) -> None:
    a, _, c = store.add(
        user_id,
        [
            new_card("alpha one", session_id="s1"),
            new_card("beta two", session_id="s1"),
            new_card("gamma three", session_id="s2"),
        ],
    )
    store.supersede(user_id, a.id, c.id)

    assert store.delete(user_id, card_id=c.id) == 1
    assert store.get(user_id, a.id) is not None
    assert store.get(user_id, a.id).superseded_by is None  # type: ignore[union-attr]
    assert store.delete(user_id, session_id="s1") == 2
    assert store.count(user_id) == 0
    assert keyword_ranking(store, user_id, ["beta"], limit=5) == []
    store.add(user_id, [new_card("delta four")])
    assert store.delete(user_id) == 1
    assert store.list_cards(user_id, CardFilter(include_superseded=True)) == []


def test_keyword_search_ranks_by_bm25_within_the_user(store: CardStore, user_id: str) -> None:
    rare, common = store.add(
        user_id,
        [new_card("postgres postgres is the database"), new_card("the database is fast")],
    )
    store.add("other-" + uuid.uuid4().hex, [new_card("postgres postgres postgres")])

    matches = keyword_ranking(store, user_id, ["postgres", "database"], limit=10)

    assert [m.card_id for m in matches] == [rare.id, common.id]
    assert matches[0].score > matches[1].score > 0


def test_keyword_search_fills_k_when_filters_drop_the_best_matches(
    store: CardStore, user_id: str
) -> None:
    # The first window of scored cards (4 x limit) holds only superseded ones.
    closed = store.add(user_id, [new_card(f"tea tea tea {i}") for i in range(9)])
    [kept] = store.add(user_id, [new_card("tea and a long tail of other words here")])
    for card in closed:
        store.supersede(user_id, card.id, kept.id)

    matches = keyword_ranking(store, user_id, ["tea"], limit=2)

    assert [m.card_id for m in matches] == [kept.id]
    assert (
        keyword_ranking(store, user_id, ["tea"], limit=2, where=CardFilter(types=("task",))) == []
    )


@pytest.mark.slow
def test_vector_search_through_the_index_never_returns_fewer_than_k(
    store: CardStore, user_id: str
) -> None:
    # Many other users crowd the HNSW graph: the index alone would return few of this user's.
    for crowd in range(4):
        store.add(
            f"crowd-{crowd}-{uuid.uuid4().hex}",
            [new_card(f"crowd {crowd} {i}") for i in range(300)],
        )
    mine = store.add(user_id, [new_card(f"mine {i}") for i in range(30)])
    query = unit_vector("a query")

    exact = store.search_vector(user_id, query, limit=25, method="exact")
    indexed = store.search_vector(user_id, query, limit=25, method="index")

    assert len(exact) == len(indexed) == 25
    assert {m.card_id for m in indexed} <= {c.id for c in mine}
    assert [m.card_id for m in exact] == [m.card_id for m in indexed]
    assert exact[0].score >= exact[-1].score


def test_a_different_embedding_model_is_a_clear_error(scratch_url: str) -> None:
    with Database.open(scratch_url) as database:
        CardStore(database, model="model-a", dimension=EMBEDDING_DIM)
        with pytest.raises(EmbeddingModelMismatchError, match="model-a"):
            CardStore(database, model="model-b", dimension=EMBEDDING_DIM)
        with pytest.raises(EmbeddingModelMismatchError, match="1536"):
            CardStore(database, model="model-a", dimension=1536)


def test_subject_and_attribute_are_stored_and_kept_on_a_merge(
    store: CardStore, user_id: str
) -> None:
    [plain] = store.add(user_id, [new_card("User lives in Porto.")])
    assert (plain.subject, plain.attribute) == (None, None)
    # The same content said again with its key: the key is learnt, nothing else changes.
    [keyed] = store.add(
        user_id, [new_card("User lives in Porto.", subject="user", attribute="city")]
    )
    assert keyed.id == plain.id and (keyed.subject, keyed.attribute) == ("user", "city")
    [again] = store.add(user_id, [new_card("User lives in Porto.", subject="x", attribute="y")])
    assert (again.subject, again.attribute) == ("user", "city")


def test_current_keyed_returns_valid_cards_by_pair_or_attribute_prefix(
    store: CardStore, user_id: str
) -> None:
    berlin, lisbon, task, other, team = store.add(
        user_id,
        [
            new_card("User lives in Berlin", subject="user", attribute="city"),
            new_card("User lives in Lisbon", subject="user", attribute="city"),
            new_card("To do: call Bob", type="task", subject="user", attribute="task:call bob"),
            new_card("User is 30", subject="user", attribute="age"),
            new_card("Team lives in Lisbon", subject="team", attribute="city"),
        ],
    )
    store.add("other-" + uuid.uuid4().hex, [new_card("x", subject="user", attribute="city")])
    store.supersede(user_id, berlin.id, lisbon.id)

    def ids(*args: object, **kwargs: object) -> list[int]:
        return [card.id for card in store.current_keyed(user_id, *args, **kwargs)]  # type: ignore[arg-type]

    assert ids([("user", "city")]) == [lisbon.id]
    assert ids([("user", "city"), ("team", "city")]) == [lisbon.id, team.id]
    assert ids([], prefixes=[("user", "task:")]) == [task.id]
    assert ids([("user", "age")], prefixes=[("user", "task:")]) == [task.id, other.id]
    assert ids([]) == []
    assert ids([("user", "name")]) == []


def test_merge_sources_and_revive(store: CardStore, user_id: str, database: Database) -> None:
    old, new = store.add(
        user_id,
        [new_card("lives in paris", client_id="m1"), new_card("lives in rome", client_id="m2")],
    )
    said = MessageStore(database).append(user_id, "s", [user("a"), user("b")])
    later, first = said[1].id, said[0].id
    merged = store.merge_sources(
        user_id, old.id, message_ids=[later, first], client_ids=["m9", "m1"]
    )
    assert merged.source_client_ids == ["m1", "m9"] and merged.source_message_ids == [first, later]
    assert merged.text == old.text and merged.valid_to is None

    store.supersede(user_id, old.id, new.id)
    back = store.revive(user_id, old.id, DAY + timedelta(days=4000))
    assert back.valid_to is None and back.superseded_by is None
    assert back.valid_from == DAY + timedelta(days=4000)
    assert {c.id for c in store.list_cards(user_id)} == {old.id, new.id}
    with pytest.raises(LookupError):
        store.merge_sources("someone-else", old.id, client_ids=["x"])
    with pytest.raises(LookupError):
        store.revive("someone-else", old.id)


def test_forgetting_every_card_leaves_no_statistics(
    store: CardStore, user_id: str, database: Database
) -> None:
    store.add(user_id, [new_card("alpha", subject="user", attribute="a")])
    store.delete(user_id)
    with database.reading() as connection:
        left = connection.execute(
            text("SELECT count(*) FROM card_stats WHERE user_id = :u"), {"u": user_id}
        ).scalar_one()
    assert left == 0


# --- a turn card per message; bounded sizes -------------------------------------------------


def test_a_message_has_one_turn_card_whatever_its_neighbours_were(
    store: CardStore, user_id: str
) -> None:
    [first] = store.add(
        user_id, [new_card("User: hi\nAssistant: hello", type="turn", turn_message_id=7)]
    )
    # The same message archived again after a crash, with a neighbour said since.
    [again] = store.add(
        user_id,
        [new_card("User: hi\nAssistant: hello\nUser: more", type="turn", turn_message_id=7)],
    )
    # Another message whose turn reads the same: the same card, with both sources.
    [twin] = store.add(
        user_id,
        [new_card("User: hi\nAssistant: hello", type="turn", turn_message_id=9, client_id="m9")],
    )

    assert again == first
    assert first.turn_message_id == 7
    assert twin.id == first.id and twin.source_client_ids == ["m9"]
    assert store.count(user_id) == 1
    [other] = store.add(user_id, [new_card("User: bye", type="turn", turn_message_id=8)])
    assert other.id != first.id and store.count(user_id) == 2


def test_the_database_refuses_a_second_turn_card_of_a_message(
    store: CardStore, database: Database, user_id: str
) -> None:
    store.add(user_id, [new_card("User: hi", type="turn", turn_message_id=7)])

    with pytest.raises(StorageError), database.transaction() as session:
        session.execute(
            text(
                "INSERT INTO cards (user_id, type, text, content_hash, embedding, "
                "keyword_length, turn_message_id) "
                "SELECT user_id, type, 'User: hi!', 'other', embedding, 1, turn_message_id "
                "FROM cards WHERE user_id = :user_id"
            ),
            {"user_id": user_id},
        )
    assert store.count(user_id) == 1


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"topic": "t" * 1_000_000}, "topic has 1,000,000 characters; at most 100"),
        ({"text": "x" * (MAX_CARD_TEXT_CHARS + 1)}, "text has 32,001 characters"),
        ({"tags": ["tag"] * (MAX_CARD_TAGS + 1)}, "21 tags; at most 20"),
        ({"tags": ["t" * 65]}, "a tag has 65 characters; at most 64"),
        ({"subject": "s" * 201}, "subject has 201 characters; at most 200"),
        ({"attribute": "a" * 201}, "attribute has 201 characters"),
        ({"turn_message_id": 3}, "only a turn card archives a message"),
    ],
)
def test_a_card_over_a_bound_is_refused_and_its_batch_is_not_stored(
    store: CardStore, user_id: str, fields: dict[str, Any], named: str
) -> None:
    text_ = fields.pop("text", "A card over a bound.")
    with pytest.raises(InvalidInputError, match="card 1") as refused:
        store.add(user_id, [new_card("A fine card."), new_card(text_, **fields)])

    assert named in str(refused.value)
    assert store.count(user_id) == 0

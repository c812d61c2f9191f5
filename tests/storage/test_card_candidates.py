"""Tests of ``CardStore.candidates``: the rankings of a hybrid search in one statement, and of
``CardRanking.candidates`` for a user the HNSW index ranks."""

import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from card_samples import MODEL, new_card, unit_vector
from keyword_reference import search_keywords
from wire_trace import wire_trace

import storage.cards.queries
from retrieval.ranking import CardRanking
from storage import EMBEDDING_DIM, CardFilter, CardStore, Database
from storage.cards.search import Candidates

DAY = datetime(2025, 5, 8, tzinfo=UTC)
WEEK = (DAY, DAY + timedelta(days=7))


@pytest.fixture
def store(database: Database) -> CardStore:
    return CardStore(database, model=MODEL, dimension=EMBEDDING_DIM)


def fill(store: CardStore, user_id: str) -> None:
    store.add(
        user_id,
        [
            new_card(f"tea note {i} about the garden", observed_at=DAY - timedelta(days=i))
            for i in range(12)
        ]
        + [new_card("coffee every morning", type="preference", observed_at=DAY)]
        + [new_card("garden party", observed_at=DAY - timedelta(days=40), occurred_at=DAY)],
    )
    store.add("other-" + uuid.uuid4().hex, [new_card("tea garden tea garden")])


@pytest.mark.parametrize(
    "where", [CardFilter(), CardFilter(types=("fact",)), CardFilter(since=DAY - timedelta(days=5))]
)
def test_the_rankings_are_those_of_the_separate_searches(
    store: CardStore, database: Database, user_id: str, where: CardFilter
) -> None:
    fill(store, user_id)
    query = unit_vector("a query")

    found = store.candidates(user_id, query, ["tea", "garden"], limit=6, where=where)

    dense = store.search_vector(user_id, query, limit=6, where=where, method="exact")
    keyword = search_keywords(database, user_id, ["tea", "garden"], limit=6, where=where)
    assert [m.card_id for m in found.dense] == [m.card_id for m in dense]
    assert [m.card_id for m in found.keyword] == [m.card_id for m in keyword]
    assert [m.score for m in found.keyword] == pytest.approx([m.score for m in keyword])
    assert found.timed == []
    ids = {m.card_id for m in [*dense, *keyword]}
    assert found.similarity == pytest.approx(store.similarities(user_id, query, sorted(ids)))
    assert found.cards == 14


def test_the_timed_ranking_holds_cards_said_or_happening_in_the_window(
    store: CardStore, user_id: str
) -> None:
    fill(store, user_id)
    query = unit_vector("a query")

    found = store.candidates(user_id, query, [], limit=50, during=WEEK)
    typed = store.candidates(
        user_id, query, [], limit=50, during=WEEK, where=CardFilter(types=("preference",))
    )

    cards = {c.id: c for c in store.list_cards(user_id)}
    in_week = {
        i
        for i, c in cards.items()
        if WEEK[0] <= c.observed_at < WEEK[1]
        or (c.occurred_at is not None and WEEK[0] <= c.occurred_at < WEEK[1])
    }
    timed = [m.card_id for m in found.timed]
    assert set(timed) == in_week and len(in_week) == 3  # tea note 0, coffee, the party
    assert [m.score for m in found.timed] == sorted((m.score for m in found.timed), reverse=True)
    assert found.keyword == []
    assert [cards[m.card_id].text for m in typed.timed] == ["coffee every morning"]


def test_the_keyword_window_widens_when_filters_drop_the_best(
    store: CardStore, user_id: str
) -> None:
    closed = store.add(user_id, [new_card(f"tea tea tea {i}") for i in range(9)])
    [kept] = store.add(user_id, [new_card("tea and a long tail of other words here")])
    for card in closed:
        store.supersede(user_id, card.id, kept.id)

    found = store.candidates(user_id, unit_vector("q"), ["tea"], limit=2)

    assert [m.card_id for m in found.keyword] == [kept.id]
    assert [m.card_id for m in found.dense] == [kept.id]


@pytest.mark.slow
def test_a_filter_that_keeps_few_cards_widens_the_window_once(
    store: CardStore, database: Database, user_id: str, tmp_path: Path
) -> None:
    # 300 facts share the query's term; the filter keeps the one event among them.
    store.add(user_id, [new_card(f"tea tea tea {i}") for i in range(300)])
    [event] = store.add(user_id, [new_card("tea once, with many other words", type="event")])
    events = CardFilter(types=("event",))

    with wire_trace(database.engine, tmp_path / "trace") as trace:
        found = store.candidates(user_id, unit_vector("q"), ["tea"], limit=4, where=events)

    assert [m.card_id for m in found.keyword] == [event.id]
    assert trace.statements <= 2  # the first window, then every scored card at once


def test_a_user_without_cards_has_no_candidates(store: CardStore) -> None:
    found = store.candidates("nobody-" + uuid.uuid4().hex, unit_vector("q"), ["tea"], limit=5)

    assert (found.dense, found.keyword, found.timed, found.cards) == ([], [], [], 0)


def test_a_big_user_walks_the_index_and_gets_the_same_cards(
    store: CardStore, user_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fill(store, user_id)
    ranking = CardRanking(store)
    query = unit_vector("another query")
    exact = ranking.candidates(user_id, query, ["tea"], limit=8, during=WEEK)

    monkeypatch.setattr(storage.cards.queries, "EXACT_SCAN_MAX_CARDS", 3)
    indexed = ranking.candidates(user_id, query, ["tea"], limit=8, during=WEEK)
    # Known as big now: its index ranking runs while the statement runs, the same cards.
    ahead = ranking.candidates(user_id, query, ["tea"], limit=8, during=WEEK)

    for found in (indexed, ahead):
        assert [m.card_id for m in found.dense] == [m.card_id for m in exact.dense]
        assert len(found.dense) == 8
        assert found.keyword == exact.keyword and found.timed == exact.timed
        # The index ranks by cosine distance in float4, the exact scan by inner product.
        assert found.similarity == pytest.approx(exact.similarity, abs=1e-5)
    assert ahead == indexed
    # Back under the exact scan's size: the statement's own ranking again.
    monkeypatch.setattr(storage.cards.queries, "EXACT_SCAN_MAX_CARDS", 10_000)
    small = ranking.candidates(user_id, query, ["tea"], limit=8, during=WEEK)
    assert [m.card_id for m in small.dense] == [m.card_id for m in exact.dense]


def test_searches_from_many_threads_at_once_get_what_one_at_a_time_gets(
    store: CardStore, user_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fill(store, user_id)
    ranking = CardRanking(store)
    queries = [unit_vector(f"query {i}") for i in range(16)]

    def search(query: list[float]) -> Candidates:
        return ranking.candidates(user_id, query, ["tea"], limit=8)

    monkeypatch.setattr(storage.cards.queries, "EXACT_SCAN_MAX_CARDS", 3)  # the HNSW index
    big_alone = [search(q) for q in queries]
    with ThreadPoolExecutor(8) as pool:
        big_together = list(pool.map(search, queries))
    monkeypatch.setattr(storage.cards.queries, "EXACT_SCAN_MAX_CARDS", 10_000)
    search(queries[0])  # holds the user's vectors
    alone = [search(q) for q in queries]
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(search, queries))

    assert big_together == big_alone
    assert together == alone


def test_held_leaves_the_vector_work_to_the_caller(store: CardStore, user_id: str) -> None:
    fill(store, user_id)

    found = store.candidates(user_id, None, ["tea"], limit=5, held=True)

    full = store.candidates(user_id, unit_vector("q"), ["tea"], limit=5)
    assert found.dense == [] and found.similarity == {}
    assert found.keyword == full.keyword and found.version == full.version is not None
    with pytest.raises(ValueError, match="query vector"):
        store.candidates(user_id, None, ["tea"], limit=5)
    with pytest.raises(ValueError, match="query vector"):
        store.candidates(user_id, None, ["tea"], limit=5, held=True, during=WEEK)
    assert store.count(user_id) == 14  # a refused search changes nothing

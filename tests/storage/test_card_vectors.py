"""Tests of the in-process card vectors (``retrieval.vectors``, read by ``storage.cards.vectors``)
behind ``CardRanking.candidates``.

The cached path must give what the SQL scan gives, after every kind of write, by this process or
another one; a matrix is used only at the version the search statement sees; memory is bounded.
"""

import threading
import uuid
from pathlib import Path

import numpy as np
import pytest
from card_samples import MODEL, new_card, unit_vector
from child_process import Spawn
from sqlalchemy import text

import storage.cards.queries
from retrieval.ranking import CardRanking
from retrieval.vectors import UserVectors
from storage import EMBEDDING_DIM, CardFilter, CardStore, Database

WRITER = Path(__file__).with_name("card_writer_child.py")
QUERIES = [unit_vector(f"query {i}") for i in range(4)]


@pytest.fixture
def store(database: Database) -> CardStore:
    return CardStore(database, model=MODEL, dimension=EMBEDDING_DIM)


@pytest.fixture
def ranking(store: CardStore) -> CardRanking:
    return CardRanking(store)


def held(ranking: CardRanking, user_id: str) -> UserVectors | None:
    assert ranking.vectors is not None
    return ranking.vectors.get(user_id)


def version(database: Database, user_id: str) -> int | None:
    with database.reading() as connection:
        found = connection.execute(
            text("SELECT version FROM card_stats WHERE user_id = :u"), {"u": user_id}
        ).scalar_one_or_none()
    return None if found is None else int(found)


def assert_matches_sql(ranking: CardRanking, user_id: str, limit: int = 5) -> None:
    """Every query's dense ranking and similarities are those of the exact SQL scan."""
    store = ranking.store
    for query in QUERIES:
        found = ranking.candidates(user_id, query, ["tea"], limit=limit)
        exact = store.search_vector(user_id, query, limit=limit, method="exact")
        assert [m.card_id for m in found.dense] == [m.card_id for m in exact]
        assert [m.score for m in found.dense] == pytest.approx([m.score for m in exact], abs=1e-5)
        ids = sorted({m.card_id for m in [*found.dense, *found.keyword]})
        assert found.similarity == pytest.approx(store.similarities(user_id, query, ids), abs=1e-5)


def test_a_search_loads_the_vectors_and_the_next_one_uses_them(
    store: CardStore, ranking: CardRanking, database: Database, user_id: str
) -> None:
    cards = store.add(user_id, [new_card(f"tea note {i}") for i in range(20)])
    assert held(ranking, user_id) is None

    assert_matches_sql(ranking, user_id)

    loaded = held(ranking, user_id)
    assert loaded is not None and loaded.version == version(database, user_id)
    assert sorted(loaded.ids.tolist()) == sorted(c.id for c in cards)
    assert_matches_sql(ranking, user_id)


def test_a_held_matrix_is_used_only_at_the_version_the_statement_sees(
    store: CardStore, ranking: CardRanking, database: Database, user_id: str
) -> None:
    store.add(user_id, [new_card(f"tea note {i}") for i in range(20)])
    ranking.candidates(user_id, QUERIES[0], [], limit=5)
    loaded = held(ranking, user_id)
    assert loaded is not None
    # A forged matrix at the current version: the search trusts it (it is the cache)...
    reversed_ids = loaded.ids[::-1].copy()
    backwards = loaded.matrix[::-1].copy()
    forged = UserVectors(loaded.version, loaded.ids, backwards, backwards)
    assert ranking.vectors is not None
    ranking.vectors._keep(user_id, forged)
    found = ranking.candidates(user_id, QUERIES[0], [], limit=20)
    nearest = store.search_vector(user_id, QUERIES[0], limit=20, method="exact")
    by_row = {int(i): j for j, i in enumerate(loaded.ids.tolist())}
    assert [m.card_id for m in found.dense] == [
        int(reversed_ids[by_row[m.card_id]]) for m in nearest
    ]
    # ...and after a write only what changed is loaded: the new card, at the new version.
    [added] = store.add(user_id, [new_card("tea with lemon")])

    after = ranking.candidates(user_id, QUERIES[0], [], limit=21)
    reloaded = held(ranking, user_id)
    assert reloaded is not None and reloaded.version == version(database, user_id)
    assert added.id in reloaded.ids and added.id in {m.card_id for m in after.dense}
    assert np.array_equal(reloaded.matrix[reloaded.ids != added.id], forged.matrix)


def test_a_write_between_the_statement_and_the_reload_is_searched_exactly(
    store: CardStore,
    ranking: CardRanking,
    database: Database,
    user_id: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store.add(user_id, [new_card(f"tea note {i}") for i in range(8)])
    ranking.candidates(user_id, QUERIES[0], [], limit=3)
    store.add(user_id, [new_card("tea with lemon")])  # the held vectors are stale now
    vectors = ranking.vectors
    assert vectors is not None
    reload = vectors.refresh
    other = CardStore(database, model=MODEL, dimension=EMBEDDING_DIM)

    def write_then_reload(user: str) -> UserVectors | None:
        other.add(user, [new_card("written while this search ran")])
        return reload(user)

    monkeypatch.setattr(vectors, "refresh", write_then_reload)
    found = ranking.candidates(user_id, QUERIES[1], ["tea"], limit=10)

    exact = store.search_vector(user_id, QUERIES[1], limit=10, method="exact")
    assert [m.card_id for m in found.dense] == [m.card_id for m in exact]
    ids = sorted({m.card_id for m in [*found.dense, *found.keyword]})
    assert found.similarity == pytest.approx(store.similarities(user_id, QUERIES[1], ids), abs=1e-5)


@pytest.mark.slow
def test_every_write_of_another_process_is_seen(
    spawn: Spawn, database_url: str, store: CardStore, ranking: CardRanking, user_id: str
) -> None:
    [first, *_] = store.add(user_id, [new_card(f"tea note {i}") for i in range(10)])
    assert_matches_sql(ranking, user_id)
    writer = spawn(WRITER, database_url, user_id)
    assert writer.read() == "ready"

    def write(line: str) -> str:
        writer.tell(line)
        return writer.read()

    added = int(write("add a tea card written elsewhere"))
    assert_matches_sql(ranking, user_id, limit=11)
    assert added in held(ranking, user_id).ids  # type: ignore[union-attr]
    assert write(f"supersede {first.id} {added}") == "done"
    assert_matches_sql(ranking, user_id, limit=11)
    assert first.id not in held(ranking, user_id).ids  # type: ignore[union-attr]
    assert write(f"revive {first.id}") == "done"
    assert_matches_sql(ranking, user_id, limit=11)
    assert first.id in held(ranking, user_id).ids  # type: ignore[union-attr]
    assert write(f"delete {added}") == "done"
    assert_matches_sql(ranking, user_id, limit=11)
    assert added not in held(ranking, user_id).ids  # type: ignore[union-attr]
    assert writer.finish() == 0


def test_a_user_forgotten_by_another_store_has_no_candidates(
    store: CardStore, ranking: CardRanking, database: Database, user_id: str
) -> None:
    store.add(user_id, [new_card(f"tea note {i}") for i in range(4)])
    ranking.candidates(user_id, QUERIES[0], [], limit=3)
    assert held(ranking, user_id) is not None
    CardStore(database, model=MODEL, dimension=EMBEDDING_DIM).delete(user_id)

    found = ranking.candidates(user_id, QUERIES[0], ["tea"], limit=3)

    assert (found.dense, found.keyword, found.similarity, found.cards) == ([], [], {}, 0)
    assert held(ranking, user_id) is None


def test_never_fewer_than_k_from_the_cache(
    store: CardStore, ranking: CardRanking, user_id: str
) -> None:
    store.add(user_id, [new_card(f"tea note {i}") for i in range(7)])
    ranking.candidates(user_id, QUERIES[0], [], limit=3)
    assert held(ranking, user_id) is not None

    assert len(ranking.candidates(user_id, QUERIES[1], [], limit=3).dense) == 3
    assert len(ranking.candidates(user_id, QUERIES[1], [], limit=7).dense) == 7
    assert len(ranking.candidates(user_id, QUERIES[1], [], limit=50).dense) == 7


def test_a_filtered_search_never_uses_the_cache(
    store: CardStore, ranking: CardRanking, user_id: str
) -> None:
    store.add(user_id, [new_card(f"tea note {i}") for i in range(6)])
    store.add(user_id, [new_card("a preference about tea", type="preference")])
    ranking.candidates(user_id, QUERIES[0], [], limit=3)
    assert held(ranking, user_id) is not None

    typed = ranking.candidates(
        user_id, QUERIES[0], ["tea"], limit=5, where=CardFilter(types=("preference",))
    )

    assert len(typed.dense) == 1 and len(typed.keyword) == 1


def test_forgetting_and_adding_again_never_matches_an_old_matrix(
    store: CardStore, ranking: CardRanking, database: Database, user_id: str
) -> None:
    store.add(user_id, [new_card(f"tea note {i}") for i in range(3)])
    ranking.candidates(user_id, QUERIES[0], [], limit=3)
    old = held(ranking, user_id)
    assert old is not None
    other = CardStore(database, model=MODEL, dimension=EMBEDDING_DIM)
    assert other.delete(user_id) == 3
    other.add(user_id, [new_card(f"coffee note {i}") for i in range(3)])

    assert version(database, user_id) != old.version
    assert_matches_sql(ranking, user_id, limit=3)


def test_memory_is_bounded_by_bytes(database: Database) -> None:
    row = 4 * EMBEDDING_DIM + 8
    # Room for two users of 10 cards (each held with room for 8 more), not three.
    store = CardStore(database, model=MODEL, dimension=EMBEDDING_DIM)
    ranking = CardRanking(store, vector_cache_bytes=40 * row)
    users = [f"user-{uuid.uuid4()}" for _ in range(3)]
    for user in users:
        store.add(user, [new_card(f"tea note {i} of {user}") for i in range(10)])
    big = f"user-{uuid.uuid4()}"
    store.add(big, [new_card(f"tea note {i} of {big}") for i in range(50)])

    for user in users:
        ranking.candidates(user, QUERIES[0], [], limit=3)
    assert ranking.vectors is not None
    assert held(ranking, users[0]) is None  # the least recently used went first
    assert held(ranking, users[1]) is not None and held(ranking, users[2]) is not None
    assert ranking.vectors.nbytes <= 40 * row
    ranking.candidates(big, QUERIES[0], [], limit=3)  # larger than the bound: never held
    assert held(ranking, big) is None
    assert len(ranking.candidates(big, QUERIES[0], [], limit=50).dense) == 50


def test_added_cards_are_written_into_the_room_after_the_held_rows(
    store: CardStore, ranking: CardRanking, user_id: str
) -> None:
    store.add(user_id, [new_card(f"tea note {i}") for i in range(16)])
    ranking.candidates(user_id, QUERIES[0], [], limit=3)
    first = held(ranking, user_id)
    assert first is not None and len(first.buffer) == 16 + 8

    store.add(user_id, [new_card("tea with lemon"), new_card("tea with milk")])
    assert_matches_sql(ranking, user_id, limit=18)
    second = held(ranking, user_id)
    assert second is not None and second.buffer is first.buffer  # no copy
    assert len(first.ids) == 16 and len(second.ids) == 18  # the older one sees its own rows
    store.add(user_id, [new_card(f"more tea {i}") for i in range(7)])  # past the room
    assert_matches_sql(ranking, user_id, limit=25)
    third = held(ranking, user_id)
    assert third is not None and third.buffer is not first.buffer and len(third.ids) == 25


def test_no_cache_at_all_when_the_bound_is_zero(database: Database, user_id: str) -> None:
    store = CardStore(database, model=MODEL, dimension=EMBEDDING_DIM)
    ranking = CardRanking(store, vector_cache_bytes=0)
    store.add(user_id, [new_card(f"tea note {i}") for i in range(5)])

    assert ranking.vectors is None
    assert len(ranking.candidates(user_id, QUERIES[0], [], limit=5).dense) == 5


def test_decoding_pgvector_binary_vectors(
    store: CardStore, ranking: CardRanking, user_id: str
) -> None:
    vector = unit_vector("decode me")
    [card] = store.add(user_id, [new_card("decode me", vector=vector)])
    ranking.candidates(user_id, vector, [], limit=1)

    loaded = held(ranking, user_id)
    assert loaded is not None and loaded.ids.tolist() == [card.id]
    assert loaded.matrix.dtype == np.float32
    assert loaded.matrix[0] == pytest.approx(vector, abs=1e-6)


def test_users_past_the_exact_scan_size_keep_the_index(
    store: CardStore, ranking: CardRanking, user_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.add(user_id, [new_card(f"tea note {i}") for i in range(6)])
    ranking.candidates(user_id, QUERIES[0], [], limit=3)
    assert held(ranking, user_id) is not None
    store.add(user_id, [new_card("one more tea note")])
    monkeypatch.setattr(storage.cards.queries, "EXACT_SCAN_MAX_CARDS", 5)

    found = ranking.candidates(user_id, QUERIES[0], [], limit=7)

    assert held(ranking, user_id) is None
    exact = store.search_vector(user_id, QUERIES[0], limit=7, method="exact")
    assert [m.card_id for m in found.dense] == [m.card_id for m in exact]


def test_with_held_vectors_the_statement_does_not_wait_for_the_query_vector(
    store: CardStore, ranking: CardRanking, user_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.add(user_id, [new_card(f"tea note {i}") for i in range(20)])
    ranking.candidates(user_id, QUERIES[0], ["tea"], limit=5)  # loads the vectors
    rows_arrived = threading.Event()
    asked: list[int] = []
    split_rows = storage.cards.queries._candidates

    def statement_rows(rows: list[tuple[object, ...]]) -> object:
        rows_arrived.set()
        return split_rows(rows)

    def query_vector() -> list[float]:
        # Answers only once the statement's rows are in: a statement that waited for the
        # vector would never get them (the wait gives up after a minute, failing the test).
        asked.append(1)
        assert rows_arrived.wait(timeout=60)
        return QUERIES[1]

    monkeypatch.setattr(storage.cards.queries, "_candidates", statement_rows)
    lazy = ranking.candidates(user_id, query_vector, ["tea"], limit=5)

    assert asked == [1]  # asked for once, on the ranking's thread
    eager = ranking.candidates(user_id, QUERIES[1], ["tea"], limit=5)
    assert lazy == eager


def test_without_held_vectors_the_query_vector_is_asked_for_once_before_the_statement(
    database: Database, user_id: str
) -> None:
    store = CardStore(database, model=MODEL, dimension=EMBEDDING_DIM)
    ranking = CardRanking(store, vector_cache_bytes=0)
    store.add(user_id, [new_card(f"tea note {i}") for i in range(20)])
    asked: list[int] = []

    def query_vector() -> list[float]:
        asked.append(1)
        return QUERIES[2]

    lazy = ranking.candidates(user_id, query_vector, ["tea"], limit=5)

    assert asked == [1]
    assert lazy == ranking.candidates(user_id, QUERIES[2], ["tea"], limit=5)

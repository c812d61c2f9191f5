"""``StratamemStore``: LangGraph's ``BaseStore`` on stratamem's Postgres, users by namespace.

On the real embedded Postgres with the real ``langgraph`` package; the hashing embedder stands
in for MiniLM (recall quality is not what these tests are about).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid

import pytest
from databases import user_rows
from langgraph.store.base import GetOp, InvalidNamespaceError, PutOp, SearchOp
from sqlalchemy import text

from memory import ConfigurationError, Memory, Settings
from memory.integrations.langgraph import StratamemStore
from retrieval import MINILM_NAME, HashingEmbedder, SentenceTransformerEmbedder
from storage import Database, InvalidInputError


@pytest.fixture
def memory(database: Database) -> Memory:
    settings = Settings(summary={"mode": "inline"})
    return Memory(database, settings, embedder=HashingEmbedder(name=MINILM_NAME))


@pytest.fixture
def store(memory: Memory) -> StratamemStore:
    return StratamemStore(memory, user_position=1)


def stored_rows(database: Database, user_id: str) -> dict[str, int]:
    return user_rows(database, user_id, ("store_items", "store_vectors", "store_terms"))


def test_put_get_search_and_delete_by_namespace(store: StratamemStore, user_id: str) -> None:
    home = ("memories", user_id)
    store.put(home, "drink", {"text": "The user prefers green tea in the morning."})
    store.put(home, "city", {"text": "The user lives in Lisbon.", "since": 2021})
    store.put((*home, "work"), "team", {"text": "Works on the billing team."})

    item = store.get(home, "city")
    assert item is not None and item.value == {"text": "The user lives in Lisbon.", "since": 2021}
    assert item.namespace == home and item.key == "city"
    assert item.created_at <= item.updated_at

    hits = store.search(home, query="which tea does the user drink?")
    assert hits[0].key == "drink"
    assert all(hit.score is not None and 0 < hit.score <= 1 for hit in hits)
    assert {hit.key for hit in store.search(home)} == {"drink", "city", "team"}
    assert [hit.key for hit in store.search(home, filter={"since": {"$gte": 2020}})] == ["city"]
    assert store.list_namespaces(prefix=("memories", user_id)) == [home, (*home, "work")]
    assert store.list_namespaces(prefix=("memories", user_id), max_depth=2) == [home]

    store.delete(home, "city")
    assert store.get(home, "city") is None
    assert {hit.key for hit in store.search(home)} == {"drink", "team"}


def test_an_update_keeps_created_at_and_replaces_what_the_item_is_found_by(
    store: StratamemStore, database: Database, user_id: str
) -> None:
    home = ("memories", user_id)
    store.put(home, "pet", {"text": "The user has a cat named Miso."})
    first = store.get(home, "pet")

    store.put(home, "pet", {"text": "The user has a dog named Rex."})

    second = store.get(home, "pet")
    assert first is not None and second is not None
    assert second.created_at == first.created_at and second.updated_at > first.updated_at
    [hit] = store.search(home, query="cat Miso")
    assert hit.value == {"text": "The user has a dog named Rex."}
    with database.engine.connect() as connection:
        terms = set(
            connection.scalars(
                text("SELECT term FROM store_terms WHERE user_id = :u"), {"u": user_id}
            )
        )
    assert "miso" not in terms and "rex" in terms


def test_index_false_and_fields_choose_what_a_query_ranks(memory: Memory, user_id: str) -> None:
    store = StratamemStore(memory, user_position=1, index={"fields": ["text"]})
    home = ("memories", user_id)
    store.put(home, "plain", {"text": "Espresso every day."}, index=False)
    store.put(home, "indexed", {"text": "Espresso after lunch."})
    store.put(home, "other", {"note": "Espresso, no text field."})
    store.put(home, "chosen", {"note": "Espresso from the note."}, index=["note"])

    hits = store.search(home, query="espresso", limit=10)

    scored = [hit.key for hit in hits if hit.score is not None]
    assert set(scored) == {"indexed", "chosen"}
    assert [hit.key for hit in hits if hit.score is None] == ["plain", "other"]
    assert [hit.key for hit in hits][:2] == scored  # unindexed items come last


def test_every_list_element_is_indexed_on_its_own(memory: Memory, user_id: str) -> None:
    store = StratamemStore(memory, user_id=user_id, index={"fields": ["facts[*]"]})
    store.put(("profile",), "facts", {"facts": ["likes jazz", "owns a bicycle", "speaks Dutch"]})
    store.put(("profile",), "noise", {"facts": ["likes rain"]})

    [best, *_] = store.search(("profile",), query="bicycle")

    assert best.key == "facts"


def test_a_user_id_store_owns_every_namespace(
    memory: Memory, database: Database, user_id: str
) -> None:
    store = StratamemStore(memory, user_id=user_id)
    store.put(("a",), "k", {"v": 1})
    store.put(("b", "c"), "k", {"v": 2})

    assert stored_rows(database, user_id)["store_items"] == 2
    assert store.list_namespaces() == [("a",), ("b", "c")]
    other = StratamemStore(memory, user_id=f"other-{uuid.uuid4()}")
    assert other.get(("a",), "k") is None and other.search(()) == []


def test_forget_of_the_user_deletes_their_items_and_no_one_elses(
    store: StratamemStore, memory: Memory, database: Database, user_id: str
) -> None:
    neighbour = f"neighbour-{uuid.uuid4()}"
    store.put(("memories", user_id), "k", {"text": "secret SWORDFISH"})
    store.put(("memories", user_id, "deep"), "k2", {"text": "another"})
    store.put(("memories", neighbour), "k", {"text": "kept"})
    before = stored_rows(database, user_id)
    assert before["store_items"] == 2 and before["store_vectors"] == 2 and before["store_terms"]

    gone = memory.forget(user_id=user_id)

    assert gone.store_items == 2 and "2 store items" in gone.describe()
    assert stored_rows(database, user_id) == dict.fromkeys(stored_rows(database, user_id), 0)
    assert store.search(("memories", user_id), query="SWORDFISH") == []
    assert store.get(("memories", neighbour), "k") is not None


def test_forgetting_one_session_leaves_the_items(
    store: StratamemStore, memory: Memory, user_id: str
) -> None:
    memory.record(user_id=user_id, session_id="s", messages=[{"role": "user", "content": "hi"}])
    store.put(("memories", user_id), "k", {"text": "kept"})

    gone = memory.forget(user_id=user_id, session_id="s")

    assert gone.store_items == 0 and store.get(("memories", user_id), "k") is not None


def test_a_namespace_that_names_no_user_is_refused_and_nothing_is_stored(
    store: StratamemStore, user_id: str
) -> None:
    with pytest.raises(InvalidNamespaceError, match="names no user"):
        store.batch(
            [
                PutOp(("memories", user_id), "fine", {"v": 1}),
                PutOp(("memories",), "k", {"v": 1}),
            ]
        )
    assert store.get(("memories", user_id), "fine") is None


def test_a_value_that_cannot_be_stored_stores_nothing_of_the_batch(
    store: StratamemStore, user_id: str
) -> None:
    home = ("memories", user_id)
    with pytest.raises(InvalidInputError, match="not JSON"):
        store.batch([PutOp(home, "fine", {"v": 1}), PutOp(home, "bad", {"v": float("nan")})])
    assert store.search(home) == []


def test_nuls_and_unicode_survive_in_values(store: StratamemStore, user_id: str) -> None:
    home = ("memories", user_id)
    value = {"text": "a\x00b \\u0000 ☕ 中文", "nested": {"list": ["\x00", 1.5, None, True]}}
    store.put(home, "k", value)

    item = store.get(home, "k")

    assert item is not None and item.value == value


def test_reads_in_a_batch_see_the_store_before_its_puts(
    store: StratamemStore, user_id: str
) -> None:
    home = ("memories", user_id)
    results = store.batch(
        [
            PutOp(home, "k", {"v": 1}),
            GetOp(home, "k"),
            SearchOp(home, None, 10, 0, None),
            PutOp(home, "k", {"v": 2}),
        ]
    )

    assert results == [None, None, [], None]
    item = store.get(home, "k")
    assert item is not None and item.value == {"v": 2}


def test_abatch_runs_the_same_operations(store: StratamemStore, user_id: str) -> None:
    home = ("memories", user_id)

    async def run() -> list[str]:
        await store.aput(home, "k", {"text": "asynchronous memory"})
        hits = await store.asearch(home, query="memory")
        return [hit.key for hit in hits]

    assert asyncio.run(run()) == ["k"]


def test_configuration_the_store_cannot_honour_is_refused(memory: Memory) -> None:
    with pytest.raises(ConfigurationError, match="embedder"):
        StratamemStore(memory, index={"dims": 384, "embed": lambda texts: [[0.0] * 384]})
    with pytest.raises(ConfigurationError, match="1536"):
        StratamemStore(memory, index={"dims": 1536})
    with pytest.raises(ConfigurationError, match="user_position"):
        StratamemStore(memory, user_position=-1)
    without_cards = Memory(memory.database, Settings(cards={"enabled": False}))
    with pytest.raises(ConfigurationError, match="long-term memory"):
        StratamemStore(without_cards)


@pytest.mark.slow
def test_the_forget_command_removes_the_store_items(
    store: StratamemStore, database: Database, database_url: str, user_id: str
) -> None:
    store.put(("memories", user_id), "k", {"text": "secret SWORDFISH"})
    environment = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("STRATAMEM_", "OPENAI_"))
    }
    environment["STRATAMEM_DATABASE_URL"] = database_url

    done = subprocess.run(
        [sys.executable, "-m", "memory.cli", "forget", "--user", user_id, "--yes"],
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert "1 store item" in done.stdout
    assert stored_rows(database, user_id) == dict.fromkeys(stored_rows(database, user_id), 0)


def test_a_namespace_emptied_and_filled_in_one_batch_keeps_its_place(
    store: StratamemStore, user_id: str
) -> None:
    """As in ``InMemoryStore``, whose namespaces outlive a batch that empties them."""
    first, second = ("memories", user_id, "first"), ("memories", user_id, "second")
    store.put(first, "old", {"v": 1})
    store.put(second, "k", {"v": 2})

    store.batch([PutOp(first, "new", {"v": 3}), PutOp(first, "old", None)])

    assert [(hit.namespace, hit.key) for hit in store.search(("memories", user_id))] == [
        (first, "new"),
        (second, "k"),
    ]


@pytest.mark.slow
def test_a_query_finds_a_memory_by_meaning_with_minilm(database: Database, user_id: str) -> None:
    """With the real embedder: no word of the query is in the memory it finds."""
    memory = Memory(
        database, Settings(summary={"mode": "inline"}), embedder=SentenceTransformerEmbedder()
    )
    store = StratamemStore(memory, user_id=user_id, index={"fields": ["text"]})
    for key, said in {
        "diet": "The user is vegetarian and never eats meat.",
        "commute": "The user rides a bicycle to the office.",
        "music": "The user plays jazz piano on weekends.",
    }.items():
        store.put(("memories",), key, {"text": said})

    hits = store.search(("memories",), query="Which dishes should I avoid cooking for them?")

    assert hits[0].key == "diet"

"""The keyword ranking's window when the caller knows how many of the user's cards are current.

The candidate statement reads the best scored cards (superseded ones included) and keeps the
``limit`` best current ones; without knowing how many are superseded it reads four times
``limit``, and adds the common terms' scores to every card near them. A caller holding the
user's current vectors knows their count at a version (``current``): at that version the
statement reads ``limit`` cards more than the superseded ones only. These tests pin that the
ranking is the full one however many of the best cards are superseded, that a count of
another version (a write since) is not used, and that fewer postings are read.
"""

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from card_samples import MODEL, new_card, unit_vector
from keyword_reference import search_keywords
from sqlalchemy import text
from test_card_term_counts import many_cards, plan_nodes
from wire_trace import wire_trace

from storage import EMBEDDING_DIM, CardFilter, CardStore, Database
from storage.cards.search import candidate_sql
from storage.driver import driver_autocommit, driver_sql

TERMS = ["turn", "berlin", "deploy"]


@pytest.fixture
def store(database: Database) -> CardStore:
    return CardStore(database, model=MODEL, dimension=EMBEDDING_DIM)


def version_and_current(database: Database, user_id: str) -> tuple[int, int]:
    with database.reading() as connection:
        version = connection.execute(
            text("SELECT version FROM card_stats WHERE user_id = :u"), {"u": user_id}
        ).scalar_one()
        current = connection.execute(
            text("SELECT count(*) FROM cards WHERE user_id = :u AND valid_to IS NULL"),
            {"u": user_id},
        ).scalar_one()
    return int(version), int(current)


def supersede_best(store: CardStore, database: Database, user_id: str, count: int) -> None:
    """Supersede the ``count`` best cards for ``TERMS`` by a card that holds none of them."""
    best = search_keywords(database, user_id, TERMS, limit=count)
    [newer] = store.add(user_id, [new_card("a later statement")])
    for match in best:
        store.supersede(user_id, match.card_id, newer.id)


@pytest.mark.parametrize("superseded", [0, 3, 8, 30])
def test_the_current_count_keeps_the_full_ranking(
    store: CardStore, database: Database, user_id: str, superseded: int
) -> None:
    many_cards(store, user_id)
    supersede_best(store, database, user_id, superseded)

    found = store.candidates(
        user_id, unit_vector("q"), TERMS, limit=5,
        current=version_and_current(database, user_id),
    )  # fmt: skip

    full = search_keywords(database, user_id, TERMS, limit=5)
    assert len(full) == 5
    assert [m.card_id for m in found.keyword] == [m.card_id for m in full]
    assert [m.score for m in found.keyword] == pytest.approx([m.score for m in full])


def test_a_count_of_another_version_is_not_used(
    store: CardStore, database: Database, user_id: str, tmp_path: Path
) -> None:
    many_cards(store, user_id)
    # The caller's count is from before another writer superseded the best 8 cards: read
    # with it, the statement would take 5 cards past the 1 it believes superseded, find
    # fewer than 5 current ones and run again over every card.
    before = version_and_current(database, user_id)
    supersede_best(store, database, user_id, 8)

    with wire_trace(database.engine, tmp_path / "trace") as trace:
        found = store.candidates(user_id, unit_vector("q"), TERMS, limit=5, current=before)

    full = search_keywords(database, user_id, TERMS, limit=5)
    assert [m.card_id for m in found.keyword] == [m.card_id for m in full]
    assert trace.statements == 1


def held_postings(database: Database, user_id: str, current: tuple[int, int] | None) -> int:
    """How many postings of the common term the statement read (``EXPLAIN ANALYZE``)."""
    sql, params = candidate_sql(CardFilter(), dense=True, keywords=True, during=None)
    params.update(
        user_id=user_id, query=None, limit=5, exact_max=20_000, held=True, terms=TERMS,
        k1=1.2, b=0.75, window=20,
        current_version=current and current[0], current_cards=current and current[1],
    )  # fmt: skip
    with driver_autocommit(database) as connection:
        [[plan]] = connection.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + driver_sql(database, sql), params
        ).fetchall()
    nodes = plan_nodes((plan if isinstance(plan, list) else json.loads(plan))[0]["Plan"])
    ctes: dict[str, Any] = {node["Subplan Name"]: node for node in nodes if "Subplan Name" in node}
    assert ctes["CTE matches"]["Actual Loops"] == 0  # the pruned scoring, both times
    return int(ctes["CTE held"]["Actual Rows"])


def test_knowing_every_card_is_current_reads_fewer_postings(
    store: CardStore, database: Database, user_id: str
) -> None:
    many_cards(store, user_id)

    unknown = held_postings(database, user_id, None)
    known = held_postings(database, user_id, version_and_current(database, user_id))

    # The window of 20 shrinks to the 5 asked for: the common term of fewer cards is read.
    assert known < unknown


def test_fewer_current_matches_than_asked_for_end_after_one_widening(
    store: CardStore, database: Database, user_id: str, tmp_path: Path
) -> None:
    # 7 of 127 cards hold a term and 4 cards are superseded: the count's window (100 past the
    # 4 superseded) holds fewer than the 100 current matches asked for and fewer than every
    # scored card, so the statement widens once to every scored card. The count must not
    # narrow it back: it did, and recall never returned (the knowledge-update eval hung).
    store.add(user_id, [new_card(f"filler{i} words only") for i in range(120)])
    store.add(user_id, [new_card(f"berlin deploy note {i}") for i in range(7)])
    [newer] = store.add(user_id, [new_card("a later statement")])
    for card in store.list_cards(user_id, CardFilter())[:4]:
        store.supersede(user_id, card.id, newer.id)
    current = version_and_current(database, user_id)
    done: list[Any] = []

    def search() -> None:
        with wire_trace(database.engine, tmp_path / "trace") as trace:
            found = store.candidates(user_id, unit_vector("q"), TERMS, limit=100, current=current)
        done.append((found, trace.statements))

    searching = threading.Thread(target=search, daemon=True)
    searching.start()
    searching.join(300)  # only a failing run waits this long

    assert done, "the search never returned"
    [(found, statements)] = done
    full = search_keywords(database, user_id, TERMS, limit=100)
    assert [m.card_id for m in found.keyword] == [m.card_id for m in full]
    assert len(full) == 7
    assert statements <= 2  # with the count, then (if at all) widened to every scored card

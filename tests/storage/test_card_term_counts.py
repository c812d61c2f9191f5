"""Keyword document frequencies (``card_term_counts``) and the keyword scan they prune.

A term nearly every card holds weighs almost nothing in BM25, yet scoring it read all its
postings (every card of the user). The counts let the candidate statement leave such terms
out of its scan when that cannot change the ranking; these tests pin that the counts stay
those of ``card_terms`` through every write, that the ranking is the full one, and that the
common term's postings are not read.
"""

import json
import random
from collections.abc import Sequence
from typing import Any

import pytest
from card_samples import MODEL, new_card, unit_vector
from keyword_reference import search_keywords
from sqlalchemy import text

from storage import EMBEDDING_DIM, CardFilter, CardMatch, CardStore, Database
from storage.cards.search import candidate_sql
from storage.driver import driver_autocommit, driver_sql


@pytest.fixture
def store(database: Database) -> CardStore:
    return CardStore(database, model=MODEL, dimension=EMBEDDING_DIM)


def stored_counts(database: Database, user_id: str) -> dict[str, int]:
    with database.reading() as connection:
        rows = connection.execute(
            text("SELECT term, cards FROM card_term_counts WHERE user_id = :u AND cards <> 0"),
            {"u": user_id},
        ).all()
    return {row.term: row.cards for row in rows}


def counted_from_terms(database: Database, user_id: str) -> dict[str, int]:
    with database.reading() as connection:
        rows = connection.execute(
            text("SELECT term, count(*) AS n FROM card_terms WHERE user_id = :u GROUP BY term"),
            {"u": user_id},
        ).all()
    return {row.term: row.n for row in rows}


def test_the_counts_follow_every_write_of_the_terms(
    store: CardStore, database: Database, user_id: str
) -> None:
    first = store.add(user_id, [new_card("tea garden tea"), new_card("tea at noon")])
    # The same text again merges (no new terms), a new one adds.
    store.add(user_id, [new_card("tea garden tea"), new_card("garden party at noon")])
    assert stored_counts(database, user_id) == counted_from_terms(database, user_id)
    assert stored_counts(database, user_id)["tea"] == 2

    store.delete(user_id, card_id=first[0].id)
    assert stored_counts(database, user_id) == counted_from_terms(database, user_id)
    assert stored_counts(database, user_id)["tea"] == 1

    store.delete(user_id)
    assert stored_counts(database, user_id) == {} == counted_from_terms(database, user_id)


def many_cards(store: CardStore, user_id: str, count: int = 120) -> None:
    """``count`` cards that all say "turn" (the common term) and some of two rarer terms, in
    varied lengths and frequencies."""
    pick = random.Random(7)
    cards = []
    for i in range(count):
        words = ["turn"] * pick.randint(1, 3) + [f"filler{pick.randint(0, 40)}"] * pick.randint(
            0, 6
        )
        if pick.random() < 0.4:
            words += ["berlin"] * pick.randint(1, 2)
        if pick.random() < 0.3:
            words.append("deploy")
        cards.append(new_card(" ".join([*words, f"card{i}"])))
    store.add(user_id, cards)


@pytest.mark.parametrize("where", [CardFilter(), CardFilter(types=("fact",))])
def test_leaving_the_common_term_out_keeps_the_full_ranking(
    store: CardStore, database: Database, user_id: str, where: CardFilter
) -> None:
    many_cards(store, user_id)
    terms = ["turn", "berlin", "deploy"]

    found = store.candidates(user_id, unit_vector("q"), terms, limit=5, where=where)

    assert_the_full_ranking(
        found.keyword, search_keywords(database, user_id, terms, limit=20, where=where)
    )


def test_only_common_terms_still_rank_every_card(
    store: CardStore, database: Database, user_id: str
) -> None:
    many_cards(store, user_id)

    found = store.candidates(user_id, unit_vector("q"), ["turn"], limit=5)

    assert_the_full_ranking(found.keyword, search_keywords(database, user_id, ["turn"], limit=20))


def assert_the_full_ranking(found: Sequence[CardMatch], full: Sequence[CardMatch]) -> None:
    """``found`` is the best of ``full`` (a longer reference ranking) up to ties: the same
    scores rank by rank, and each card found scores there what the reference gives it.

    Not the same ids in order: cards with equal BM25 scores (three at the fifth place here)
    are summed in another order by each statement, so the last bit decides which tied card
    comes first, and which one a limit keeps.
    """
    scores = {match.card_id: match.score for match in full}
    assert len(full) > len(found) and found
    assert [m.score for m in found] == pytest.approx([m.score for m in full[: len(found)]])
    assert [scores.get(m.card_id) for m in found] == pytest.approx([m.score for m in found])


def plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan, *(node for child in plan.get("Plans", []) for node in plan_nodes(child))]


def test_the_common_terms_postings_are_read_for_the_best_cards_only(
    store: CardStore, database: Database, user_id: str
) -> None:
    many_cards(store, user_id)
    sql, params = candidate_sql(CardFilter(), dense=True, keywords=True, during=None)
    params.update(
        user_id=user_id, query=None, limit=5, exact_max=20_000, held=True,
        terms=["berlin", "deploy", "turn"], k1=1.2, b=0.75, window=20,
        current_version=None, current_cards=None,
    )  # fmt: skip
    with driver_autocommit(database) as connection:
        [[plan]] = connection.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + driver_sql(database, sql), params
        ).fetchall()
    nodes = plan_nodes((plan if isinstance(plan, list) else json.loads(plan))[0]["Plan"])
    ctes = {node["Subplan Name"]: node for node in nodes if "Subplan Name" in node}
    # Scoring every term of the query reads every posting of "turn" (all 120 cards); the
    # statement scored the cards by the rarer terms, then "turn" for the few best only.
    assert ctes["CTE matches"]["Actual Loops"] == 0
    assert ctes["CTE partial"]["Actual Loops"] == 1
    assert ctes["CTE held"]["Actual Rows"] < 60

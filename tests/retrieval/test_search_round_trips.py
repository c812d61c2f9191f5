"""How many statements one card search costs, counted on the wire (not a timing test).

A search is on the path of every ``prepare`` with recall: its candidates in one statement
(``storage.cards.search``) and the chosen cards in a second; the vector ranking of a user whose
current vectors are held in this process (``storage.cards.vectors``) costs no statement at all.
"""

from pathlib import Path

from wire_trace import wire_trace

from retrieval import CardDraft, CardIndex, CardQuery
from storage import CardFilter, Database

FACTS = [
    "My daughter is called Emma.",
    "We use Postgres with pgvector for the product.",
    "I am allergic to peanuts.",
    "The dog's name is Oscar.",
]


def test_a_warm_search_is_two_statements_with_or_without_filters(
    index: CardIndex, database: Database, user_id: str, tmp_path: Path
) -> None:
    index.add(user_id, [CardDraft(type="fact", text=text) for text in FACTS])
    index.search(user_id, "what is my dog called?")  # loads the user's vectors

    with wire_trace(database.engine, tmp_path / "plain") as plain:
        found = index.search(user_id, "what is my dog called?", CardQuery(k=2))
    filtered_query = CardQuery(k=2, where=CardFilter(types=("fact",)))
    with wire_trace(database.engine, tmp_path / "filtered") as filtered:
        same = index.search(user_id, "what is my dog called?", filtered_query)

    assert found[0].card.text == same[0].card.text == "The dog's name is Oscar."
    assert (plain.statements, plain.round_trips) == (2, 2)
    assert (filtered.statements, filtered.round_trips) == (2, 2)

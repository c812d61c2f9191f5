"""Recall's relevance gate reads a card's stored search terms, not its text analysed again.

Analysing every candidate's text (stemming is Python) was about 30 ms of CPU of a
``prepare`` at 11,000 cards; the search reads the terms each card was stored with, which are
that same analysis made once. A card stored with terms its text does not give shows which
one the gate read. Real embedded Postgres, the hashing embedder.
"""

from retrieval import MINILM_NAME, CardIndex, CardQuery, HashingEmbedder, relevant_cards
from storage import CardStore, Database, NewCard


def test_the_gate_reads_the_terms_the_card_was_stored_with(
    database: Database, user_id: str
) -> None:
    embedder = HashingEmbedder(name=MINILM_NAME)
    store = CardStore(database, model=MINILM_NAME, dimension=embedder.dimension)
    index = CardIndex(store, embedder)
    [vector] = embedder.embed(["the garden in spring"])
    # Its text says nothing of zebras; its stored terms do (an import, another recipe).
    store.add(
        user_id,
        [NewCard(type="fact", text="the garden in spring", embedding=vector, terms={"zebra": 1})],
    )

    hits = index.search(user_id, "zebra", CardQuery(k=4))

    assert [hit.card.text for hit in hits] == ["the garden in spring"]
    assert hits[0].terms == frozenset({"zebra"})
    # The hashing embedder sees no likeness between "zebra" and the text: the card passes
    # the gate by holding the query's word, which only its stored terms say.
    assert relevant_cards(hits, index.terms("zebra"), index.config) == hits

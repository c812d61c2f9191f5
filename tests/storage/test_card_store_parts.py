"""``CardStore`` is composed, not a class split over files by mixins: its reads, writes and
searches are objects of their own, each given what it uses, and the store wires them.

Also: one read of cards by id, with or without their stored keyword terms (no second method
with its own copy of the statement).
"""

import inspect
import uuid

from card_samples import MODEL, new_card

from storage import EMBEDDING_DIM, CardStore, Database
from storage.cards import CardQueries, CardReads, CardWrites


def test_the_store_is_no_mixin_and_each_part_takes_what_it_uses() -> None:
    assert CardStore.__mro__ == (CardStore, object)
    assert list(inspect.signature(CardReads).parameters) == ["database"]
    assert list(inspect.signature(CardWrites).parameters) == ["database"]
    assert list(inspect.signature(CardQueries).parameters) == ["database", "dimension"]
    # No part reads attributes another owns: each sets its own in its constructor.
    for part in (CardReads, CardWrites, CardQueries):
        assert "_database" not in part.__annotations__


def test_the_store_hands_out_its_parts_methods(database: Database) -> None:
    store = CardStore(database, model=MODEL, dimension=EMBEDDING_DIM)
    assert store.add == store.writes.add
    assert store.get_many == store.reads.get_many
    assert store.candidates == store.queries.candidates
    assert store.queries.dimension == EMBEDDING_DIM


def test_a_caller_holding_one_part_writes_and_another_reads(database: Database) -> None:
    CardStore(database, model=MODEL, dimension=EMBEDDING_DIM)  # records the model
    user_id = f"parts-{uuid.uuid4().hex}"
    writes, reads = CardWrites(database), CardReads(database)
    [card] = writes.add(user_id, [new_card("User keeps bees on the roof")])
    assert reads.get(user_id, card.id) == card
    assert CardQueries(database, dimension=EMBEDDING_DIM).count(user_id) == 1
    assert writes.delete(user_id) == 1


def test_one_read_of_cards_by_id_with_or_without_their_terms(database: Database) -> None:
    store = CardStore(database, model=MODEL, dimension=EMBEDDING_DIM)
    user_id = f"parts-{uuid.uuid4().hex}"
    first, second = store.add(
        user_id, [new_card("User drinks green tea"), new_card("User rides a red bike")]
    )
    ids = [second.id, 10**12, first.id]
    assert store.get_many(user_id, ids) == [second, first]
    assert store.get_many(user_id, ids, terms=True) == [
        (second, frozenset({"user", "rides", "a", "red", "bike"})),
        (first, frozenset({"user", "drinks", "green", "tea"})),
    ]
    assert store.get_many(user_id, [], terms=True) == []
    assert not hasattr(store, "get_many_with_terms")
    store.delete(user_id)

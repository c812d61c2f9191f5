"""``CardStore`` is composed, not a class split over files by mixins: its reads, writes and
searches are objects of their own, each given what it uses, and the store wires them and hands
out their methods as its own, the one way to call them.

Also: one read of cards by id, with or without their stored keyword terms (no second method
with its own copy of the statement).
"""

import inspect
import uuid

from card_samples import MODEL, new_card

import storage.cards.store as storage_cards
from storage import EMBEDDING_DIM, CardStore, Database
from storage.cards.queries import CardQueries
from storage.cards.reads import CardReads
from storage.cards.writes import CardWrites


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
    assert store.add == store._writes.add
    assert store.get_many == store._reads.get_many
    assert store.candidates == store._queries.candidates
    assert store._queries.dimension == EMBEDDING_DIM


def test_each_card_method_has_one_way_to_be_called(database: Database) -> None:
    """``store.add``, never also ``store.writes.add``: the parts are private, and every public
    method of a part is the store's own."""
    store = CardStore(database, model=MODEL, dimension=EMBEDDING_DIM)
    parts = (CardReads, CardWrites, CardQueries)
    public = {name for name in vars(store) if not name.startswith("_")}
    held = [name for name in public if isinstance(getattr(store, name), parts)]
    assert held == []
    methods = {
        name
        for part in parts
        for name, member in vars(part).items()
        if callable(member) and not name.startswith("_")
    }
    assert methods <= public
    for name in methods:
        part = next(
            vars(store)[attr]
            for attr in ("_reads", "_writes", "_queries")
            if hasattr(vars(store)[attr], name)
        )
        assert getattr(store, name) == getattr(part, name)
    # No part is exported beside the store as a second public way in.
    assert not {part.__name__ for part in parts} & set(storage_cards.__all__)


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

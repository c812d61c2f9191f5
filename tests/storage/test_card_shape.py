"""One card shape down the stack: the draft every layer passes is one class, declared once.

A draft goes from archiving, a pin or ``Memory.add`` through ``CardIndex.add`` (which gives it
its embedding and terms: a ``NewCard``) to ``CardStore.add``, which returns ``Card``s: both are
that draft plus what their layer adds, so the draft's fields are written in one place.
"""

from __future__ import annotations

from datetime import UTC, datetime

import retrieval
import storage
from memory.cards import ExistingCard, decide_supersede
from retrieval import MINILM_NAME, CardIndex, HashingEmbedder
from storage import Card, CardDraft, CardStore, Database, NewCard
from storage.migrations import EMBEDDING_DIM

_STORED_ONLY = {"id", "user_id", "valid_from", "valid_to", "superseded_by", "created_at"}


def test_retrieval_and_storage_pass_the_same_draft_class() -> None:
    assert retrieval.CardDraft is storage.CardDraft
    assert retrieval.search.CardDraft is CardDraft


def test_a_new_card_and_a_stored_card_are_the_draft_plus_what_their_layer_adds() -> None:
    assert issubclass(NewCard, CardDraft)
    assert issubclass(Card, CardDraft)
    draft_fields = set(CardDraft.model_fields)
    assert len(draft_fields) == 13
    assert set(NewCard.model_fields) - draft_fields == {"embedding", "terms"}
    assert set(Card.model_fields) - draft_fields == _STORED_ONLY
    # Declared once: neither subclass declares a draft field again, but for the stored
    # card's time said, which the store always knows.
    assert not draft_fields & set(NewCard.__annotations__)
    assert draft_fields & set(Card.__annotations__) == {"observed_at"}


def test_new_card_of_a_draft_keeps_every_draft_field() -> None:
    draft = CardDraft(
        type="fact",
        text="User lives in Porto",
        topic="location",
        tags=["home"],
        session_id="s1",
        source_message_ids=[3, 4],
        source_client_ids=["c3"],
        observed_at=datetime(2024, 5, 1, tzinfo=UTC),
        pinned=True,
        subject="user",
        attribute="city",
    )
    new = NewCard.of(draft, embedding=[0.5] * EMBEDDING_DIM, terms={"porto": 1})
    assert {name: getattr(new, name) for name in CardDraft.model_fields} == draft.model_dump()
    assert (new.embedding, new.terms) == ([0.5] * EMBEDDING_DIM, {"porto": 1})
    again = NewCard.of(new, embedding=[0.25] * EMBEDDING_DIM, terms={})
    assert again.embedding == [0.25] * EMBEDDING_DIM and again.text == draft.text


def test_the_supersede_judgment_reads_the_draft_itself() -> None:
    draft = CardDraft(type="fact", text="User lives in Lisbon", subject="user", attribute="city")
    old = ExistingCard(
        id=7, subject="user", attribute="city", type="fact", text="User lives in Porto"
    )
    assert decide_supersede(draft, [old]).supersedes == (7,)


def test_the_index_stores_the_draft_it_is_given_as_a_card_of_it(database: Database) -> None:
    # The shared database holds MiniLM's vectors: the hashing embedder under its name.
    embedder = HashingEmbedder(name=MINILM_NAME)
    store = CardStore(database, model=embedder.name, dimension=embedder.dimension)
    index = CardIndex(store, embedder)
    draft = CardDraft(type="fact", text="User's shape test card", tags=["t"], topic="shape")
    [card] = index.add("card-shape-user", [draft])
    assert isinstance(card, CardDraft)
    assert card.model_dump(include=set(CardDraft.model_fields), exclude={"observed_at"}) == (
        draft.model_dump(exclude={"observed_at"})
    )
    store.delete("card-shape-user")

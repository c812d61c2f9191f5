"""``Memory.remember``: a fact the user asked to keep, as a plain card found by search."""

import pytest

from memory import ConfigurationError, Memory, Settings
from retrieval import MINILM_NAME, HashingEmbedder
from storage import Database, InvalidInputError


@pytest.fixture
def memory(database: Database) -> Memory:
    return Memory(database, Settings(), embedder=HashingEmbedder(name=MINILM_NAME))


def test_a_remembered_fact_is_an_unpinned_card_that_search_finds(
    memory: Memory, user_id: str
) -> None:
    card = memory.remember(user_id=user_id, text="  I am allergic to penicillin. ", topic="health")

    assert (card.type, card.text, card.topic, card.pinned) == (
        "fact", "I am allergic to penicillin.", "health", False
    )  # fmt: skip
    assert card.source_message_ids == []  # said to a tool, not in a conversation
    assert memory.search(user_id=user_id, query="penicillin")[0].card.id == card.id
    assert memory.pins(user_id=user_id) == []
    assert memory.remember(user_id=user_id, text="I am allergic to penicillin.").id == card.id
    assert memory.forget(user_id=user_id, card_id=card.id).cards == 1


def test_bad_text_is_refused_and_nothing_is_stored(memory: Memory, user_id: str) -> None:
    with pytest.raises(ValueError, match="needs a text"):
        memory.remember(user_id=user_id, text="   ")
    with pytest.raises(InvalidInputError):
        memory.remember(user_id=user_id, text="a\x00b")
    with pytest.raises(InvalidInputError, match="one string"):
        memory.remember(user_id=user_id, text="x", tags="one")  # type: ignore[arg-type]
    assert memory.search(user_id=user_id, query="x") == []


def test_with_long_term_memory_off_it_says_so(database: Database, user_id: str) -> None:
    memory = Memory(database, Settings(cards={"enabled": False}))
    with pytest.raises(ConfigurationError, match="disabled"):
        memory.remember(user_id=user_id, text="kept?")

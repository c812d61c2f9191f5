"""Ranking lives in retrieval: storage reads candidates and vectors, and never calls back up.

A search's query is embedded by retrieval (on its own thread when the user's vectors are held,
so the statement still runs meanwhile), never from inside a storage function; storage's card
API takes no function to call; importing storage loads nothing of retrieval.
"""

import inspect
import subprocess
import sys
import typing
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import pytest

from retrieval import MINILM_DIMENSION, MINILM_NAME, CardDraft, CardIndex, CardQuery
from retrieval.embedder import HashingEmbedder
from storage import CardStore, Database

NOTES = ["We drink green tea in the garden.", "The garden shed needs paint.", "Tea at four."]
WEEK = (datetime(2025, 5, 1, tzinfo=UTC), datetime(2025, 5, 8, tzinfo=UTC))


class StackRecordingEmbedder(HashingEmbedder):
    """The hashing embedder, noting the modules of the frames every ``embed`` was called from."""

    def __init__(self) -> None:
        super().__init__(MINILM_DIMENSION, name=MINILM_NAME)
        self.callers: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.callers.append(
            [str(frame.frame.f_globals.get("__name__")) for frame in inspect.stack()[1:]]
        )
        return super().embed(texts)


@pytest.mark.parametrize(
    "request_", [CardQuery(k=2), CardQuery(k=2, during=WEEK)], ids=["plain", "window"]
)
def test_no_storage_frame_is_below_the_query_embedding(
    database: Database, user_id: str, request_: CardQuery
) -> None:
    embedder = StackRecordingEmbedder()
    index = CardIndex(CardStore(database, model=MINILM_NAME, dimension=MINILM_DIMENSION), embedder)
    index.add(user_id, [CardDraft(type="fact", text=text) for text in NOTES])
    embedder.callers.clear()

    first = index.search(user_id, "tea in the garden", request_)  # the vectors are loaded
    second = index.search(user_id, "tea in the garden", request_)  # ranked from held vectors

    assert first and [s.card.id for s in first] == [s.card.id for s in second]
    assert [s.score for s in first] == [s.score for s in second]
    assert len(embedder.callers) == 2
    for stack in embedder.callers:
        assert [m for m in stack if m == "storage" or m.startswith("storage.")] == []
        assert any(m.startswith("retrieval.") for m in stack)


def test_the_card_stores_methods_take_no_function() -> None:
    for name, method in inspect.getmembers(CardStore, inspect.isfunction):
        hints = typing.get_type_hints(method)
        for parameter, hint in hints.items():
            assert "Callable" not in str(hint) and hint is not Callable, (name, parameter)


def test_storage_imports_nothing_of_retrieval() -> None:
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, storage, storage.cards, storage.cards.queries, storage.cards.vectors; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'retrieval'))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert loaded.stdout.strip() == "[]"

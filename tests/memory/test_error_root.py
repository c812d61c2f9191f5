"""One exception root: every error stratamem raises on purpose is a ``StratamemError``, and the
facade's own argument checks raise the facade's own error (still what they raised before)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import memory
import retrieval
import storage
import storage.errors
from memory import InvalidArgumentError, Memory, Settings, StratamemError
from retrieval import MINILM_NAME, HashingEmbedder
from storage import Database, InvalidInputError


@pytest.mark.parametrize(
    "error",
    [
        storage.StorageError,
        storage.DatabaseUnavailableError,
        storage.InvalidInputError,
        storage.SessionErasedError,
        storage.EmbeddingModelMismatchError,
        retrieval.RetrievalError,
        retrieval.EmbeddingError,
        retrieval.EmbedderMismatchError,
        memory.ImportConflictError,
        memory.InvalidHistoryError,
        memory.LLMError,
        memory.InvalidArgumentError,
    ],
)
def test_every_layers_errors_are_stratamem_errors(error: type[Exception]) -> None:
    assert issubclass(error, StratamemError)


def test_the_root_and_the_user_facing_errors_are_one_class_each_from_memory() -> None:
    assert memory.StratamemError is storage.errors.StratamemError
    assert memory.StorageError is storage.StorageError
    assert memory.RetrievalError is retrieval.RetrievalError
    assert {"StratamemError", "StorageError", "RetrievalError", "InvalidArgumentError"} <= set(
        memory.__all__
    )


def test_the_facades_argument_error_is_caught_where_it_was_before() -> None:
    assert issubclass(InvalidArgumentError, InvalidInputError)
    assert issubclass(InvalidArgumentError, ValueError)


def test_the_root_imports_no_database_driver() -> None:
    # The root sits in the lowest layer, which memory.context (pure) reaches through
    # memory.errors: importing it must not load SQLAlchemy or a driver.
    code = (
        "import sys, storage.errors\n"
        "drivers = ('sqlalchemy', 'psycopg', 'pgvector', 'pgserver')\n"
        "print([name for name in drivers if name in sys.modules])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "[]"


@pytest.fixture(scope="module")
def root_database(database_url: str) -> Iterator[Database]:
    """This module's own handle on the shared database."""
    with Database.open(database_url) as opened:
        yield opened


@pytest.fixture
def mem(root_database: Database) -> Memory:
    settings = Settings(summary={"mode": "inline", "debounce_seconds": 0})
    return Memory(root_database, settings, embedder=HashingEmbedder(name=MINILM_NAME))


@pytest.mark.parametrize(
    ("call", "complaint"),
    [
        (lambda mem, user: mem.search(user_id=user, query=3), "query must be a string"),
        (lambda mem, user: mem.search(user_id=user, query="x", k=-1), "k must be"),
        (lambda mem, user: mem.search(user_id=user, query="x", tags="a"), "not one string"),
        (lambda mem, user: mem.search(user_id=user, query="\udfff"), "lone surrogate"),
        (lambda mem, user: mem.search(user_id=user, query="x", since="then"), "search filter"),
        (lambda mem, user: mem.pin(user_id=user, text=7), "must be a string"),
        (lambda mem, user: mem.pin(user_id=user, text="tea \x00"), "contains a NUL"),
        (lambda mem, user: mem.pin(user_id=user, text="tea", tags="a"), "not one string"),
        (lambda mem, user: mem.pin(user_id=user, text="  "), "needs a text"),
        (lambda mem, user: mem.remember(user_id=user, text="  "), "needs a text"),
        (lambda mem, user: mem.remember(user_id=user, text=7), "must be a string"),
        (
            lambda mem, user: mem.forget(user_id=user, card_id=1, session_id="s"),
            "not both",
        ),
    ],
)
def test_the_facades_own_argument_checks_raise_its_own_error_and_lose_nothing(
    mem: Memory, user_id: str, call: Callable[[Memory, str], Any], complaint: str
) -> None:
    kept = mem.pin(user_id=user_id, text="Prefers green tea")

    with pytest.raises(InvalidArgumentError, match=complaint) as raised:
        call(mem, user_id)

    assert isinstance(raised.value, InvalidInputError | ValueError)
    assert [card.id for card in mem.pins(user_id=user_id)] == [kept.id]
    assert [s.card.id for s in mem.search(user_id=user_id, query="green tea")] == [kept.id]

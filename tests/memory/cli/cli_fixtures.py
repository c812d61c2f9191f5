"""What the command tests share: a clean environment, and a ``Memory`` on the test database.

Plain functions, wrapped by a fixture in each test module: a ``conftest.py`` here would take
the module name ``conftest`` from the root one, which other tests import from.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from memory import Memory, Settings
from retrieval import MINILM_NAME, HashingEmbedder
from storage import Database

MemoryFactory = Callable[..., Memory]


def clean_environment(monkeypatch: pytest.MonkeyPatch, database_url: str) -> str:
    """No STRATAMEM_* or OPENAI_* variable of the machine leaks in; the database is the test's.

    Returns the database URL the commands will use.
    """
    for name in list(os.environ):
        if name.startswith(("STRATAMEM_", "OPENAI_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("STRATAMEM_DATABASE_URL", database_url)
    monkeypatch.setenv("COLUMNS", "160")
    return database_url


def memory_factory(database: Database) -> MemoryFactory:
    """Makes a ``Memory`` on ``database``, inline, with the fake embedder under MiniLM's name.

    The name is MiniLM's because the shared database records one embedding model for all tests
    (and a command opened with the default settings names MiniLM without loading it). The
    memories are never closed: closing one would close the shared database.
    """

    def make(**settings: object) -> Memory:
        chosen = {"summary": {"mode": "inline"}, **settings}
        return Memory(database, Settings(**chosen), embedder=HashingEmbedder(name=MINILM_NAME))

    return make

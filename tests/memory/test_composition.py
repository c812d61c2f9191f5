"""How the memory side is composed: each object takes what it uses in its constructor.

``LongTermMemory`` holds its ``MessageArchiver`` (no archiving mixin using attributes it does
not own), and the session's ``Preparer`` and ``Folding`` name their collaborators in their
signatures: none is handed the whole ``Parts`` bag the facade keeps.
"""

from __future__ import annotations

import inspect

from memory import Memory, Settings
from memory.longterm.archiving import MessageArchiver
from memory.longterm.long_term_memory import LongTermMemory
from retrieval import MINILM_NAME, HashingEmbedder
from storage import Database


def test_the_archiver_is_an_object_long_term_memory_holds_not_a_base_class() -> None:
    assert MessageArchiver not in LongTermMemory.__mro__
    assert LongTermMemory.__mro__ == (LongTermMemory, object)
    assert list(inspect.signature(MessageArchiver).parameters) == [
        "messages",
        "marks",
        "writer",
        "extractor",
    ]


def test_a_memory_archives_through_its_long_term_memorys_archiver(database: Database) -> None:
    # The shared database holds MiniLM's vectors: the hashing embedder under its name.
    mem = Memory(database, Settings(), embedder=HashingEmbedder(name=MINILM_NAME))
    longterm = mem._parts.longterm
    assert isinstance(longterm, LongTermMemory)
    assert isinstance(longterm.archiver, MessageArchiver)
    assert not hasattr(longterm, "archive_through")

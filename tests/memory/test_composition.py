"""How the memory side is composed: each object takes what it uses in its constructor.

``LongTermMemory`` holds its ``MessageArchiver`` (no archiving mixin using attributes it does
not own), and the session's ``Preparer`` and ``Folding`` name their collaborators in their
signatures: none is handed the whole ``Parts`` bag the facade keeps.
"""

from __future__ import annotations

import inspect
from typing import get_type_hints

from memory import Memory, Settings
from memory.jobs.consolidation import ConsolidationJobs
from memory.longterm.archiving import MessageArchiver
from memory.longterm.long_term_memory import LongTermMemory
from memory.session.folding import Folding
from memory.session.preparing import Preparer
from memory.session.wiring import Parts
from memory.session.writer import SessionWriter
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


def test_preparer_and_folding_name_their_collaborators_and_none_is_the_parts_bag() -> None:
    for built in (Preparer, Folding):
        parameters = inspect.signature(built).parameters
        hints = get_type_hints(built.__init__)
        assert "parts" not in parameters
        assert all(hint is not Parts for hint in hints.values())
    assert list(inspect.signature(Preparer).parameters) == [
        "settings",
        "folding",
        "recent",
        "writer",
        "counter",
        "history_budget",
        "fold_policy",
        "longterm",
        "llm_configured",
    ]
    assert set(inspect.signature(Folding).parameters) >= {
        "recent",
        "jobs",
        "consolidations",
        "raw_archiver",
        "archiver",
    }


def test_the_parts_bag_only_holds_what_was_wired() -> None:
    # What used data of other parts moved to the owner of that data.
    for moved in ("load_window", "new_message", "job_handlers"):
        assert not hasattr(Parts, moved)
    assert callable(SessionWriter.new_message)
    assert callable(Folding.load_window)
    assert callable(ConsolidationJobs.job_handlers)


def test_consolidation_jobs_take_the_archiver_and_extractor_not_long_term_memory() -> None:
    parameters = inspect.signature(ConsolidationJobs).parameters
    hints = get_type_hints(ConsolidationJobs.__init__)
    assert "longterm" not in parameters
    assert {"archiver", "extractor_for"} <= set(parameters)
    assert all(hint is not LongTermMemory for hint in hints.values())
    assert hints["archiver"] == MessageArchiver | None


def test_a_memory_s_jobs_archive_through_its_long_term_memory_s_archiver(
    database: Database,
) -> None:
    mem = Memory(database, Settings(), embedder=HashingEmbedder(name=MINILM_NAME))
    longterm = mem._parts.longterm
    assert isinstance(longterm, LongTermMemory)
    assert mem._parts.consolidations._archiver is longterm.archiver

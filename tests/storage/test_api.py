"""Pins the public names of the storage package and the shape of its records."""

import ast
from pathlib import Path

import pydantic
import pytest

import storage
from storage import NewMessage


def test_public_names() -> None:
    assert sorted(storage.__all__) == [
        "ArchiveMarks",
        "Card",
        "CardDraft",
        "CardFilter",
        "CardMatch",
        "CardStore",
        "CardType",
        "Database",
        "DatabaseUnavailableError",
        "EMBEDDING_DIM",
        "EmbeddingModelMismatchError",
        "Erased",
        "IdleSession",
        "IdleSweep",
        "InvalidInputError",
        "Job",
        "JobQueue",
        "MAX_CARD_KEY_CHARS",
        "MAX_CARD_TAGS",
        "MAX_CARD_TAG_CHARS",
        "MAX_CARD_TEXT_CHARS",
        "MAX_CARD_TOPIC_CHARS",
        "MAX_ID_LENGTH",
        "MIGRATIONS",
        "MessageAt",
        "MessageStore",
        "Migration",
        "NewCard",
        "NewMessage",
        "SessionErasedError",
        "StorageError",
        "StoredMessage",
        "StratamemError",
        "SummaryKind",
        "SummaryRecord",
        "SummaryStore",
        "Validator",
        "check_encodable",
        "check_text",
        "content_hash",
        "default_data_dir",
        "erase",
        "migrate",
    ]
    assert all(hasattr(storage, name) for name in storage.__all__)


def test_records_are_frozen_and_do_not_share_defaults() -> None:
    first = NewMessage(payload={"role": "user", "content": "a"}, role="user", tokens=1)
    second = NewMessage(payload={"role": "user", "content": "b"}, role="user", tokens=1)

    with pytest.raises(pydantic.ValidationError):
        first.tokens = 2  # type: ignore[misc]
    assert first.metadata == {} and first.metadata is not second.metadata


def test_storage_imports_nothing_from_the_layers_above() -> None:
    imported: set[str] = set()
    for source in Path(storage.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module.split(".")[0])

    assert "storage" in imported
    assert not imported & {"memory", "retrieval"}

"""What ``storage`` hands out (``from storage import Database``), loaded when first used."""

from storage.archive_marks import ArchiveMarks, IdleSession, IdleSweep
from storage.cards.store import (
    MAX_CARD_KEY_CHARS,
    MAX_CARD_TAG_CHARS,
    MAX_CARD_TAGS,
    MAX_CARD_TEXT_CHARS,
    MAX_CARD_TOPIC_CHARS,
    Card,
    CardDraft,
    CardFilter,
    CardMatch,
    CardStore,
    CardType,
    EmbeddingModelMismatchError,
    NewCard,
    content_hash,
)
from storage.engine import Database, default_data_dir
from storage.erasure import Erased, erase
from storage.errors import (
    DatabaseUnavailableError,
    InvalidInputError,
    SessionErasedError,
    StorageError,
    StratamemError,
)
from storage.inputs import MAX_ID_LENGTH, check_encodable, check_text
from storage.job_queue import JobQueue
from storage.messages.store import MessageStore, Validator
from storage.migrations import EMBEDDING_DIM, MIGRATIONS, Migration, migrate
from storage.records import (
    Job,
    MessageAt,
    NewMessage,
    StoredMessage,
    SummaryKind,
    SummaryRecord,
)
from storage.summaries import SummaryStore

__all__ = [
    "EMBEDDING_DIM",
    "MAX_CARD_KEY_CHARS",
    "MAX_CARD_TAGS",
    "MAX_CARD_TAG_CHARS",
    "MAX_CARD_TEXT_CHARS",
    "MAX_CARD_TOPIC_CHARS",
    "MAX_ID_LENGTH",
    "MIGRATIONS",
    "ArchiveMarks",
    "Card",
    "CardDraft",
    "CardFilter",
    "CardMatch",
    "CardStore",
    "CardType",
    "Database",
    "DatabaseUnavailableError",
    "EmbeddingModelMismatchError",
    "Erased",
    "IdleSession",
    "IdleSweep",
    "InvalidInputError",
    "Job",
    "JobQueue",
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

"""SQLAlchemy ORM models of the tables created by the migrations; private to storage."""

from datetime import datetime
from typing import Any

from pgvector.sqlalchemy import Vector
from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    ForeignKeyConstraint,
    Index,
    Integer,
    Text,
    UniqueConstraint,
    func,
)
from sqlalchemy import (
    text as sql_text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSON, JSONB, TIMESTAMP
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from storage.migrations import EMBEDDING_DIM
from storage.records import SummaryKind

__all__ = [
    "Base",
    "CardEmbeddingModelRow",
    "CardRow",
    "CardStatsRow",
    "CardTermCountRow",
    "CardTermRow",
    "JobRow",
    "MessageRow",
    "SessionRow",
    "SummaryRow",
]

# Every timestamp is timestamptz and defaults to the database clock, never the client's.
_Timestamp = TIMESTAMP(timezone=True)


class Base(DeclarativeBase):
    """Declarative base of the storage models; the migrations, not this metadata, own DDL."""


class SessionRow(Base):
    """A conversation, named by its user and the user's own session id.

    ``last_seq`` is the seq of its last message; ``last_active_at`` when it was appended, on the
    database clock (migration 12: the idle sweep's index).
    """

    __tablename__ = "sessions"
    __table_args__ = (Index("ix_sessions_last_active_at", "last_active_at"),)

    user_id: Mapped[str] = mapped_column(Text, primary_key=True)
    session_id: Mapped[str] = mapped_column(Text, primary_key=True)
    last_seq: Mapped[int] = mapped_column(BigInteger, server_default=sql_text("0"))
    created_at: Mapped[datetime] = mapped_column(_Timestamp, server_default=func.now())
    last_active_at: Mapped[datetime] = mapped_column(_Timestamp, server_default=func.now())


class MessageRow(Base):
    """One stored message (append-only), numbered by ``seq`` inside its session.

    ``payload`` and ``metadata`` are ``json``, not ``jsonb``: see ``storage.inputs``.
    """

    __tablename__ = "messages"
    __table_args__ = (
        ForeignKeyConstraint(
            ["user_id", "session_id"],
            ["sessions.user_id", "sessions.session_id"],
            name="fk_messages_session",
        ),
        Index("uq_messages_user_id_id", "user_id", "id", unique=True),
        Index(
            "uq_messages_session_client",
            "user_id",
            "session_id",
            "client_id",
            unique=True,
            postgresql_where=sql_text("client_id IS NOT NULL"),
        ),
    )

    user_id: Mapped[str] = mapped_column(Text, primary_key=True)
    session_id: Mapped[str] = mapped_column(Text, primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    # Unique (the sequence), but not the key: keys lead with user_id.
    id: Mapped[int] = mapped_column(
        BigInteger, server_default=sql_text("nextval('messages_id_seq'::regclass)")
    )
    role: Mapped[str] = mapped_column(Text)
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    tokens: Mapped[int] = mapped_column(Integer)
    client_id: Mapped[str | None] = mapped_column(Text)
    # ``metadata`` is reserved on declarative classes, hence the attribute name.
    meta: Mapped[dict[str, Any]] = mapped_column(
        "metadata", JSON, server_default=sql_text("'{}'::json")
    )
    created_at: Mapped[datetime] = mapped_column(_Timestamp, server_default=func.now())


class SummaryRow(Base):
    """The rolling summary of one session, versioned for compare-and-set updates."""

    __tablename__ = "session_summaries"
    __table_args__ = (
        CheckConstraint("kind IN ('llm', 'raw')", name="ck_session_summaries_kind"),
        ForeignKeyConstraint(
            ["user_id", "session_id"],
            ["sessions.user_id", "sessions.session_id"],
            name="fk_session_summaries_session",
        ),
    )

    user_id: Mapped[str] = mapped_column(Text, primary_key=True)
    session_id: Mapped[str] = mapped_column(Text, primary_key=True)
    content: Mapped[str] = mapped_column(Text)
    kind: Mapped[SummaryKind] = mapped_column(Text)
    boundary_seq: Mapped[int] = mapped_column(BigInteger)
    covered: Mapped[int] = mapped_column(Integer)
    version: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[datetime] = mapped_column(_Timestamp, server_default=func.now())


class CardRow(Base):
    """A long-term memory card of one user, with its embedding (migrations 5 and 8)."""

    __tablename__ = "cards"
    __table_args__ = (
        UniqueConstraint("user_id", "content_hash", name="uq_cards_user_content_hash"),
        CheckConstraint(
            "type IN ('fact', 'preference', 'task', 'event', 'profile', 'turn')",
            name="ck_cards_type",
        ),
        Index("ix_cards_user_session", "user_id", "session_id"),
        Index("ix_cards_user_type", "user_id", "type"),
        Index("ix_cards_user_observed", "user_id", "observed_at"),
        Index("ix_cards_user_occurred", "user_id", "occurred_at"),
        Index("ix_cards_user_pinned", "user_id", postgresql_where=sql_text("pinned")),
        Index(
            "ix_cards_user_current_ids",
            "user_id",
            "id",
            postgresql_where=sql_text("valid_to IS NULL"),
        ),
        Index(
            "ix_cards_user_subject_attribute",
            "user_id",
            "subject",
            "attribute",
            postgresql_where=sql_text("valid_to IS NULL AND subject IS NOT NULL"),
        ),
        Index(
            "uq_cards_user_turn_message",
            "user_id",
            "turn_message_id",
            unique=True,
            postgresql_where=sql_text("turn_message_id IS NOT NULL"),
        ),
        Index(
            "ix_cards_embedding_hnsw",
            "embedding",
            postgresql_using="hnsw",
            postgresql_ops={"embedding": "vector_cosine_ops"},
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    user_id: Mapped[str] = mapped_column(Text)
    type: Mapped[str] = mapped_column(Text)
    text: Mapped[str] = mapped_column(Text)
    topic: Mapped[str | None] = mapped_column(Text)
    tags: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default=sql_text("'{}'"))
    session_id: Mapped[str | None] = mapped_column(Text)
    source_message_ids: Mapped[list[int]] = mapped_column(
        ARRAY(BigInteger), server_default=sql_text("'{}'")
    )
    source_client_ids: Mapped[list[str]] = mapped_column(
        ARRAY(Text), server_default=sql_text("'{}'")
    )
    observed_at: Mapped[datetime] = mapped_column(_Timestamp, server_default=func.now())
    occurred_at: Mapped[datetime | None] = mapped_column(_Timestamp)
    valid_from: Mapped[datetime] = mapped_column(_Timestamp, server_default=func.now())
    valid_to: Mapped[datetime | None] = mapped_column(_Timestamp)
    # No foreign key: checking one on every delete would scan all users' cards.
    superseded_by: Mapped[int | None] = mapped_column(BigInteger)
    pinned: Mapped[bool] = mapped_column(server_default=sql_text("false"))
    content_hash: Mapped[str] = mapped_column(Text)
    # Migration 8: who or what the card is about, and which of its properties it sets.
    subject: Mapped[str | None] = mapped_column(Text)
    attribute: Mapped[str | None] = mapped_column(Text)
    # Migration 12: the message a turn card archives (one turn card per message).
    turn_message_id: Mapped[int | None] = mapped_column(BigInteger)
    embedding: Mapped[list[float]] = mapped_column(Vector(EMBEDDING_DIM))
    keyword_length: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(_Timestamp, server_default=func.now())


class CardTermRow(Base):
    """How often a keyword term occurs in a card; the keyword index, user first."""

    __tablename__ = "card_terms"
    __table_args__ = (Index("ix_card_terms_user_card", "user_id", "card_id"),)

    user_id: Mapped[str] = mapped_column(Text, primary_key=True)
    term: Mapped[str] = mapped_column(Text, primary_key=True)
    card_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    frequency: Mapped[int] = mapped_column(Integer)
    keyword_length: Mapped[int] = mapped_column(Integer)


class CardTermCountRow(Base):
    """How many of a user's cards hold a keyword term (its document frequency; migration 15)."""

    __tablename__ = "card_term_counts"

    user_id: Mapped[str] = mapped_column(Text, primary_key=True)
    term: Mapped[str] = mapped_column(Text, primary_key=True)
    cards: Mapped[int] = mapped_column(BigInteger)


class CardStatsRow(Base):
    """Per-user keyword statistics for BM25 (how many cards, how many terms in all), and the
    version of the user's current cards."""

    __tablename__ = "card_stats"

    user_id: Mapped[str] = mapped_column(Text, primary_key=True)
    cards: Mapped[int] = mapped_column(BigInteger)
    keyword_length: Mapped[int] = mapped_column(BigInteger)
    #: Changes with every write to the user's current cards (migration 10).
    version: Mapped[int] = mapped_column(
        BigInteger, server_default=sql_text("nextval('card_stats_version_seq')")
    )


class CardEmbeddingModelRow(Base):
    """The one embedding model whose vectors the cards table holds."""

    __tablename__ = "card_embedding_model"
    __table_args__ = (CheckConstraint("singleton", name="ck_card_embedding_model_singleton"),)

    singleton: Mapped[bool] = mapped_column(primary_key=True, server_default=sql_text("true"))
    name: Mapped[str] = mapped_column(Text)
    dimension: Mapped[int] = mapped_column(Integer)


class JobRow(Base):
    """A background job on one session, claimed by workers with ``FOR UPDATE SKIP LOCKED``."""

    __tablename__ = "jobs"
    __table_args__ = (
        CheckConstraint(
            "status IN ('pending', 'running', 'done', 'failed')", name="ck_jobs_status"
        ),
        Index(
            "uq_jobs_pending_kind_session",
            "user_id",
            "session_id",
            "kind",
            unique=True,
            postgresql_where=sql_text("status = 'pending'"),
        ),
        Index("ix_jobs_status_run_after", "status", "run_after"),
        Index(
            "ix_jobs_finished_updated_at",
            "updated_at",
            postgresql_where=sql_text("status IN ('done', 'failed')"),
        ),
    )

    user_id: Mapped[str] = mapped_column(Text, primary_key=True)
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(Text)
    session_id: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(Text, server_default=sql_text("'pending'"))
    run_after: Mapped[datetime] = mapped_column(_Timestamp, server_default=func.now())
    attempts: Mapped[int] = mapped_column(Integer, server_default=sql_text("0"))
    claimed_by: Mapped[str | None] = mapped_column(Text)
    lease_until: Mapped[datetime | None] = mapped_column(_Timestamp)
    last_error: Mapped[str | None] = mapped_column(Text)
    params: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default=sql_text("'{}'::jsonb"))
    created_at: Mapped[datetime] = mapped_column(_Timestamp, server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(_Timestamp, server_default=func.now())

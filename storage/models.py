"""SQLAlchemy ORM models of the tables created by the migrations; private to storage."""

from datetime import datetime
from typing import Any

from pgvector.sqlalchemy import Vector
from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    ForeignKey,
    Index,
    Integer,
    Text,
    UniqueConstraint,
    func,
)
from sqlalchemy import (
    text as sql_text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, TIMESTAMP
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from storage.migrations import EMBEDDING_DIM
from storage.records import SummaryKind

__all__ = ["Base", "CardRow", "JobRow", "MessageRow", "SessionRow", "SummaryRow"]

# Every timestamp is timestamptz and defaults to the database clock, never the client's.
_Timestamp = TIMESTAMP(timezone=True)


class Base(DeclarativeBase):
    """Declarative base of the storage models; the migrations, not this metadata, own DDL."""


class SessionRow(Base):
    """A conversation, owned by exactly one user; ``last_seq`` is the seq of its last message."""

    __tablename__ = "sessions"
    __table_args__ = (Index("ix_sessions_user_id", "user_id"),)

    id: Mapped[str] = mapped_column(Text, primary_key=True)
    user_id: Mapped[str] = mapped_column(Text)
    last_seq: Mapped[int] = mapped_column(BigInteger, server_default=sql_text("0"))
    created_at: Mapped[datetime] = mapped_column(_Timestamp, server_default=func.now())


class MessageRow(Base):
    """One stored message (append-only), numbered by ``seq`` inside its session."""

    __tablename__ = "messages"
    __table_args__ = (
        UniqueConstraint("session_id", "seq", name="uq_messages_session_seq"),
        Index(
            "uq_messages_session_client",
            "session_id",
            "client_id",
            unique=True,
            postgresql_where=sql_text("client_id IS NOT NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(Text, ForeignKey("sessions.id"))
    seq: Mapped[int] = mapped_column(BigInteger)
    role: Mapped[str] = mapped_column(Text)
    payload: Mapped[dict[str, Any]] = mapped_column(JSONB)
    tokens: Mapped[int] = mapped_column(Integer)
    client_id: Mapped[str | None] = mapped_column(Text)
    # ``metadata`` is reserved on declarative classes, hence the attribute name.
    meta: Mapped[dict[str, Any]] = mapped_column(
        "metadata", JSONB, server_default=sql_text("'{}'::jsonb")
    )
    created_at: Mapped[datetime] = mapped_column(_Timestamp, server_default=func.now())


class SummaryRow(Base):
    """The rolling summary of one session, versioned for compare-and-set updates."""

    __tablename__ = "session_summaries"
    __table_args__ = (CheckConstraint("kind IN ('llm', 'raw')", name="ck_session_summaries_kind"),)

    session_id: Mapped[str] = mapped_column(Text, ForeignKey("sessions.id"), primary_key=True)
    content: Mapped[str] = mapped_column(Text)
    kind: Mapped[SummaryKind] = mapped_column(Text)
    boundary_seq: Mapped[int] = mapped_column(BigInteger)
    covered: Mapped[int] = mapped_column(Integer)
    version: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[datetime] = mapped_column(_Timestamp, server_default=func.now())


class CardRow(Base):
    """A long-term memory card of one user, with its embedding."""

    __tablename__ = "cards"
    __table_args__ = (
        UniqueConstraint("user_id", "content_hash", name="uq_cards_user_content_hash"),
        Index("ix_cards_user_id", "user_id"),
        Index(
            "ix_cards_embedding_hnsw",
            "embedding",
            postgresql_using="hnsw",
            postgresql_ops={"embedding": "vector_cosine_ops"},
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    user_id: Mapped[str] = mapped_column(Text)
    session_id: Mapped[str | None] = mapped_column(Text, ForeignKey("sessions.id"))
    text: Mapped[str] = mapped_column(Text)
    type: Mapped[str] = mapped_column(Text)
    topic: Mapped[str | None] = mapped_column(Text)
    tags: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default=sql_text("'{}'"))
    source_message_ids: Mapped[list[int]] = mapped_column(
        ARRAY(BigInteger), server_default=sql_text("'{}'")
    )
    valid: Mapped[bool] = mapped_column(server_default=sql_text("true"))
    superseded_by: Mapped[int | None] = mapped_column(BigInteger, ForeignKey("cards.id"))
    pinned: Mapped[bool] = mapped_column(server_default=sql_text("false"))
    content_hash: Mapped[str] = mapped_column(Text)
    embedding: Mapped[list[float]] = mapped_column(Vector(EMBEDDING_DIM))
    created_at: Mapped[datetime] = mapped_column(_Timestamp, server_default=func.now())


class JobRow(Base):
    """A background job on one session, claimed by workers with ``FOR UPDATE SKIP LOCKED``."""

    __tablename__ = "jobs"
    __table_args__ = (
        CheckConstraint(
            "status IN ('pending', 'running', 'done', 'failed')", name="ck_jobs_status"
        ),
        Index(
            "uq_jobs_pending_kind_session",
            "kind",
            "session_id",
            unique=True,
            postgresql_where=sql_text("status = 'pending'"),
        ),
        Index("ix_jobs_status_run_after", "status", "run_after"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(Text)
    user_id: Mapped[str] = mapped_column(Text)
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

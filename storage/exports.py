"""Everything one user has, read in one consistent snapshot, for an export (``memory.transfer``).

``read_user`` yields the user's sessions (each with its messages, summary and archive mark),
then cards (each with its sources named by session and seq, not by stored id, so they can be
mapped to the messages an import stores), then items. One ``REPEATABLE READ`` read-only
transaction: a write made meanwhile is in the export whole or not at all.
"""

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text

from storage.cards.records import Card
from storage.cards.rows import card_of, qualified
from storage.engine import Database
from storage.inputs import check_id
from storage.messages.reads import messages_after
from storage.records import StoredMessage, SummaryRecord
from storage.summaries import read_summary

__all__ = ["ExportedCard", "ExportedItem", "ExportedSession", "read_user"]


@dataclass(frozen=True, slots=True)
class ExportedSession:
    """A session with everything stored of it.

    Attributes:
        session_id: Its id.
        created_at: When it was started.
        messages: Every message, in order.
        summary: Its rolling summary, if any.
        archived_seq: How far its messages were archived as cards (``None``: never).
    """

    session_id: str
    created_at: datetime
    messages: list[StoredMessage]
    summary: SummaryRecord | None
    archived_seq: int | None


@dataclass(frozen=True, slots=True)
class ExportedCard:
    """A card, with its sources as ``(session_id, seq)`` of the messages it was made from."""

    card: Card
    sources: list[tuple[str, int]]


@dataclass(frozen=True, slots=True)
class ExportedItem:
    """An item of a framework store, with the texts it is indexed by (path -> text)."""

    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    texts: dict[str, str]
    created_at: datetime
    updated_at: datetime


def read_user(
    database: Database, user_id: str
) -> Iterator[ExportedSession | ExportedCard | ExportedItem]:
    """Yield everything of the user: sessions (by id), then cards (by id), then items (by
    namespace and key), from one snapshot.

    Raises:
        InvalidInputError: ``user_id`` is not usable.
    """
    check_id("user_id", user_id)
    params = {"user_id": user_id}
    with database.transaction() as connection:
        connection.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"))
        sessions = connection.execute(
            text(
                "SELECT s.session_id, s.created_at, a.archived_seq FROM sessions AS s "
                "LEFT JOIN archive_marks AS a USING (user_id, session_id) "
                "WHERE s.user_id = :user_id ORDER BY s.session_id"
            ),
            params,
        ).all()
        for row in sessions:
            yield ExportedSession(
                session_id=row.session_id,
                created_at=row.created_at,
                messages=messages_after(connection, user_id, row.session_id, 0),
                summary=read_summary(connection, user_id, row.session_id),
                archived_seq=row.archived_seq,
            )
        cards = connection.execute(
            text(
                f"SELECT {qualified('c')}, (SELECT coalesce(json_agg(json_build_array("
                "m.session_id, m.seq) ORDER BY m.session_id, m.seq), '[]') FROM messages AS m "
                "WHERE m.user_id = c.user_id AND m.id = ANY(c.source_message_ids)) AS sources "
                "FROM cards AS c WHERE c.user_id = :user_id ORDER BY c.id"
            ),
            params,
        )
        for row in cards:
            sources = _decoded(row.sources)
            yield ExportedCard(card_of(row), [(str(s), int(seq)) for s, seq in sources])
        items = connection.execute(
            text(
                "SELECT namespace, key, value, texts, created_at, updated_at FROM store_items "
                "WHERE user_id = :user_id ORDER BY namespace, key"
            ),
            params,
        )
        for row in items:
            yield ExportedItem(
                namespace=tuple(row.namespace),
                key=row.key,
                value=_decoded(row.value),
                texts=_decoded(row.texts),
                created_at=row.created_at,
                updated_at=row.updated_at,
            )


def _decoded(value: Any) -> Any:
    """A ``json`` column's value (psycopg decodes it; another driver may hand text)."""
    return json.loads(value) if isinstance(value, str) else value

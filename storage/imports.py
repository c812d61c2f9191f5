"""Storing an export into a user, in one transaction: all of it or nothing (``memory.transfer``).

Messages get new ids (ids are never reused), so whatever refers to a message by id is mapped:
an imported card's sources are the ids of the imported messages it was made from (named in the
export by session and seq), as every card made from messages must carry (``storage.erasure``).
Cards keep their validity; their supersede links are mapped to the imported cards.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.types import BigInteger, Text

from storage.cards.records import NewCard, content_hash
from storage.cards.rows import unit_vector, vector_literal
from storage.cards.term_counts import count_terms
from storage.engine import Database
from storage.errors import ImportConflictError, InvalidInputError
from storage.inputs import check_id, check_text
from storage.items.store import ItemIndexing, ItemKey, encode_item, lock_namespaces, put_item
from storage.messages.appends import insert_messages, message_row
from storage.records import NewMessage, SummaryKind

__all__ = [
    "CardImport",
    "ImportCounts",
    "ItemImport",
    "SessionImport",
    "SummaryImport",
    "store_user",
]


@dataclass(frozen=True, slots=True)
class SummaryImport:
    """A session's rolling summary as exported."""

    content: str
    kind: SummaryKind
    boundary_seq: int
    covered: int
    version: int
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class SessionImport:
    """A session to store: its messages in order (seq 1, 2, ...), summary and archive mark."""

    session_id: str
    created_at: datetime
    messages: Sequence[NewMessage]
    summary: SummaryImport | None = None
    archived_seq: int | None = None


@dataclass(frozen=True, slots=True)
class CardImport:
    """A card to store (``card.source_message_ids`` is ignored: ``sources`` are mapped).

    Attributes:
        card: The card, with its embedding and terms computed by the caller.
        sources: The ``(session_id, seq)`` of each message it was made from, all imported.
        valid_from: When it became valid.
        valid_to: When it stopped being valid, if it did.
        superseded_by: The position, in the import's cards, of the card that replaced it.
        created_at: When it was first stored.
    """

    card: NewCard
    sources: Sequence[tuple[str, int]] = ()
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    superseded_by: int | None = None
    created_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class ItemImport:
    """An item of a framework store to store (the user is the import's)."""

    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    indexing: ItemIndexing | None
    created_at: datetime
    updated_at: datetime


@dataclass(slots=True)
class ImportCounts:
    """What an import stored, by kind (cards merged into identical ones are not counted)."""

    sessions: int = 0
    messages: int = 0
    summaries: int = 0
    cards: int = 0
    items: int = 0
    merged_cards: int = field(default=0)


_CARD = text(
    """
    INSERT INTO cards (
        user_id, type, text, topic, tags, session_id, source_message_ids, source_client_ids,
        observed_at, occurred_at, valid_from, valid_to, pinned, content_hash, embedding,
        keyword_length, subject, attribute, created_at
    ) VALUES (
        :user_id, :type, :text, :topic, :tags, :session_id, :message_ids, :client_ids,
        coalesce(:observed_at, now()), :occurred_at, coalesce(:valid_from, :observed_at, now()),
        :valid_to, :pinned, :hash, CAST(:embedding AS vector), :keyword_length, :subject,
        :attribute, coalesce(:created_at, now())
    ) ON CONFLICT (user_id, content_hash) DO NOTHING RETURNING id
    """
).bindparams(
    bindparam("tags", type_=ARRAY(Text)),
    bindparam("message_ids", type_=ARRAY(BigInteger)),
    bindparam("client_ids", type_=ARRAY(Text)),
)


def store_user(
    database: Database,
    user_id: str,
    sessions: Sequence[SessionImport],
    cards: Sequence[CardImport],
    items: Sequence[ItemImport],
    *,
    merge: bool = False,
) -> ImportCounts:
    """Store an export into ``user_id`` in one transaction.

    Without ``merge`` the user must have nothing stored (no session, card or item); with it,
    only the imported sessions must be new to the user, a card identical to one the user has
    (same type and text) merges into it (keeping the user's), and an item replaces the user's.

    Raises:
        ImportConflictError: The user has data (without ``merge``), or already has one of the
            sessions; nothing is stored.
        InvalidInputError: Something cannot be stored (an id, a message, a card source or a
            supersede link that names nothing imported); nothing is stored.
    """
    check_id("user_id", user_id)
    counts = ImportCounts()
    with database.transaction() as connection:
        # One import of a user at a time: the emptiness check holds until the commit.
        connection.execute(
            text("SELECT pg_advisory_xact_lock(hashtextextended(:key, 17))"),
            {"key": f"import:{user_id}"},
        )
        _check_target(connection, user_id, [s.session_id for s in sessions], merge=merge)
        message_ids: dict[tuple[str, int], int] = {}
        for imported in sessions:
            message_ids.update(_store_session(connection, user_id, imported))
            counts.sessions += 1
            counts.messages += len(imported.messages)
            counts.summaries += imported.summary is not None
        card_ids, merged = _store_cards(connection, user_id, cards, message_ids, counts)
        _link_cards(connection, user_id, cards, card_ids, merged)
        lock_namespaces(connection, [ItemKey(user_id, i.namespace, i.key) for i in items])
        for item in items:
            where = ItemKey(user_id, item.namespace, item.key)
            put_item(
                connection,
                where,
                encode_item(where, item.value),
                item.indexing,
                created_at=item.created_at,
                updated_at=item.updated_at,
            )
            counts.items += 1
    return counts


def _check_target(
    connection: Connection, user_id: str, session_ids: Sequence[str], *, merge: bool
) -> None:
    params = {"user_id": user_id, "sessions": list(session_ids)}
    if not merge:
        has = connection.execute(
            text(
                "SELECT EXISTS (SELECT FROM sessions WHERE user_id = :user_id) "
                "OR EXISTS (SELECT FROM cards WHERE user_id = :user_id) "
                "OR EXISTS (SELECT FROM store_items WHERE user_id = :user_id)"
            ),
            params,
        ).scalar_one()
        if has:
            raise ImportConflictError(
                f"user {user_id[:64]!r} already has data; import into another user, forget "
                "this one first, or merge into it"
            )
        return
    taken = connection.execute(
        text(
            "SELECT session_id FROM sessions WHERE user_id = :user_id "
            "AND session_id = ANY(CAST(:sessions AS text[])) ORDER BY session_id LIMIT 1"
        ),
        params,
    ).scalar_one_or_none()
    if taken is not None:
        raise ImportConflictError(
            f"user {user_id[:64]!r} already has a session {taken[:64]!r}: a merge adds "
            "sessions, it never appends to one"
        )


def _store_session(
    connection: Connection, user_id: str, imported: SessionImport
) -> dict[tuple[str, int], int]:
    """Store one session; the stored id of each of its messages by (session, seq)."""
    session_id = imported.session_id
    check_id("session_id", session_id)
    connection.execute(
        text(
            "INSERT INTO sessions (user_id, session_id, created_at) "
            "VALUES (:user_id, :session_id, :created_at)"
        ),
        {"user_id": user_id, "session_id": session_id, "created_at": imported.created_at},
    )
    rows = [message_row(index, message) for index, message in enumerate(imported.messages)]
    stored = insert_messages(connection, user_id, session_id, 0, rows) if rows else []
    summary = imported.summary
    if summary is not None:
        check_text("summary", summary.content)
        connection.execute(
            text(
                "INSERT INTO session_summaries (user_id, session_id, content, kind, "
                "boundary_seq, covered, version, updated_at) VALUES (:user_id, :session_id, "
                ":content, :kind, :boundary_seq, :covered, :version, :updated_at)"
            ),
            {
                "user_id": user_id,
                "session_id": session_id,
                "content": summary.content,
                "kind": summary.kind,
                "boundary_seq": summary.boundary_seq,
                "covered": summary.covered,
                "version": summary.version,
                "updated_at": summary.updated_at,
            },
        )
    if imported.archived_seq is not None:
        connection.execute(
            text(
                "INSERT INTO archive_marks (user_id, session_id, archived_seq) "
                "VALUES (:user_id, :session_id, :seq)"
            ),
            {"user_id": user_id, "session_id": session_id, "seq": imported.archived_seq},
        )
    return {(session_id, message.seq): message.id for message in stored}


def _store_cards(
    connection: Connection,
    user_id: str,
    cards: Sequence[CardImport],
    message_ids: dict[tuple[str, int], int],
    counts: ImportCounts,
) -> tuple[list[int], set[int]]:
    """Store the cards in order (ids follow the export's order): each one's stored id, and
    the positions of those the user had already (a merge)."""
    ids: list[int] = []
    terms_added = 0
    distinct_terms: list[str] = []
    merged: set[int] = set()
    for position, imported in enumerate(cards):
        card = imported.card
        try:
            sources = [message_ids[source] for source in imported.sources]
        except KeyError as missing:
            raise InvalidInputError(
                f"card {position} names a source message {missing.args[0]!r} that is not imported"
            ) from None
        key = content_hash(card.type, card.text)
        check_text(f"card {position} text", card.text)
        row = connection.execute(
            _CARD,
            {
                "user_id": user_id,
                "type": card.type,
                "text": card.text,
                "topic": card.topic,
                "tags": card.tags,
                "session_id": card.session_id,
                "message_ids": sources,
                "client_ids": card.source_client_ids,
                "observed_at": card.observed_at,
                "occurred_at": card.occurred_at,
                "valid_from": imported.valid_from,
                "valid_to": imported.valid_to,
                "pinned": card.pinned,
                "hash": key,
                "embedding": vector_literal(unit_vector(card.embedding)),
                "keyword_length": sum(card.terms.values()),
                "subject": card.subject,
                "attribute": card.attribute,
                "created_at": imported.created_at,
            },
        ).first()
        if row is None:  # the user has this card already (a merge): it stays as it is
            ids.append(
                connection.execute(
                    text("SELECT id FROM cards WHERE user_id = :user_id AND content_hash = :h"),
                    {"user_id": user_id, "h": key},
                ).scalar_one()
            )
            merged.add(position)
            counts.merged_cards += 1
            continue
        ids.append(int(row.id))
        counts.cards += 1
        if card.terms:
            connection.execute(
                text(
                    "INSERT INTO card_terms (user_id, term, card_id, frequency, keyword_length) "
                    "SELECT :user_id, t.term, :card_id, t.frequency, :length "
                    "FROM unnest(CAST(:terms AS text[]), CAST(:freqs AS int[])) "
                    "AS t(term, frequency)"
                ),
                {
                    "user_id": user_id,
                    "card_id": row.id,
                    "length": sum(card.terms.values()),
                    "terms": list(card.terms),
                    "freqs": list(card.terms.values()),
                },
            )
            terms_added += sum(card.terms.values())
            distinct_terms += card.terms
    if counts.cards:
        # The keyword statistics, and a new card version (``storage.cards.vectors``).
        connection.execute(
            text(
                "INSERT INTO card_stats (user_id, cards, keyword_length) VALUES (:u, :c, :t) "
                "ON CONFLICT (user_id) DO UPDATE SET cards = card_stats.cards + excluded.cards, "
                "keyword_length = card_stats.keyword_length + excluded.keyword_length, "
                # The proposed row's own new version (its column default): no function call
                # in the update arm, which Citus requires (storage.citus).
                "version = excluded.version"
            ),
            {"u": user_id, "c": counts.cards, "t": terms_added},
        )
        count_terms(connection, user_id, distinct_terms)
    return ids, merged


def _link_cards(
    connection: Connection,
    user_id: str,
    cards: Sequence[CardImport],
    ids: Sequence[int],
    merged: set[int],
) -> None:
    """Point each stored card at the imported card that superseded it (a card the user had
    already keeps its own links)."""
    links = []
    for position, imported in enumerate(cards):
        target = imported.superseded_by
        if target is None or position in merged:
            continue
        if not 0 <= target < len(ids) or target == position:
            raise InvalidInputError(f"card {position} is superseded by no imported card")
        links.append({"user_id": user_id, "id": ids[position], "by": ids[target]})
    if links:
        connection.execute(
            text("UPDATE cards SET superseded_by = :by WHERE user_id = :user_id AND id = :id"),
            links,
        )

"""``Overview``: what the inspector page (``stratamem ui``) reads, each a short indexed query.

Users and sessions found by id, a session's numbers, a user's cards by type and page, the
cards of supersede chains, where source messages are. Reads only: every change the page makes
goes through ``Memory``. Every query but the two searches by id is scoped by one user.
"""

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import text

from storage.cards.records import Card
from storage.cards.rows import CARD_COLUMNS, card_of, qualified
from storage.engine import Database
from storage.inputs import check_id
from storage.records import Record

__all__ = ["CardCount", "MessagePlace", "Overview", "SessionOverview", "UserOverview"]


class UserOverview(Record):
    """A user as the list of users shows them.

    Attributes:
        user_id: the user.
        sessions: how many sessions they have.
        messages: how many messages their sessions hold.
        last_active_at: when their last message was stored (``None`` without sessions).
        pins: how many pinned cards they have.
    """

    user_id: str
    sessions: int
    messages: int
    last_active_at: datetime | None
    pins: int


class SessionOverview(Record):
    """A session's numbers: messages, activity, and its summary's version and boundary.

    Attributes:
        user_id: the user.
        session_id: the session.
        messages: how many messages it holds (its last seq: messages are never deleted alone).
        created_at: when it began.
        last_active_at: when its last message was stored.
        summary_version: its summary's version (0 without a summary).
        summary_boundary: the seq of the last message its summary covers (0 without one).
        summary_kind: ``llm`` or ``raw``; ``None`` without a summary.
    """

    user_id: str
    session_id: str
    messages: int
    created_at: datetime
    last_active_at: datetime
    summary_version: int
    summary_boundary: int
    summary_kind: str | None


class CardCount(Record):
    """How many cards of one type a user has: in all, current (not superseded), pinned."""

    type: str
    cards: int
    current: int
    pinned: int


class MessagePlace(Record):
    """Where a stored message is: its session and seq."""

    id: int
    session_id: str
    seq: int


_SESSION_COLUMNS = (
    "s.user_id, s.session_id, s.last_seq AS messages, s.created_at, s.last_active_at, "
    "coalesce(b.version, 0) AS summary_version, coalesce(b.boundary_seq, 0) AS summary_boundary, "
    "b.kind AS summary_kind"
)
_SESSIONS = (
    f"SELECT {_SESSION_COLUMNS} FROM sessions AS s LEFT JOIN session_summaries AS b "
    "ON b.user_id = s.user_id AND b.session_id = s.session_id"
)
# An id search is a case-insensitive substring, with no pattern characters to escape.
_MATCHES = "(:q = '' OR strpos(lower({column}), lower(:q)) > 0)"


class Overview:
    """Reads for the inspector page; a user's rows are only ever read with their id."""

    def __init__(self, database: Database) -> None:
        self._database = database

    def users(self, search: str = "", *, limit: int = 50) -> list[UserOverview]:
        """Users whose id contains ``search`` (all when empty), most recently active first.

        A user with pins and no session is listed too.
        """
        sql = (
            "WITH s AS (SELECT user_id, count(*) AS sessions, sum(last_seq) AS messages, "
            "max(last_active_at) AS last_active_at FROM sessions "
            f"WHERE {_MATCHES.format(column='user_id')} GROUP BY user_id), "
            "p AS (SELECT user_id, count(*) AS pins FROM cards WHERE pinned "
            f"AND {_MATCHES.format(column='user_id')} GROUP BY user_id) "
            "SELECT coalesce(s.user_id, p.user_id) AS user_id, coalesce(s.sessions, 0) AS "
            "sessions, coalesce(s.messages, 0) AS messages, s.last_active_at, "
            "coalesce(p.pins, 0) AS pins FROM s FULL JOIN p ON p.user_id = s.user_id "
            "ORDER BY s.last_active_at DESC NULLS LAST, 1 LIMIT :limit"
        )
        with self._database.reading() as connection:
            rows = connection.execute(text(sql), {"q": search, "limit": limit}).all()
        return [UserOverview(**row._mapping) for row in rows]

    def sessions_named(self, search: str, *, limit: int = 50) -> list[SessionOverview]:
        """Sessions of any user whose id contains ``search``, most recently active first."""
        if not search:
            return []
        sql = (
            f"{_SESSIONS} WHERE {_MATCHES.format(column='s.session_id')} "
            "ORDER BY s.last_active_at DESC LIMIT :limit"
        )
        with self._database.reading() as connection:
            rows = connection.execute(text(sql), {"q": search, "limit": limit}).all()
        return [SessionOverview(**row._mapping) for row in rows]

    def sessions(self, user_id: str, *, limit: int = 200) -> list[SessionOverview]:
        """The user's sessions, most recently active first."""
        check_id("user_id", user_id)
        sql = f"{_SESSIONS} WHERE s.user_id = :user_id ORDER BY s.last_active_at DESC LIMIT :limit"
        with self._database.reading() as connection:
            rows = connection.execute(text(sql), {"user_id": user_id, "limit": limit}).all()
        return [SessionOverview(**row._mapping) for row in rows]

    def session(self, user_id: str, session_id: str) -> SessionOverview | None:
        """One session's numbers, or ``None`` when the user has no such session."""
        check_id("user_id", user_id)
        check_id("session_id", session_id)
        sql = f"{_SESSIONS} WHERE s.user_id = :user_id AND s.session_id = :session_id"
        with self._database.reading() as connection:
            row = connection.execute(
                text(sql), {"user_id": user_id, "session_id": session_id}
            ).one_or_none()
        return None if row is None else SessionOverview(**row._mapping)

    def card_counts(self, user_id: str) -> list[CardCount]:
        """How many cards the user has of each type they have, by type name."""
        check_id("user_id", user_id)
        sql = (
            "SELECT type, count(*) AS cards, count(*) FILTER (WHERE valid_to IS NULL) AS "
            "current, count(*) FILTER (WHERE pinned) AS pinned FROM cards "
            "WHERE user_id = :user_id GROUP BY type ORDER BY type"
        )
        with self._database.reading() as connection:
            rows = connection.execute(text(sql), {"user_id": user_id}).all()
        return [CardCount(**row._mapping) for row in rows]

    def cards(
        self, user_id: str, *, card_type: str | None, limit: int, offset: int = 0
    ) -> list[Card]:
        """The user's cards (of one type when given), newest first, one page."""
        check_id("user_id", user_id)
        where = "user_id = :user_id"
        params: dict[str, Any] = {"user_id": user_id, "limit": limit, "offset": offset}
        if card_type is not None:
            where += " AND type = :type"
            params["type"] = card_type
        sql = (
            f"SELECT {CARD_COLUMNS} FROM cards WHERE {where} "
            "ORDER BY id DESC LIMIT :limit OFFSET :offset"
        )
        with self._database.reading() as connection:
            return [card_of(row) for row in connection.execute(text(sql), params)]

    def chained_cards(self, user_id: str, *, limit: int = 500) -> list[Card]:
        """The user's cards in a supersede chain (replaced, or replacing one), by id."""
        check_id("user_id", user_id)
        sql = (
            f"SELECT {CARD_COLUMNS} FROM cards WHERE user_id = :user_id AND "
            "(superseded_by IS NOT NULL OR id IN (SELECT superseded_by FROM cards "
            "WHERE user_id = :user_id AND superseded_by IS NOT NULL)) ORDER BY id LIMIT :limit"
        )
        with self._database.reading() as connection:
            rows = connection.execute(text(sql), {"user_id": user_id, "limit": limit})
            return [card_of(row) for row in rows]

    def chain_of(self, user_id: str, card_id: int) -> list[Card]:
        """The card and every card its supersede chain links it to, either way, by id.

        A chain with a cycle (a bug the page shows) still ends: each card is read once.
        """
        check_id("user_id", user_id)
        sql = (
            "WITH RECURSIVE linked(id, superseded_by) AS (SELECT id, superseded_by FROM cards "
            "WHERE user_id = :user_id AND id = :card_id UNION "
            "SELECT c.id, c.superseded_by FROM cards AS c JOIN linked AS l "
            "ON c.user_id = :user_id AND (c.superseded_by = l.id OR c.id = l.superseded_by)) "
            f"SELECT {qualified('c')} FROM cards AS c JOIN linked USING (id) "
            "WHERE c.user_id = :user_id ORDER BY c.id"
        )
        with self._database.reading() as connection:
            rows = connection.execute(text(sql), {"user_id": user_id, "card_id": card_id})
            return [card_of(row) for row in rows]

    def card_texts(self, user_id: str, card_ids: Sequence[int]) -> dict[int, str]:
        """The texts of the user's cards ``card_ids`` (those still stored), by id."""
        check_id("user_id", user_id)
        if not card_ids:
            return {}
        sql = "SELECT id, text FROM cards WHERE user_id = :user_id AND id = ANY(:ids)"
        with self._database.reading() as connection:
            rows = connection.execute(
                text(sql), {"user_id": user_id, "ids": sorted(set(card_ids))}
            ).all()
        return {row.id: row.text for row in rows}

    def message_places(self, user_id: str, message_ids: Sequence[int]) -> dict[int, MessagePlace]:
        """Where each of the user's messages ``message_ids`` is (those still stored), by id."""
        check_id("user_id", user_id)
        if not message_ids:
            return {}
        sql = "SELECT id, session_id, seq FROM messages WHERE user_id = :user_id AND id = ANY(:ids)"
        with self._database.reading() as connection:
            rows = connection.execute(
                text(sql), {"user_id": user_id, "ids": sorted(set(message_ids))}
            ).all()
        return {row.id: MessagePlace(**row._mapping) for row in rows}

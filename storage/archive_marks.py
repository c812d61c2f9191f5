"""``ArchiveMarks``: how far each session's messages were archived as cards."""

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import text

from storage.engine import Database
from storage.erasure import lock_source
from storage.inputs import check_id
from storage.records import StoredMessage

__all__ = ["IDLE_SWEEP_OVERLAP_SECONDS", "ArchiveMarks", "IdleSession", "IdleSweep"]

#: How far back of its last cutoff a sweep looks again. A session's ``last_active_at`` is the
#: clock when its append updated the row, and the append commits right after; a sweep that
#: ran between the two did not see it. Looking this far back again finds it next time.
IDLE_SWEEP_OVERLAP_SECONDS = 300.0

#: Where a worker's first sweep starts: every session's activity is later.
_BEGINNING = datetime(1, 1, 1, tzinfo=UTC)

_CUTOFF = text("SELECT now() - make_interval(secs => :idle_seconds)")

# Sessions that went quiet between :since and :cutoff and are not archived through their last
# message. An index range scan on last_active_at (migration 12), the mark by its key: the rows
# read are the sessions active in that interval, however many sessions went quiet before it.
_IDLE_SESSIONS = text(
    "SELECT s.user_id, s.session_id, s.last_seq, s.last_active_at "
    "FROM sessions AS s "
    "LEFT JOIN archive_marks AS a "
    "  ON a.user_id = s.user_id AND a.session_id = s.session_id "
    "WHERE s.last_active_at >= :since AND s.last_active_at < :cutoff "
    "  AND s.last_seq > coalesce(a.archived_seq, 0) "
    "ORDER BY s.last_active_at "
    "LIMIT :limit"
)


@dataclass(frozen=True, slots=True)
class IdleSession:
    """A session nobody wrote to for a while whose last messages are not archived yet."""

    user_id: str
    session_id: str
    last_seq: int


@dataclass(frozen=True, slots=True)
class IdleSweep:
    """What one look for idle sessions found, and where the next look starts.

    Attributes:
        sessions: the idle sessions not archived yet, the longest quiet first.
        next_since: what to pass as ``since`` next time: every session that went quiet
            before it was looked at (less ``IDLE_SWEEP_OVERLAP_SECONDS``, looked at again).
    """

    sessions: list[IdleSession]
    next_since: datetime


class ArchiveMarks:
    """The seq through which each session's messages are archived (0 before the first)."""

    def __init__(self, database: Database) -> None:
        self._database = database

    def get(self, user_id: str, session_id: str) -> int:
        """The seq through which the session is archived; 0 when nothing is."""
        check_id("user_id", user_id)
        check_id("session_id", session_id)
        with self._database.reading() as connection:
            found = connection.execute(
                text(
                    "SELECT archived_seq FROM archive_marks "
                    "WHERE user_id = :user_id AND session_id = :session_id"
                ),
                {"user_id": user_id, "session_id": session_id},
            ).scalar_one_or_none()
        return int(found or 0)

    def advance(self, user_id: str, session_id: str, through: StoredMessage) -> int:
        """Record the session archived through message ``through``; a mark never moves back.

        Only while the session still holds ``through`` as it was read (``storage.erasure``):
        a mark never outlives an erasure, nor lands in a session started again.

        Returns:
            The mark now stored.

        Raises:
            SessionErasedError: The session no longer holds ``through``; nothing was stored.
        """
        check_id("user_id", user_id)
        check_id("session_id", session_id)
        with self._database.transaction() as connection:
            lock_source(connection, user_id, session_id, through.seq, through.id)
            stored = connection.execute(
                text(
                    "INSERT INTO archive_marks (user_id, session_id, archived_seq) "
                    "VALUES (:user_id, :session_id, :seq) "
                    "ON CONFLICT (user_id, session_id) DO UPDATE "
                    "SET archived_seq = greatest(archive_marks.archived_seq, :seq) "
                    "RETURNING archived_seq"
                ),
                {"user_id": user_id, "session_id": session_id, "seq": through.seq},
            ).scalar_one()
        return int(stored)

    def idle_sessions(
        self, idle_seconds: float, *, limit: int = 100, since: datetime | None = None
    ) -> IdleSweep:
        """Sessions that got no message for ``idle_seconds`` and are not archived through
        their last one, among those whose last message came at ``since`` or later.

        A session's activity is when its last message was stored, on the database clock (a
        client ``timestamp`` of an imported message is when it was said, not activity). The
        longest quiet first, at most ``limit``. With ``since`` from the last sweep's
        ``next_since`` a sweep reads only the sessions that went quiet since then; without
        it, every session that ever went quiet (a worker's first sweep).
        """
        with self._database.reading() as connection:
            cutoff: datetime = connection.execute(
                _CUTOFF, {"idle_seconds": idle_seconds}
            ).scalar_one()
            rows = connection.execute(
                _IDLE_SESSIONS,
                {"since": since or _BEGINNING, "cutoff": cutoff, "limit": limit},
            ).all()
        found = [IdleSession(str(row[0]), str(row[1]), int(row[2])) for row in rows]
        # A full batch: the rest, from the last one found on, is the next sweep's.
        swept = rows[-1][3] if len(rows) >= limit else cutoff
        overlap = timedelta(seconds=IDLE_SWEEP_OVERLAP_SECONDS)
        return IdleSweep(found, max(swept - overlap, since or _BEGINNING))

"""``ArchiveMarks``: how far each session's messages were archived as cards."""

from dataclasses import dataclass

from sqlalchemy import text

from storage.engine import Database
from storage.erasure import lock_source
from storage.inputs import check_id
from storage.records import StoredMessage

__all__ = ["ArchiveMarks", "IdleSession"]

# Sessions whose newest message is older than the idle time and not archived yet. One statement
# for every session: the newest message is found by the messages' key (user, session, seq =
# last_seq), the mark by its key (user, session); the sessions table is read once.
_IDLE_SESSIONS = text(
    "SELECT s.user_id, s.session_id, s.last_seq "
    "FROM sessions AS s "
    "JOIN messages AS m "
    "  ON m.user_id = s.user_id AND m.session_id = s.session_id AND m.seq = s.last_seq "
    "LEFT JOIN archive_marks AS a "
    "  ON a.user_id = s.user_id AND a.session_id = s.session_id "
    "WHERE s.last_seq > coalesce(a.archived_seq, 0) "
    "  AND m.created_at < now() - make_interval(secs => :idle_seconds) "
    "ORDER BY m.created_at "
    "LIMIT :limit"
)


@dataclass(frozen=True, slots=True)
class IdleSession:
    """A session nobody wrote to for a while whose last messages are not archived yet."""

    user_id: str
    session_id: str
    last_seq: int


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
        with self._database.transaction() as session:
            lock_source(session.connection(), user_id, session_id, through.seq, through.id)
            stored = session.execute(
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

    def idle_sessions(self, idle_seconds: float, *, limit: int = 100) -> list[IdleSession]:
        """Sessions whose newest message is older than ``idle_seconds`` and not archived.

        The message's time is its ``created_at`` (a client ``timestamp`` when one was given), on
        the database clock. The oldest first, at most ``limit``: a sweep takes the rest next time.
        """
        with self._database.reading() as connection:
            rows = connection.execute(
                _IDLE_SESSIONS, {"idle_seconds": idle_seconds, "limit": limit}
            ).all()
        return [IdleSession(str(row[0]), str(row[1]), int(row[2])) for row in rows]

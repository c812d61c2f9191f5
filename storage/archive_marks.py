"""``ArchiveMarks``: how far each session's messages were archived as cards."""

from sqlalchemy import text

from storage.engine import Database
from storage.inputs import check_id

__all__ = ["ArchiveMarks"]


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

    def advance(self, user_id: str, session_id: str, seq: int) -> int:
        """Record the session archived through ``seq``; a mark never moves back.

        Returns:
            The mark now stored.
        """
        check_id("user_id", user_id)
        check_id("session_id", session_id)
        with self._database.transaction() as session:
            stored = session.execute(
                text(
                    "INSERT INTO archive_marks (user_id, session_id, archived_seq) "
                    "VALUES (:user_id, :session_id, :seq) "
                    "ON CONFLICT (user_id, session_id) DO UPDATE "
                    "SET archived_seq = greatest(archive_marks.archived_seq, :seq) "
                    "RETURNING archived_seq"
                ),
                {"user_id": user_id, "session_id": session_id, "seq": seq},
            ).scalar_one()
        return int(stored)

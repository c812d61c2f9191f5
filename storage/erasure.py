"""``erase_conversations``: a user's sessions deleted for real (messages, summaries, jobs)."""

from typing import Any

from sqlalchemy import text

from storage.engine import Database
from storage.inputs import check_id

__all__ = ["erase_conversations"]

# Children before the sessions they reference.
_TABLES = ("jobs", "archive_marks", "session_summaries", "messages", "sessions")


def erase_conversations(database: Database, user_id: str, session_id: str | None = None) -> int:
    """Delete one session of the user, or (``session_id`` None) every session, in one transaction.

    Messages, rolling summaries, jobs (pending, running or done), archive marks and the sessions
    themselves go;
    cards are the card store's (``CardStore.delete``).

    Returns:
        How many messages were deleted.

    Raises:
        InvalidInputError: An id is not usable.
    """
    check_id("user_id", user_id)
    where = "user_id = :user_id"
    params: dict[str, Any] = {"user_id": user_id}
    if session_id is not None:
        check_id("session_id", session_id)
        where += " AND session_id = :session_id"
        params["session_id"] = session_id
    deleted = 0
    with database.transaction() as session:
        for table in _TABLES:
            result = session.execute(text(f"DELETE FROM {table} WHERE {where}"), params)
            if table == "messages":
                deleted = result.rowcount  # type: ignore[attr-defined]
    return deleted

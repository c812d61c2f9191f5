"""``erase_conversations``: a user's sessions deleted for real (messages, summaries, jobs)."""

from dataclasses import dataclass
from typing import Any

from sqlalchemy import text

from storage.engine import Database
from storage.inputs import check_id

__all__ = ["ErasedConversations", "erase_conversations"]

# Children before the sessions they reference.
_TABLES = ("jobs", "archive_marks", "session_summaries", "messages", "sessions")


@dataclass(frozen=True, slots=True)
class ErasedConversations:
    """How many rows one erasure deleted, so a caller can say what is gone.

    Attributes:
        messages: stored messages.
        summaries: rolling summaries (at most one per session).
        jobs: background jobs, whatever their state (pending, running, done, failed).
        sessions: the sessions themselves.
    """

    messages: int
    summaries: int
    jobs: int
    sessions: int


def erase_conversations(
    database: Database, user_id: str, session_id: str | None = None
) -> ErasedConversations:
    """Delete one session of the user, or (``session_id`` None) every session, in one transaction.

    Messages, rolling summaries, jobs (pending, running or done), archive marks and the sessions
    themselves go; cards are the card store's (``CardStore.delete``).

    Returns:
        How many messages, summaries, jobs and sessions were deleted.

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
    deleted: dict[str, int] = {}
    with database.transaction() as session:
        for table in _TABLES:
            result = session.execute(text(f"DELETE FROM {table} WHERE {where}"), params)
            deleted[table] = result.rowcount  # type: ignore[attr-defined]  # a CursorResult
    return ErasedConversations(
        messages=deleted["messages"],
        summaries=deleted["session_summaries"],
        jobs=deleted["jobs"],
        sessions=deleted["sessions"],
    )

"""``SummaryStore``: one rolling summary per session, updated by compare-and-set."""

from typing import Any

from sqlalchemy import Row, func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from storage.engine import Database
from storage.errors import SessionOwnershipError
from storage.models import SessionRow, SummaryRow
from storage.records import SummaryKind, SummaryRecord

__all__ = ["SummaryStore"]


class SummaryStore:
    """The rolling summaries of user-owned sessions.

    Concurrent writers never overwrite each other: ``save`` succeeds only for the writer that
    read the current version, so two workers on one session cannot both fold the same messages.
    """

    def __init__(self, database: Database) -> None:
        """Create a store on an open database.

        Args:
            database: The database to use.
        """
        self._database = database

    def get(self, user_id: str, session_id: str) -> SummaryRecord | None:
        """Return the session's summary, or None when it has none (or does not exist).

        Raises:
            SessionOwnershipError: The session belongs to another user.
        """
        summaries = SummaryRow.__table__
        # One Core query for the owner and the summary: it runs on every request.
        query = (
            select(SessionRow.user_id, summaries)
            .select_from(SessionRow)
            .outerjoin(summaries, summaries.c.session_id == SessionRow.id)
            .where(SessionRow.id == session_id)
        )
        with self._database.reading() as connection:
            row = connection.execute(query).one_or_none()
        if row is None:
            return None
        if row.user_id != user_id:
            raise SessionOwnershipError(session_id)
        return None if row.version is None else _record(row)

    def save(
        self,
        user_id: str,
        session_id: str,
        *,
        content: str,
        kind: SummaryKind,
        boundary_seq: int,
        covered: int,
        expected_version: int,
    ) -> SummaryRecord | None:
        """Store a new summary if the stored one is still at ``expected_version``.

        Args:
            user_id: The user the session belongs to.
            session_id: The session.
            content: The summary text; it replaces the previous one.
            kind: ``"llm"`` for a model-written summary, ``"raw"`` for the raw archive fallback.
            boundary_seq: The seq of the last message the summary covers.
            covered: How many messages the summary covers.
            expected_version: The version read before summarising; 0 when there was none.

        Returns:
            The stored summary (its version is ``expected_version + 1``), or None when another
            writer saved first; re-read and start over in that case.

        Raises:
            ValueError: ``boundary_seq`` is before the stored boundary.
            LookupError: The session does not exist.
            SessionOwnershipError: The session belongs to another user.
        """
        with self._database.transaction() as session:
            owner = _owner(session, session_id)
            if owner is None:
                raise LookupError(f"unknown session {session_id!r}")
            if owner != user_id:
                raise SessionOwnershipError(session_id)
            values = {
                "content": content,
                "kind": kind,
                "boundary_seq": boundary_seq,
                "covered": covered,
            }
            if expected_version == 0:
                row = session.scalar(
                    insert(SummaryRow)
                    .values(session_id=session_id, version=1, **values)
                    .on_conflict_do_nothing(index_elements=[SummaryRow.session_id])
                    .returning(SummaryRow)
                )
                return None if row is None else _record(row)
            current = session.get(SummaryRow, session_id)
            if (
                current is not None
                and current.version == expected_version
                and boundary_seq < current.boundary_seq
            ):
                raise ValueError(
                    f"summary boundary cannot go back from {current.boundary_seq} to {boundary_seq}"
                )
            row = session.scalar(
                update(SummaryRow)
                .where(
                    SummaryRow.session_id == session_id,
                    SummaryRow.version == expected_version,
                    # Checked again here: the read above may be stale by the time this runs.
                    SummaryRow.boundary_seq <= boundary_seq,
                )
                .values(version=SummaryRow.version + 1, updated_at=func.now(), **values)
                .returning(SummaryRow)
            )
            return None if row is None else _record(row)


def _owner(session: Session, session_id: str) -> str | None:
    """Return the user owning a session, or None when it does not exist."""
    return session.scalar(select(SessionRow.user_id).where(SessionRow.id == session_id))


def _record(row: SummaryRow | Row[Any]) -> SummaryRecord:
    """Turn an ORM row, or a row with the same columns, into the record callers see."""
    return SummaryRecord(
        session_id=row.session_id,
        content=row.content,
        kind=row.kind,
        boundary_seq=row.boundary_seq,
        covered=row.covered,
        version=row.version,
        updated_at=row.updated_at,
    )

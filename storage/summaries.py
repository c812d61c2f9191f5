"""``SummaryStore``: one rolling summary per session, updated by compare-and-set; the versions
it replaced are kept, the newest few per session (``summary_versions``)."""

from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Row, text

from storage.engine import Database
from storage.erasure import lock_source
from storage.errors import InvalidInputError
from storage.inputs import check_id, check_text
from storage.records import StoredMessage, SummaryKind, SummaryRecord

__all__ = ["KEPT_SUMMARY_VERSIONS", "SummaryStore", "SummaryVersion", "read_summary"]

#: Previous versions of a session's summary kept by default (the newest ones).
KEPT_SUMMARY_VERSIONS = 20

_COLUMNS = "user_id, session_id, content, kind, boundary_seq, covered, version, updated_at"
_SESSION = "user_id = :user_id AND session_id = :session_id"
_READ = text(f"SELECT {_COLUMNS} FROM session_summaries WHERE {_SESSION}")
_FIRST = text(
    "INSERT INTO session_summaries "
    "(user_id, session_id, version, content, kind, boundary_seq, covered) "
    "VALUES (:user_id, :session_id, 1, :content, :kind, :boundary_seq, :covered) "
    f"ON CONFLICT (user_id, session_id) DO NOTHING RETURNING {_COLUMNS}"
)
# The compare-and-set: only over ``expected_version``, and never back before the boundary
# (checked again here: the read before it may be stale by the time this runs).
_NEXT = text(
    "UPDATE session_summaries SET version = version + 1, updated_at = now(), "
    "content = :content, kind = :kind, boundary_seq = :boundary_seq, covered = :covered "
    f"WHERE {_SESSION} AND version = :expected_version AND boundary_seq <= :boundary_seq "
    f"RETURNING {_COLUMNS}"
)


class SummaryVersion(SummaryRecord):
    """A version of a session's summary that a newer one replaced.

    Attributes:
        replaced_at: when the newer version was stored (``updated_at`` is when this one was).
    """

    replaced_at: datetime


class SummaryStore:
    """The rolling summaries of users' sessions; a user only ever sees their own.

    Concurrent writers never overwrite each other: ``save`` succeeds only for the writer that
    read the current version, so two workers on one session cannot both fold the same messages.
    The version a ``save`` replaces is kept (``versions``), in the same transaction.
    """

    def __init__(self, database: Database, *, keep_versions: int = KEPT_SUMMARY_VERSIONS) -> None:
        """Create a store on an open database.

        Args:
            database: The database to use.
            keep_versions: How many replaced versions to keep per session (the newest); 0
                keeps none.
        """
        self._database = database
        self._keep_versions = keep_versions

    def get(self, user_id: str, session_id: str) -> SummaryRecord | None:
        """Return the session's summary, or None when it has none (or the user has no such session).

        Raises:
            InvalidInputError: An id is not usable.
        """
        _check_session(user_id, session_id)
        with self._database.reading() as connection:
            return read_summary(connection, user_id, session_id)

    def save(
        self,
        user_id: str,
        session_id: str,
        *,
        content: str,
        kind: SummaryKind,
        boundary: StoredMessage,
        covered: int,
        expected_version: int,
    ) -> SummaryRecord | None:
        """Store a new summary if the stored one is still at ``expected_version``.

        Args:
            user_id: The user the session belongs to.
            session_id: The session.
            content: The summary text; it replaces the previous one.
            kind: ``"llm"`` for a model-written summary, ``"raw"`` for the raw archive fallback.
            boundary: The last message the summary covers, as it was read: the summary is
                stored only while the session still holds it (``storage.erasure``), so a
                boundary never lies beyond the session's messages.
            covered: How many messages the summary covers.
            expected_version: The version read before summarising; 0 when there was none.

        Returns:
            The stored summary (its version is ``expected_version + 1``), or None when another
            writer saved first; re-read and start over in that case.

        Raises:
            InvalidInputError: An id is not usable, ``content`` holds a NUL or a lone
                surrogate, or ``boundary`` is before the stored boundary.
            SessionErasedError: The session does not hold ``boundary`` (a ``LookupError``):
                it was erased since it was read, or it is another session's message.
        """
        _check_session(user_id, session_id)
        check_text("summary content", content)
        boundary_seq = boundary.seq
        with self._database.transaction() as connection:
            lock_source(connection, user_id, session_id, boundary.seq, boundary.id)
            values = {
                "user_id": user_id,
                "session_id": session_id,
                "content": content,
                "kind": kind,
                "boundary_seq": boundary_seq,
                "covered": covered,
                "expected_version": expected_version,
            }
            if expected_version == 0:
                row = connection.execute(_FIRST, values).one_or_none()
                return None if row is None else _record(row)
            current = connection.execute(_READ, values).one_or_none()
            if (
                current is not None
                and current.version == expected_version
                and boundary_seq < current.boundary_seq
            ):
                raise InvalidInputError(
                    f"summary boundary cannot go back from {current.boundary_seq} to {boundary_seq}"
                )
            replaced = None if current is None else _record(current)
            row = connection.execute(_NEXT, values).one_or_none()
            if row is None:
                return None
            stored = _record(row)
            # The update matched ``expected_version``, and a version's content never changes:
            # the row read above is the one replaced when it has that version.
            if replaced is not None and replaced.version == expected_version:
                self._keep_replaced(connection, replaced)
            return stored

    def versions(self, user_id: str, session_id: str) -> list[SummaryVersion]:
        """The kept versions the session's summary had before its current one, newest first.

        Raises:
            InvalidInputError: An id is not usable.
        """
        _check_session(user_id, session_id)
        with self._database.reading() as connection:
            rows = connection.execute(
                text(
                    "SELECT user_id, session_id, content, kind, boundary_seq, covered, version, "
                    "updated_at, replaced_at FROM summary_versions "
                    "WHERE user_id = :user_id AND session_id = :session_id "
                    "ORDER BY version DESC"
                ),
                {"user_id": user_id, "session_id": session_id},
            ).all()
        return [SummaryVersion(**row._mapping) for row in rows]

    def _keep_replaced(self, connection: Connection, replaced: SummaryRecord) -> None:
        """Keep the version just replaced; drop the kept ones beyond the newest few."""
        if self._keep_versions <= 0:
            return
        where = {"user_id": replaced.user_id, "session_id": replaced.session_id}
        connection.execute(
            text(
                "INSERT INTO summary_versions (user_id, session_id, version, content, kind, "
                "boundary_seq, covered, updated_at) VALUES (:user_id, :session_id, :version, "
                ":content, :kind, :boundary_seq, :covered, :updated_at) "
                "ON CONFLICT DO NOTHING"
            ),
            replaced.model_dump(),
        )
        connection.execute(
            text(
                "DELETE FROM summary_versions WHERE user_id = :user_id "
                "AND session_id = :session_id AND version <= :oldest_dropped"
            ),
            where | {"oldest_dropped": replaced.version - self._keep_versions},
        )


def _check_session(user_id: str, session_id: str) -> None:
    """Raise ``InvalidInputError`` unless both ids are usable."""
    check_id("user_id", user_id)
    check_id("session_id", session_id)


def read_summary(connection: Connection, user_id: str, session_id: str) -> SummaryRecord | None:
    """The session's summary read on ``connection`` (ids already checked), or None."""
    row = connection.execute(_READ, {"user_id": user_id, "session_id": session_id}).one_or_none()
    return None if row is None else _record(row)


def _record(row: Row[Any]) -> SummaryRecord:
    """Turn a row of ``_COLUMNS`` into the record callers see."""
    return SummaryRecord(
        user_id=row.user_id,
        session_id=row.session_id,
        content=row.content,
        kind=row.kind,
        boundary_seq=row.boundary_seq,
        covered=row.covered,
        version=row.version,
        updated_at=row.updated_at,
    )

"""``ReportStore``: the reports of ``prepare`` kept per session, newest first (persistence only).

A kept report is made from the messages its request was assembled from (its recall query is the
user's words), so it is a derived write like a summary: ``keep`` locks the reports' sessions
(``FOR KEY SHARE``) and stores a report only while its session still holds the newest message
it was assembled from, under the same id (``storage.erasure``). A report of a session erased
since is left out, never stored. Each session keeps at most ``per_session`` reports, the newest.
"""

import itertools
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import text

from storage.driver import driver_autocommit
from storage.engine import Database
from storage.inputs import check_id

__all__ = ["KeptReport", "NewReport", "ReportStore", "ReportTokens"]


class ReportTokens(BaseModel):
    """The tokens of one kept report, by layer: what a chart of a session's requests needs.

    Attributes:
        id: the kept report's id (grows with every report kept).
        prepared_at: when the request was assembled.
        newest_seq: the seq of the newest message the request was assembled from.
        budget: the token budget the context had to fit.
        system, summary, memories, window, input: tokens per layer.
        total: the whole request as counted, reply priming included.
        dropped: how many parts the hard cap left out or shortened.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: int
    prepared_at: datetime
    newest_seq: int
    budget: int
    system: int
    summary: int
    memories: int
    window: int
    input: int
    total: int
    dropped: int


class KeptReport(ReportTokens):
    """A kept report: its tokens and the whole report (``ContextReport.to_dict``'s data).

    Attributes:
        user_id: the user.
        session_id: the session.
        report: the report as plain JSON data.
    """

    user_id: str
    session_id: str
    report: dict[str, Any] = Field(default_factory=dict)


class NewReport(BaseModel):
    """A report to keep: its request's session, the message it was assembled up to, the data.

    Attributes:
        user_id: the user.
        session_id: the session.
        prepared_at: when the request was assembled.
        newest_seq: the seq of the newest message the request was assembled from.
        newest_id: that message's id (checked against the stored one).
        report: ``ContextReport.to_dict()``; its ``budget``, ``tokens`` and ``dropped`` fill
            the columns a chart reads.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    user_id: str
    session_id: str
    prepared_at: datetime
    newest_seq: int
    newest_id: int
    report: dict[str, Any]


_TOKEN_COLUMNS = (
    "id, prepared_at, newest_seq, budget, system_tokens AS system, summary_tokens AS summary, "
    "memories_tokens AS memories, window_tokens AS window, input_tokens AS input, "
    "total_tokens AS total, dropped"
)

# The writes of ``keep`` run on the driver's connection (``storage.driver``): the writer thread
# keeps a report after every ``prepare``, and SQLAlchemy's execution cost more of its CPU than
# the statements' own client side.

# One row per report; a report whose session no longer holds its newest message (by seq and
# id) selects nothing and is not stored.
_INSERT = (
    "INSERT INTO request_reports (user_id, session_id, prepared_at, newest_seq, newest_id, "
    "budget, system_tokens, summary_tokens, memories_tokens, window_tokens, input_tokens, "
    "total_tokens, dropped, report) "
    "SELECT %(user_id)s, %(session_id)s, %(prepared_at)s, %(newest_seq)s, %(newest_id)s, "
    "%(budget)s, %(system)s, %(summary)s, %(memories)s, %(window)s, %(input)s, %(total)s, "
    "%(dropped)s, CAST(%(report)s AS json) "
    "WHERE EXISTS (SELECT FROM messages WHERE user_id = %(user_id)s "
    "AND session_id = %(session_id)s AND seq = %(newest_seq)s AND id = %(newest_id)s)"
)

_PRUNE = (
    "DELETE FROM request_reports WHERE user_id = %(user_id)s AND session_id = %(session_id)s "
    "AND id <= (SELECT id FROM request_reports WHERE user_id = %(user_id)s "
    "AND session_id = %(session_id)s ORDER BY id DESC OFFSET %(keep)s LIMIT 1)"
)

_HOLD_SESSIONS = (
    "SELECT 1 FROM sessions WHERE user_id = %(user_id)s "
    "AND session_id = ANY(CAST(%(sessions)s AS text[])) ORDER BY session_id FOR KEY SHARE"
)


class ReportStore:
    """Keeps the reports of ``prepare`` and reads them back, a user's only ever their own."""

    def __init__(self, database: Database) -> None:
        self._database = database

    def keep(self, reports: Sequence[NewReport], *, per_session: int) -> int:
        """Store reports in one transaction, then keep each session's newest ``per_session``.

        Returns:
            How many were stored (those of sessions erased since are left out).

        Raises:
            InvalidInputError: An id is not usable.
            StorageError: The database failed; nothing was stored.
        """
        if not reports:
            return 0
        for report in reports:
            check_id("user_id", report.user_id)
            check_id("session_id", report.session_id)
        sessions = sorted({(report.user_id, report.session_id) for report in reports})
        stored = 0
        with driver_autocommit(self._database) as connection, connection.transaction():
            # The sessions locked against erasure for this transaction, in one order (no
            # deadlock), one statement per user: on a distributed deployment each is a
            # single-shard query, and Citus runs no ``FOR KEY SHARE`` across shards
            # (storage.citus).
            for user_id, held in itertools.groupby(sessions, key=lambda pair: pair[0]):
                connection.execute(
                    _HOLD_SESSIONS, {"user_id": user_id, "sessions": [name for _, name in held]}
                )
            # After the locks, each statement sees what an erasure that held them first did.
            for report in reports:
                stored += connection.execute(_INSERT, _row(report)).rowcount
            for user_id, session_id in sessions:
                connection.execute(
                    _PRUNE, {"user_id": user_id, "session_id": session_id, "keep": per_session}
                )
        return stored

    def latest(
        self, user_id: str, session_id: str, *, limit: int, before: int | None = None
    ) -> list[KeptReport]:
        """The session's newest ``limit`` kept reports (older than id ``before``), newest first.

        Raises:
            InvalidInputError: An id is not usable.
        """
        where, params = _where(user_id, session_id, before)
        with self._database.reading() as connection:
            rows = connection.execute(
                text(
                    f"SELECT user_id, session_id, {_TOKEN_COLUMNS}, report FROM request_reports "
                    f"WHERE {where} ORDER BY id DESC LIMIT :limit"
                ),
                params | {"limit": limit},
            ).all()
        return [KeptReport(**row._mapping) for row in rows]

    def tokens(self, user_id: str, session_id: str, *, limit: int) -> list[ReportTokens]:
        """The tokens per layer of the session's newest ``limit`` kept reports, oldest first.

        Raises:
            InvalidInputError: An id is not usable.
        """
        where, params = _where(user_id, session_id, None)
        with self._database.reading() as connection:
            rows = connection.execute(
                text(
                    f"SELECT {_TOKEN_COLUMNS} FROM request_reports WHERE {where} "
                    "ORDER BY id DESC LIMIT :limit"
                ),
                params | {"limit": limit},
            ).all()
        return [ReportTokens(**row._mapping) for row in reversed(rows)]

    def count(self, user_id: str, session_id: str) -> int:
        """How many reports the session keeps.

        Raises:
            InvalidInputError: An id is not usable.
        """
        where, params = _where(user_id, session_id, None)
        with self._database.reading() as connection:
            counted = connection.scalar(
                text(f"SELECT count(*) FROM request_reports WHERE {where}"), params
            )
        return int(counted or 0)


def _where(user_id: str, session_id: str, before: int | None) -> tuple[str, dict[str, Any]]:
    check_id("user_id", user_id)
    check_id("session_id", session_id)
    where = "user_id = :user_id AND session_id = :session_id"
    params: dict[str, Any] = {"user_id": user_id, "session_id": session_id}
    if before is not None:
        where += " AND id < :before"
        params["before"] = before
    return where, params


def _row(report: NewReport) -> dict[str, Any]:
    """The statement's parameters for one report (its tokens read from the report's data)."""
    data = report.report
    tokens = data.get("tokens") or {}
    return {
        "user_id": report.user_id,
        "session_id": report.session_id,
        "prepared_at": report.prepared_at,
        "newest_seq": report.newest_seq,
        "newest_id": report.newest_id,
        "budget": int(data.get("budget", 0)),
        **{layer: int(tokens.get(layer, 0)) for layer in _LAYERS},
        "dropped": len(data.get("dropped") or ()),
        # ASCII escapes: a lone surrogate or a NUL in a query stays valid JSON text.
        "report": json.dumps(data, ensure_ascii=True, separators=(",", ":")),
    }


_LAYERS = ("system", "summary", "memories", "window", "input", "total")

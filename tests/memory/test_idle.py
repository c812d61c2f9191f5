"""The worker's idle work: the sweep of idle sessions reads only what went quiet since it last
looked, and finished jobs are deleted after their retention.

Each test has a database of its own (the sweep and the jobs table are global). Sessions go
quiet by having their last activity (``sessions.last_active_at``) moved into the past; nothing
waits on a clock. What a sweep reads is measured by running its statements again under
``EXPLAIN ANALYZE``: the rows of ``sessions`` its plan read.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from databases import own_database
from sqlalchemy import event, text

from memory import Memory, Settings
from memory.jobs.idle_work import IdleSessions
from memory.jobs.worker import CARDS, END_OF_SESSION
from retrieval import MINILM_NAME, HashingEmbedder
from storage import ArchiveMarks, Database, JobQueue

IDLE_SECONDS = 1_800.0
DAY = 86_400.0


@pytest.fixture
def idle_database(database: Database) -> Iterator[Database]:
    with own_database(database, "idle") as opened:
        yield opened


def add_sessions(
    database: Database, prefix: str, count: int, *, quiet_for: float, archived: bool
) -> None:
    """``count`` sessions of two messages each, last active ``quiet_for`` seconds ago, their
    archive mark at their last message (``archived``) or at none.

    Rows of the sessions table and the marks, without their messages: the sweep reads only
    those two tables, and a thousand sessions take a statement, not a thousand appends.
    """
    with database.transaction() as session:
        session.execute(
            text(
                "INSERT INTO sessions (user_id, session_id, last_seq, last_active_at) "
                "SELECT 'u', :prefix || n, 2, now() - make_interval(secs => :quiet_for) "
                "FROM generate_series(1, :count) AS n"
            ),
            {"prefix": prefix, "count": count, "quiet_for": quiet_for},
        )
        if archived:
            session.execute(
                text(
                    "INSERT INTO archive_marks (user_id, session_id, archived_seq) "
                    "SELECT 'u', :prefix || n, 2 FROM generate_series(1, :count) AS n"
                ),
                {"prefix": prefix, "count": count},
            )
        session.execute(text("ANALYZE sessions"))  # as autovacuum would


@contextmanager
def recorded(database: Database) -> Iterator[list[tuple[str, Any]]]:
    """The statements run on ``database`` meanwhile, with their parameters."""
    statements: list[tuple[str, Any]] = []

    def record(*args: Any) -> None:
        statements.append((args[2], args[3]))

    event.listen(database.engine, "before_cursor_execute", record)
    try:
        yield statements
    finally:
        event.remove(database.engine, "before_cursor_execute", record)


def sessions_read(database: Database, statements: list[tuple[str, Any]]) -> int:
    """How many rows of ``sessions`` the statements' plans read, run again under EXPLAIN."""
    total = 0
    with database.engine.connect() as connection:
        cursor = connection.connection.cursor()
        for statement, parameters in statements:
            cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, parameters)
            plan = cursor.fetchone()[0]
            total += _rows_of(json.loads(plan) if isinstance(plan, str) else plan, "sessions")
    return total


def _rows_of(value: Any, table: str) -> int:
    if isinstance(value, list):
        return sum(_rows_of(item, table) for item in value)
    if not isinstance(value, dict):
        return 0
    rows = 0
    if value.get("Relation Name") == table:
        read = value["Actual Rows"] + value.get("Rows Removed by Filter", 0)
        rows += read * value["Actual Loops"]
    return rows + sum(_rows_of(item, table) for item in value.values())


def queued(database: Database) -> set[str]:
    """The sessions with a pending end-of-session ``cards`` job."""
    with database.transaction() as session:
        rows = session.execute(
            text("SELECT session_id, params FROM jobs WHERE kind = :kind AND status = 'pending'"),
            {"kind": CARDS},
        ).all()
    return {row.session_id for row in rows if row.params.get(END_OF_SESSION)}


def test_a_sweep_reads_only_the_sessions_that_went_quiet_since_the_last_one(
    idle_database: Database,
) -> None:
    sweep = IdleSessions(ArchiveMarks(idle_database), JobQueue(idle_database), IDLE_SECONDS)
    add_sessions(idle_database, "archived-a", 1_000, quiet_for=3 * DAY, archived=True)
    add_sessions(idle_database, "open-a", 1, quiet_for=3 * DAY, archived=False)
    assert sweep() == 1  # the first sweep looks at every session that ever went quiet
    assert queued(idle_database) == {"open-a1"}

    reads = []
    for batch in "bc":
        # More archived sessions, quiet long ago; one that went quiet a minute ago; and one
        # that went quiet before the last sweep's cutoff but was not there when it looked
        # (its append committed after that sweep read).
        add_sessions(idle_database, f"archived-{batch}", 1_000, quiet_for=3 * DAY, archived=True)
        add_sessions(idle_database, f"open-{batch}", 1, quiet_for=IDLE_SECONDS + 60, archived=False)
        add_sessions(
            idle_database, f"late-{batch}", 1, quiet_for=IDLE_SECONDS + 120, archived=False
        )
        with recorded(idle_database) as statements:
            assert sweep() == 2
        reads.append(sessions_read(idle_database, statements))
        assert {f"open-{batch}1", f"late-{batch}1"} <= queued(idle_database)

    # With 2,000 and then 3,000 archived sessions, each sweep read the two that went quiet
    # since the sweep before, and (the second) the two before that, queued but not archived
    # yet, which went quiet within the overlap it looks back (``IDLE_SWEEP_OVERLAP_SECONDS``).
    assert reads == [2, 4]


def test_a_session_archived_meanwhile_or_still_active_is_not_queued(
    idle_database: Database,
) -> None:
    sweep = IdleSessions(ArchiveMarks(idle_database), JobQueue(idle_database), IDLE_SECONDS)
    sweep()
    add_sessions(idle_database, "ended", 1, quiet_for=IDLE_SECONDS + 60, archived=True)
    add_sessions(idle_database, "active", 1, quiet_for=60, archived=False)

    assert sweep() == 0
    assert queued(idle_database) == set()


def test_the_worker_deletes_finished_jobs_past_their_retention_when_idle(
    idle_database: Database,
) -> None:
    memory = Memory(
        idle_database,
        Settings(jobs={"done_retention_seconds": 3_600, "failed_retention_seconds": 7 * DAY}),
        embedder=HashingEmbedder(name=MINILM_NAME),
    )
    queue = JobQueue(idle_database, max_attempts=1)
    for session_id in ("old-done", "new-done", "old-failed"):
        queue.enqueue("other", "u", session_id)
        job = queue.claim("w", kinds=["other"])
        assert job is not None
        assert queue.fail(job, "boom") if "failed" in session_id else queue.complete(job)
    with idle_database.transaction() as session:
        session.execute(
            text(
                "UPDATE jobs SET updated_at = now() - interval '2 days' "
                "WHERE session_id IN ('old-done', 'old-failed')"
            )
        )

    memory.run_worker(until_idle=True)  # nothing to run: its idle work runs once

    with idle_database.transaction() as session:
        left = session.execute(text("SELECT session_id, status FROM jobs")).all()
    assert {(row.session_id, row.status) for row in left} == {
        ("new-done", "done"),
        ("old-failed", "failed"),  # failed two days ago: kept for a week
    }

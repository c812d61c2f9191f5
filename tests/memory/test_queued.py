"""A burst of requests on a session past its fold trigger queues one consolidation, not one each."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event, text

import memory.session.queued_jobs
from memory import Memory, Settings
from memory.session.queued_jobs import QueuedConsolidations
from storage import Database


class Clock:
    """Seconds that move only when the test says so."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_a_session_is_due_again_when_its_summary_moved_or_the_interval_passed() -> None:
    clock = Clock()
    queued = QueuedConsolidations(interval_seconds=5, clock=clock)

    assert queued.due("u", "s", 0)
    queued.queued("u", "s", 0)
    assert not queued.due("u", "s", 0)
    assert queued.due("u", "other", 0)  # sessions are apart
    assert queued.due("v", "s", 0)  # and so are users
    assert queued.due("u", "s", 1)  # a fold ran: its summary has a new version

    clock.now += 4.9
    assert not queued.due("u", "s", 0)
    clock.now += 0.1
    assert queued.due("u", "s", 0)  # a job that failed or waits for a retry is asked again


def test_the_oldest_sessions_are_forgotten_past_the_bound_and_erasure_forgets() -> None:
    queued = QueuedConsolidations(interval_seconds=5, max_sessions=2, clock=Clock())
    for session in ("a", "b", "c"):
        queued.queued("u", session, 0)

    assert queued.due("u", "a", 0)  # forgotten: queued again, which is always safe
    assert not queued.due("u", "c", 0)
    queued.forget("u", "c")
    assert queued.due("u", "c", 0)
    queued.forget("u")
    assert queued.due("u", "b", 0)


@pytest.fixture
def job_inserts(database: Database) -> Iterator[list[str]]:
    """Every statement that queues a job, as it runs."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().startswith("INSERT INTO jobs"):
            seen.append(statement)

    event.listen(database.engine, "before_cursor_execute", record)
    yield seen
    event.remove(database.engine, "before_cursor_execute", record)


def test_requests_past_the_trigger_queue_one_job_until_the_summary_moves(
    database: Database, job_inserts: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memory.session.queued_jobs, "monotonic", Clock())  # time stands still
    mem = Memory(
        database,
        Settings(
            context_window=4_000,
            max_output=500,
            cards={"enabled": False},
            summary={"mode": "background", "debounce_seconds": 0},
        ),
    )
    user_id, session_id = f"user-{uuid.uuid4()}", "s"
    filler = "the quick brown fox jumps over the lazy dog " * 3
    archived = 0
    for turn in range(30):  # past the trigger (half the history budget) well before the end
        context = mem.prepare(user_id=user_id, session_id=session_id, input=f"{turn}: {filler}")
        archived += context.report.archived
        mem.record(
            user_id=user_id,
            session_id=session_id,
            messages=[{"role": "assistant", "content": f"ok {turn}: {filler}"}],
        )

    assert len(job_inserts) == 1
    mem.run_worker(until_idle=True)  # the fold: the summary moves
    summary = mem.summary(user_id=user_id, session_id=session_id)
    assert summary is not None
    for turn in range(30, 45):
        context = mem.prepare(user_id=user_id, session_id=session_id, input=f"{turn}: {filler}")
        archived += context.report.archived
        mem.record(
            user_id=user_id,
            session_id=session_id,
            messages=[{"role": "assistant", "content": f"ok {turn}: {filler}"}],
        )

    # Once more for the new summary version, from each path: record's own fold check queued it
    # first (it skips only while a job is pending) and prepare's first request past the
    # trigger at this version merged with it. Still one job, and 15 requests queued 2 times.
    assert len(job_inserts) == 3
    with database.reading() as connection:
        pending = connection.execute(
            text("SELECT count(*) FROM jobs WHERE user_id = :u AND status = 'pending'"),
            {"u": user_id},
        ).scalar_one()
    assert pending == 1
    assert archived == 0  # no summary written by prepare itself (that, too, moves it)
    mem.run_worker(until_idle=True)
    history = mem.history(user_id=user_id, session_id=session_id)
    assert len(history) == 90  # nothing lost on the way

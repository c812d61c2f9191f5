"""Due jobs that no worker claims: ``record`` warns, at most so often, and never fails."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator

import pytest
from databases import own_database
from sqlalchemy import text

import memory.jobs.unclaimed
from memory import Memory, Settings
from memory.jobs.unclaimed import (
    CHECK_SECONDS,
    UNCLAIMED_WARNING_SECONDS,
    WARNING_REPEAT_SECONDS,
    UnclaimedJobs,
)
from storage import Database, JobQueue

LOGGER = "memory.jobs.unclaimed"


class Clock:
    """Seconds that move only when the test says so."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def opened(database: Database) -> Iterator[Database]:
    # A database of its own: the wait is over every user's jobs.
    with own_database(database, "unclaimed") as own:
        yield own


def due_ago(database: Database, seconds: float) -> None:
    with database.transaction() as connection:
        connection.execute(
            text(
                "UPDATE jobs SET run_after = now() - make_interval(secs => :seconds) "
                "WHERE status = 'pending'"
            ),
            {"seconds": seconds},
        )


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_the_first_check_comes_check_seconds_after_opening(
    opened: Database, caplog: pytest.LogCaptureFixture
) -> None:
    queue, clock = JobQueue(opened), Clock()
    queue.enqueue("cards", "u", "s")
    due_ago(opened, UNCLAIMED_WARNING_SECONDS + 5)  # waiting since before the opening
    caplog.set_level(logging.WARNING, logger=LOGGER)

    unclaimed = UnclaimedJobs(queue, clock=clock)
    unclaimed.check()
    clock.now += CHECK_SECONDS - 1
    unclaimed.check()
    assert warnings_of(caplog) == []  # not asked yet
    clock.now += 1
    unclaimed.check()
    assert len(warnings_of(caplog)) == 1


def test_a_job_due_a_minute_ago_and_unclaimed_is_a_warning_that_says_what_to_run(
    opened: Database, caplog: pytest.LogCaptureFixture
) -> None:
    queue, clock = JobQueue(opened), Clock()
    unclaimed = UnclaimedJobs(queue, clock=clock)
    caplog.set_level(logging.WARNING, logger=LOGGER)

    clock.now += CHECK_SECONDS
    unclaimed.check()  # nothing queued
    queue.enqueue("cards", "u", "s")
    clock.now += CHECK_SECONDS
    unclaimed.check()  # due, but only just
    assert warnings_of(caplog) == []

    due_ago(opened, UNCLAIMED_WARNING_SECONDS + 5)
    unclaimed.check()  # asked within CHECK_SECONDS of the last time: not asked
    assert warnings_of(caplog) == []
    clock.now += CHECK_SECONDS
    unclaimed.check()
    [warning] = warnings_of(caplog)
    assert "no worker is running" in warning
    assert "Memory.run_worker()" in warning and "stratamem worker" in warning

    clock.now += WARNING_REPEAT_SECONDS - 1
    unclaimed.check()
    assert len(warnings_of(caplog)) == 1  # not repeated for ten minutes
    clock.now += 1
    unclaimed.check()
    assert len(warnings_of(caplog)) == 2


def test_a_database_that_went_away_is_not_an_error_of_the_check(
    database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    with own_database(database, "unclaimed") as own:
        unclaimed = UnclaimedJobs(JobQueue(own), clock=clock)
    clock.now += CHECK_SECONDS
    unclaimed.check()  # asked, but the database is dropped: a debug line, no exception
    assert warnings_of(caplog) == []


def test_record_in_background_mode_warns_when_no_worker_runs_the_jobs(
    opened: Database, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    monkeypatch.setattr(memory.jobs.unclaimed, "monotonic", clock)
    caplog.set_level(logging.WARNING, logger=LOGGER)
    mem = Memory(opened, Settings(cards={"enabled": False}))
    try:
        JobQueue(opened).enqueue("consolidate", "someone", "s")
        due_ago(opened, UNCLAIMED_WARNING_SECONDS + 5)
        user = f"u-{uuid.uuid4().hex[:8]}"
        mem.record(user_id=user, session_id="s", messages=[{"role": "user", "content": "a"}])
        assert warnings_of(caplog) == []  # the Memory just opened: not asked yet

        clock.now += CHECK_SECONDS
        mem.record(user_id=user, session_id="s", messages=[{"role": "user", "content": "b"}])
        mem.record(user_id=user, session_id="s", messages=[{"role": "user", "content": "c"}])
        [warning] = warnings_of(caplog)  # once: the third record did not ask again
        assert "has waited 6" in warning
    finally:
        mem.close()


def test_record_in_inline_mode_does_not_ask(
    opened: Database, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    monkeypatch.setattr(memory.jobs.unclaimed, "monotonic", clock)
    caplog.set_level(logging.WARNING, logger=LOGGER)
    mem = Memory(opened, Settings(summary={"mode": "inline"}, cards={"enabled": False}))
    try:
        JobQueue(opened).enqueue("consolidate", "someone", "s")
        due_ago(opened, UNCLAIMED_WARNING_SECONDS + 5)
        clock.now += CHECK_SECONDS
        mem.record(user_id="u", session_id="s", messages=[{"role": "user", "content": "a"}])
        assert warnings_of(caplog) == []
    finally:
        mem.close()

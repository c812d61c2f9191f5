"""Tests of JobQueue: debounce, SKIP LOCKED claims, leases and fencing, backoff, giving up."""

import threading
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest
from databases import own_database
from sqlalchemy import text

from storage import Database, InvalidInputError, Job, JobQueue
from storage.job_queue import MAX_ERROR_CHARS


@pytest.fixture
def queue(database: Database) -> JobQueue:
    return JobQueue(database)


@pytest.fixture
def kind() -> str:
    """A job kind of its own, so a test never claims another test's jobs."""
    return f"kind-{uuid.uuid4()}"


def claim(queue: JobQueue, kind: str, **options: float) -> Job | None:
    return queue.claim("worker", kinds=[kind], **options)


def test_enqueue_is_debounced_per_kind_and_session(
    queue: JobQueue, kind: str, user_id: str
) -> None:
    assert queue.enqueue(kind, user_id, "s1") is True
    assert queue.enqueue(kind, user_id, "s1") is False
    assert queue.enqueue(kind, user_id, "s2") is True
    assert queue.enqueue(f"{kind}-other", user_id, "s1") is True

    assert queue.pending(kind) == 2
    assert queue.pending(f"{kind}-other") == 1


def test_enqueue_again_keeps_the_earlier_time_of_the_pending_job(
    queue: JobQueue, kind: str, user_id: str
) -> None:
    queue.enqueue(kind, user_id, "s1", delay_seconds=3600)
    queue.enqueue(kind, user_id, "s1", delay_seconds=7200)

    assert claim(queue, kind) is None

    queue.enqueue(kind, user_id, "s1", delay_seconds=0)
    queue.enqueue(kind, user_id, "s1", delay_seconds=3600)
    job = claim(queue, kind)
    assert job is not None
    assert (job.kind, job.user_id, job.session_id, job.attempts) == (kind, user_id, "s1", 1)
    assert claim(queue, kind) is None
    assert queue.pending(kind) == 0


def test_a_running_job_does_not_block_a_new_pending_one(
    queue: JobQueue, kind: str, user_id: str
) -> None:
    queue.enqueue(kind, user_id, "s1")
    running = claim(queue, kind)

    assert queue.enqueue(kind, user_id, "s1") is True

    again = claim(queue, kind)
    assert running is not None and again is not None
    assert again.id != running.id


def test_claim_skips_jobs_locked_by_another_worker(
    queue: JobQueue, database: Database, kind: str, user_id: str
) -> None:
    queue.enqueue(kind, user_id, "s1")
    queue.enqueue(kind, user_id, "s2")
    with database.engine.connect() as other_worker:
        locked = other_worker.execute(
            text("SELECT id FROM jobs WHERE kind = :kind AND session_id = 's1' FOR UPDATE"),
            {"kind": kind},
        ).scalar_one()

        job = claim(queue, kind)

        assert job is not None
        assert job.id != locked
        assert job.session_id == "s2"
        assert claim(queue, kind) is None
        other_worker.rollback()


def test_two_threads_claim_distinct_jobs(queue: JobQueue, kind: str, user_id: str) -> None:
    for n in range(20):
        queue.enqueue(kind, user_id, f"s{n}")
    start = threading.Barrier(2)
    claimed: dict[str, list[int]] = {"a": [], "b": []}

    def work(worker: str) -> None:
        start.wait()
        while (job := queue.claim(worker, kinds=[kind])) is not None:
            claimed[worker].append(job.id)
            queue.complete(job)

    threads = [threading.Thread(target=work, args=(w,)) for w in claimed]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    everything = claimed["a"] + claimed["b"]
    assert len(everything) == 20
    assert len(set(everything)) == 20
    assert queue.pending(kind) == 0


def test_job_with_an_expired_lease_is_claimed_again(
    queue: JobQueue, kind: str, user_id: str
) -> None:
    queue.enqueue(kind, user_id, "s1")
    first = queue.claim("dead worker", kinds=[kind], lease_seconds=-1)

    second = queue.claim("live worker", kinds=[kind], lease_seconds=300)

    assert first is not None and second is not None
    assert second.id == first.id
    assert second.attempts == 2
    assert queue.claim("third worker", kinds=[kind]) is None


@dataclass(frozen=True)
class JobState:
    """A job row as the tests look at it; ``wait`` is how long after its update it is due."""

    status: str
    attempts: int
    wait: timedelta
    last_error: str | None


def state(database: Database, job: Job) -> JobState:
    with database.engine.connect() as connection:
        row = connection.execute(
            text(
                "SELECT status, attempts, run_after - updated_at AS wait, last_error FROM jobs"
                " WHERE user_id = :user_id AND id = :id"
            ),
            {"user_id": job.user_id, "id": job.id},
        ).one()
    return JobState(row.status, row.attempts, row.wait, row.last_error)


def run_after(database: Database, job: Job) -> datetime:
    with database.engine.connect() as connection:
        due: datetime = connection.execute(
            text("SELECT run_after FROM jobs WHERE user_id = :user_id AND id = :id"),
            {"user_id": job.user_id, "id": job.id},
        ).scalar_one()
    return due


def make_due(database: Database, job: Job) -> None:
    """Move a job's time to now, as if its backoff had passed."""
    with database.engine.begin() as connection:
        connection.execute(
            text("UPDATE jobs SET run_after = now() WHERE user_id = :user_id AND id = :id"),
            {"user_id": job.user_id, "id": job.id},
        )


def claim_due(queue: JobQueue, database: Database, kind: str, previous: Job) -> Job:
    make_due(database, previous)
    job = claim(queue, kind)
    assert job is not None and job.id == previous.id
    return job


def test_complete_and_fail(queue: JobQueue, database: Database, kind: str, user_id: str) -> None:
    queue.enqueue(kind, user_id, "done")
    queue.enqueue(kind, user_id, "retried")
    jobs = {job.session_id: job for job in iter(lambda: claim(queue, kind), None)}
    assert set(jobs) == {"done", "retried"}

    assert queue.complete(jobs["done"]) is True
    assert queue.fail(jobs["retried"], "timeout") is True

    assert state(database, jobs["done"]).status == "done"
    assert queue.pending(kind) == 1
    retry = claim_due(queue, database, kind, jobs["retried"])
    assert (retry.session_id, retry.attempts) == ("retried", 2)
    assert claim(queue, kind) is None


def test_retry_delay_doubles_up_to_its_cap(database: Database) -> None:
    queue = JobQueue(database, retry_base_seconds=30, retry_max_seconds=200)

    delays = [queue.retry_delay(attempts).total_seconds() for attempts in range(1, 6)]

    assert delays == [30, 60, 120, 200, 200]
    assert queue.retry_delay(10_000).total_seconds() == 200


def test_each_failure_waits_its_backoff_then_the_job_fails_for_good(
    database: Database, kind: str, user_id: str
) -> None:
    queue = JobQueue(database, retry_base_seconds=30, retry_max_seconds=3600, max_attempts=3)
    queue.enqueue(kind, user_id, "s1")
    job = claim(queue, kind)
    assert job is not None

    assert queue.fail(job, "boom 1")
    assert state(database, job) == JobState("pending", 1, timedelta(seconds=30), "boom 1")
    assert claim(queue, kind) is None  # not due before its backoff

    job = claim_due(queue, database, kind, job)
    assert queue.fail(job, "boom 2")
    assert state(database, job) == JobState("pending", 2, timedelta(seconds=60), "boom 2")

    job = claim_due(queue, database, kind, job)
    assert queue.fail(job, "boom 3")
    assert (state(database, job).status, state(database, job).last_error) == ("failed", "boom 3")
    assert queue.pending(kind) == 0
    make_due(database, job)
    assert claim(queue, kind) is None


def test_enqueue_never_brings_a_retrying_job_forward(
    queue: JobQueue, database: Database, kind: str, user_id: str
) -> None:
    queue.enqueue(kind, user_id, "s1")
    job = claim(queue, kind)
    assert job is not None
    queue.fail(job, "boom")
    backing_off_until = run_after(database, job)

    for _ in range(5):
        assert queue.enqueue(kind, user_id, "s1", delay_seconds=0) is False

    assert run_after(database, job) == backing_off_until
    assert claim(queue, kind) is None
    assert queue.pending(kind) == 1


def test_a_failed_job_absorbs_the_sibling_enqueued_while_it_ran(
    queue: JobQueue, database: Database, kind: str, user_id: str
) -> None:
    queue.enqueue(kind, user_id, "s1")
    running = claim(queue, kind)
    assert running is not None
    assert queue.enqueue(kind, user_id, "s1") is True  # new messages while it runs

    assert queue.fail(running, "boom")

    # One pending job, still counting attempts and still backing off: traffic resets nothing.
    assert queue.pending(kind) == 1
    assert state(database, running) == JobState("pending", 1, timedelta(seconds=30), "boom")
    assert claim(queue, kind) is None
    retry = claim_due(queue, database, kind, running)
    assert retry.attempts == 2


def test_a_sibling_committed_while_a_failure_is_recorded_is_merged(
    queue: JobQueue, database: Database, kind: str, user_id: str
) -> None:
    # The sibling is stored after ``fail`` looked for one: its retry waits on the
    # one-pending-job index, then violates it, and is tried again after a savepoint.
    queue.enqueue(kind, user_id, "s1")
    running = claim(queue, kind)
    assert running is not None
    recorded: list[bool] = []
    with database.engine.connect() as enqueuer:
        enqueuer.execute(
            text("INSERT INTO jobs (kind, user_id, session_id) VALUES (:kind, :user_id, 's1')"),
            {"kind": kind, "user_id": user_id},
        )
        holder = enqueuer.execute(text("SELECT pg_backend_pid()")).scalar_one()
        failing = threading.Thread(target=lambda: recorded.append(queue.fail(running, "boom")))
        failing.start()
        waiting = 0
        while waiting == 0 and failing.is_alive():  # until fail's update waits for the insert
            with database.reading() as connection:
                waiting = connection.execute(
                    text(
                        "SELECT count(*) FROM pg_stat_activity "
                        "WHERE :holder = ANY(pg_blocking_pids(pid))"
                    ),
                    {"holder": holder},
                ).scalar_one()
        enqueuer.commit()
        failing.join()

    assert recorded == [True]
    assert queue.pending(kind) == 1
    assert state(database, running) == JobState("pending", 1, timedelta(seconds=30), "boom")


def test_a_stale_worker_cannot_touch_a_job_claimed_again(
    queue: JobQueue, database: Database, kind: str, user_id: str
) -> None:
    queue.enqueue(kind, user_id, "s1")
    stale = queue.claim("slow worker", kinds=[kind], lease_seconds=-1)
    assert stale is not None
    fresh = queue.claim("live worker", kinds=[kind], lease_seconds=300)
    assert fresh is not None and fresh.id == stale.id

    assert queue.complete(stale) is False
    assert queue.fail(stale, "late failure") is False
    assert queue.renew(stale, 300) is False
    assert state(database, fresh) == JobState("running", 2, state(database, fresh).wait, None)

    assert queue.complete(fresh) is True
    assert queue.complete(fresh) is False  # finished: the claim is over
    assert state(database, fresh).status == "done"


def test_the_same_worker_id_on_an_older_claim_is_fenced_too(
    queue: JobQueue, kind: str, user_id: str
) -> None:
    queue.enqueue(kind, user_id, "s1")
    first = queue.claim("worker", kinds=[kind], lease_seconds=-1)
    second = queue.claim("worker", kinds=[kind], lease_seconds=300)
    assert first is not None and second is not None

    assert queue.complete(first) is False
    assert queue.complete(second) is True


def test_renew_keeps_the_job_from_being_claimed_again(
    queue: JobQueue, kind: str, user_id: str
) -> None:
    queue.enqueue(kind, user_id, "s1")
    job = queue.claim("worker", kinds=[kind], lease_seconds=-1)  # already expired
    assert job is not None

    assert queue.renew(job, 300) is True

    assert queue.claim("other", kinds=[kind]) is None
    assert queue.complete(job) is True


def test_last_error_is_bounded_and_storable(
    queue: JobQueue, database: Database, kind: str, user_id: str
) -> None:
    queue.enqueue(kind, user_id, "s1")
    job = claim(queue, kind)
    assert job is not None

    assert queue.fail(job, "nul \x00 surrogate \ud800 " + "x" * 10_000)

    stored = state(database, job).last_error
    assert stored is not None
    assert stored.startswith("nul \\x00 surrogate \\ud800 x")
    assert len(stored) == MAX_ERROR_CHARS


def test_jobs_of_two_users_on_the_same_session_id_are_separate(queue: JobQueue, kind: str) -> None:
    alice, bob = f"alice-{uuid.uuid4()}", f"bob-{uuid.uuid4()}"

    assert queue.enqueue(kind, alice, "default") is True
    assert queue.enqueue(kind, bob, "default") is True

    claimed = {job.user_id for job in iter(lambda: claim(queue, kind), None)}
    assert claimed == {alice, bob}


def test_params_travel_with_the_job_and_merge_key_by_key(
    queue: JobQueue, kind: str, user_id: str
) -> None:
    queue.enqueue(kind, user_id, "s1", params={"budget": 1_000, "base": {"seq": 4}})
    queue.enqueue(kind, user_id, "s1", params={"budget": 2_000})  # "base" is left as it was
    queue.enqueue(kind, user_id, "s2")

    jobs = [claim(queue, kind), claim(queue, kind)]

    assert {job.session_id: job.params for job in jobs if job is not None} == {
        "s1": {"budget": 2_000, "base": {"seq": 4}},
        "s2": {},
    }


# --- finished jobs are deleted after their retention ----------------------------------------


def finish(queue: JobQueue, kind: str, user_id: str, session_id: str, *, failed: bool) -> Job:
    """Queue, claim and finish one job: done, or failed for good (a queue of one attempt)."""
    queue.enqueue(kind, user_id, session_id)
    job = claim(queue, kind)
    assert job is not None and job.session_id == session_id
    assert (queue.fail(job, "boom") if failed else queue.complete(job)) is True
    return job


def finished_ago(database: Database, jobs: list[Job], seconds: float) -> None:
    """Make the jobs finished ``seconds`` ago."""
    with database.transaction() as connection:
        connection.execute(
            text(
                "UPDATE jobs SET updated_at = now() - make_interval(secs => :seconds) "
                "WHERE id = ANY(:ids)"
            ),
            {"seconds": seconds, "ids": [job.id for job in jobs]},
        )


def statuses(database: Database, kind: str) -> dict[str, str]:
    with database.transaction() as connection:
        rows = connection.execute(
            text("SELECT session_id, status FROM jobs WHERE kind = :kind"), {"kind": kind}
        ).all()
    return {row.session_id: row.status for row in rows}


def test_prune_deletes_finished_jobs_past_their_retention_and_nothing_else(
    database: Database, kind: str, user_id: str
) -> None:
    # A database of its own: prune deletes every user's finished jobs.
    with own_database(database, "prune") as opened:
        queue = JobQueue(opened, max_attempts=1)
        old_done = finish(queue, kind, user_id, "old-done", failed=False)
        finish(queue, kind, user_id, "new-done", failed=False)
        old_failed = finish(queue, kind, user_id, "old-failed", failed=True)
        older_failed = finish(queue, kind, user_id, "older-failed", failed=True)
        queue.enqueue(kind, user_id, "running")
        running = claim(queue, kind)
        assert running is not None
        queue.enqueue(kind, user_id, "pending", delay_seconds=3_600)
        finished_ago(opened, [old_done, old_failed, running], 2 * 86_400)
        finished_ago(opened, [older_failed], 40 * 86_400)

        deleted = queue.prune(done_seconds=86_400, failed_seconds=30 * 86_400)

        assert deleted == 2
        assert statuses(opened, kind) == {
            "new-done": "done",  # finished within a day
            "old-failed": "failed",  # kept longer: its error says what went wrong
            "running": "running",
            "pending": "pending",
        }
        assert queue.prune(done_seconds=86_400, failed_seconds=30 * 86_400) == 0
        with pytest.raises(InvalidInputError):
            queue.prune(done_seconds=-1, failed_seconds=0)


def test_prune_is_bounded_per_call_and_goes_on_where_it_stopped(
    database: Database, kind: str, user_id: str
) -> None:
    with own_database(database, "prune") as opened:
        queue = JobQueue(opened)
        jobs = [finish(queue, kind, user_id, f"s{index}", failed=False) for index in range(25)]
        finished_ago(opened, jobs, 86_400)

        calls = [queue.prune(done_seconds=60, failed_seconds=60, limit=10, batch=4) for _ in "abcd"]

        assert calls == [10, 10, 5, 0]
        assert statuses(opened, kind) == {}


def due_ago(database: Database, session_id: str, seconds: float) -> None:
    """Make the session's pending jobs due ``seconds`` ago."""
    with database.transaction() as connection:
        connection.execute(
            text(
                "UPDATE jobs SET run_after = now() - make_interval(secs => :seconds) "
                "WHERE session_id = :session_id AND status = 'pending'"
            ),
            {"seconds": seconds, "session_id": session_id},
        )


def test_longest_unclaimed_is_how_long_the_job_due_longest_has_waited(
    database: Database, kind: str, user_id: str
) -> None:
    # A database of its own: the wait is over every user's jobs.
    with own_database(database, "unclaimed") as opened:
        queue = JobQueue(opened)
        assert queue.longest_unclaimed_seconds() is None
        queue.enqueue(kind, user_id, "later", delay_seconds=3_600)
        assert queue.longest_unclaimed_seconds() is None  # pending, not due yet

        queue.enqueue(kind, user_id, "due")
        queue.enqueue(kind, user_id, "long-due")
        due_ago(opened, "long-due", 90)
        waited = queue.longest_unclaimed_seconds()
        assert waited is not None and 90 <= waited < 90 + 60

        assert claim(queue, kind) is not None  # the worker takes the job due longest first
        waited = queue.longest_unclaimed_seconds()
        assert waited is not None and 0 <= waited < 60
        assert claim(queue, kind) is not None
        assert queue.longest_unclaimed_seconds() is None

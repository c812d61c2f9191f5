"""Tests of JobQueue: debounce, SKIP LOCKED claims, lease expiry, completion and retries."""

import threading
import uuid

import pytest
from sqlalchemy import text

from storage import Database, Job, JobQueue


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
            queue.complete(job.id)

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


def test_complete_and_fail(queue: JobQueue, kind: str, user_id: str) -> None:
    queue.enqueue(kind, user_id, "done")
    queue.enqueue(kind, user_id, "retried")
    queue.enqueue(kind, user_id, "failed")
    jobs = {job.session_id: job for job in iter(lambda: claim(queue, kind), None)}
    assert set(jobs) == {"done", "retried", "failed"}

    queue.complete(jobs["done"].id)
    queue.fail(jobs["retried"].id, "timeout", retry_in_seconds=0)
    queue.fail(jobs["failed"].id, "bad input", retry_in_seconds=None)

    assert queue.pending(kind) == 1
    retry = claim(queue, kind)
    assert retry is not None
    assert (retry.id, retry.session_id, retry.attempts) == (jobs["retried"].id, "retried", 2)
    assert claim(queue, kind) is None


def test_retry_waits_for_its_delay(queue: JobQueue, kind: str, user_id: str) -> None:
    queue.enqueue(kind, user_id, "s1")
    job = claim(queue, kind)
    assert job is not None

    queue.fail(job.id, "later", retry_in_seconds=3600)

    assert queue.pending(kind) == 1
    assert claim(queue, kind) is None


def test_failed_job_with_a_pending_sibling_is_not_retried_twice(
    queue: JobQueue, kind: str, user_id: str
) -> None:
    queue.enqueue(kind, user_id, "s1")
    running = claim(queue, kind)
    assert running is not None
    queue.enqueue(kind, user_id, "s1")

    queue.fail(running.id, "boom", retry_in_seconds=0)

    assert queue.pending(kind) == 1
    sibling = claim(queue, kind)
    assert sibling is not None
    assert sibling.id != running.id


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

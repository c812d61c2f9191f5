"""The worker outlives database outages, keeps its lease on long jobs, and stops gracefully.

On the real embedded Postgres (stopped and restarted under a running worker thread), and
``stratamem worker`` as a real process that gets SIGTERM in the middle of a job.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from databases import own_database
from fake_openai import FakeOpenAI, Hang
from sqlalchemy import text

from memory import Memory, Settings
from memory.cli import main
from memory.jobs.worker import Worker
from storage import Database, DatabaseUnavailableError, Job, JobQueue
from storage.engine import stop_embedded

#: A bound for waits on things that happen within a second; reached only when a test fails.
WAIT_S = 60.0
REPO = Path(__file__).resolve().parents[2]


def wait_until(condition: Callable[[], bool], what: str) -> None:
    """Wait (on an event, not a clock assertion) until ``condition`` holds."""
    tick = threading.Event()
    for _ in range(int(WAIT_S / 0.02)):
        if condition():
            return
        tick.wait(0.02)
    raise AssertionError(f"timed out waiting until {what}")


def status_of(database: Database, job_id: int) -> str:
    with database.engine.connect() as connection:
        return str(connection.scalar(text("SELECT status FROM jobs WHERE id = :i"), {"i": job_id}))


def quick_worker(queue: JobQueue, handler: Callable[[Job], None]) -> Worker:
    return Worker(
        queue,
        {"test": handler},
        poll_seconds=0.02,
        outage_backoff_seconds=0.02,
        max_outage_backoff_seconds=0.1,
    )


@pytest.fixture
def embedded(fresh_data_dir: Path) -> Iterator[tuple[Database, Path]]:
    """A database on an embedded server of the test's own, which the test may stop.

    Reached by URL, as a database elsewhere is: a handle on the data folder would start the
    server again at its next connection, so the outage would end at once.
    """
    holder = Database.open(None, data_dir=fresh_data_dir)
    assert holder.data_folder is not None
    database = Database.open(holder.url)
    yield database, holder.data_folder
    database.close()
    holder.close()


def test_the_worker_survives_a_database_restart_and_runs_the_job_again(
    embedded: tuple[Database, Path], caplog: pytest.LogCaptureFixture
) -> None:
    database, folder = embedded
    queue = JobQueue(database, retry_base_seconds=0)  # the job is due again at once
    runs: list[int] = []

    def handler(job: Job) -> None:
        runs.append(job.id)
        if len(runs) == 1:
            stop_embedded(folder)  # the database goes away in the middle of the job
            queue.pending()  # so the job's own query fails, as a real one would

    worker = quick_worker(queue, handler)
    stop = threading.Event()
    queue.enqueue("test", "u", "s")
    thread = threading.Thread(target=worker.run, args=(stop,))
    with caplog.at_level(logging.WARNING, logger="memory.jobs.worker"):
        thread.start()
        try:
            wait_until(lambda: worker.database_errors >= 5, "the worker has retried a while")
            assert thread.is_alive()
            Database.open(None, data_dir=folder.parent).close()  # the database comes back

            wait_until(lambda: len(runs) == 2, "the job ran again")
            wait_until(lambda: status_of(database, runs[0]) == "done", "the job is done")
            second = queue.enqueue("test", "u", "t")
            assert second
            wait_until(lambda: len(runs) == 3, "a new job ran")
        finally:
            stop.set()
            thread.join(WAIT_S)
    assert not thread.is_alive()
    assert worker.outages == 1
    outage_logs = [r for r in caplog.records if "database unavailable" in r.getMessage()]
    assert len(outage_logs) == 1  # one line per outage, not one per retry
    assert any("reachable again" in r.getMessage() for r in caplog.records)


def test_until_idle_reports_an_outage_instead_of_waiting(
    embedded: tuple[Database, Path],
) -> None:
    database, folder = embedded
    worker = quick_worker(JobQueue(database), lambda job: None)
    stop_embedded(folder)

    with pytest.raises(DatabaseUnavailableError):
        worker.run(threading.Event(), until_idle=True)

    assert worker.database_errors == 1


class RenewingQueue(JobQueue):
    """A ``JobQueue`` that counts its lease renewals."""

    def __init__(self, database: Database) -> None:
        super().__init__(database)
        self.renewals = 0
        self.renewed = threading.Event()

    def renew(self, job: Job, lease_seconds: float) -> bool:
        renewed = super().renew(job, lease_seconds)
        self.renewals += 1
        if self.renewals >= 2:
            self.renewed.set()
        return renewed


def test_a_long_job_has_its_lease_renewed_while_it_runs(database: Database) -> None:
    queue = RenewingQueue(database)
    kind = f"test-{uuid.uuid4()}"  # the shared queue may hold other tests' jobs
    seen: list[bool] = []

    def long_job(job: Job) -> None:
        # The job outlasts two thirds of its lease twice over: only renewals keep it ours.
        seen.append(queue.renewed.wait(WAIT_S))

    worker = Worker(queue, {kind: long_job}, lease_seconds=0.3)
    queue.enqueue(kind, "u", f"s-{uuid.uuid4()}")

    assert worker.run_once()

    assert seen == [True]
    assert queue.renewals >= 2


class FencedQueue(JobQueue):
    """A ``JobQueue`` whose job is taken over by another worker just before ``complete``."""

    def complete(self, job: Job) -> bool:
        with self._database.transaction() as session:
            session.execute(
                text("UPDATE jobs SET claimed_by = 'another' WHERE id = :i"), {"i": job.id}
            )
        return super().complete(job)  # another worker holds the job now: fenced out


def test_a_stale_claim_is_left_to_the_worker_that_took_the_job_over(
    database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    queue = FencedQueue(database)
    kind = f"test-{uuid.uuid4()}"
    ran: list[int] = []
    worker = Worker(queue, {kind: lambda job: ran.append(job.id)})
    queue.enqueue(kind, "u", f"s-{uuid.uuid4()}")

    with caplog.at_level(logging.WARNING, logger="memory.jobs.worker"):
        assert worker.run_once()
        assert not worker.run_once()  # nothing left to claim, nothing left to settle

    assert len(ran) == 1
    assert status_of(database, ran[0]) == "running"  # the other worker decides
    assert any("claim went stale" in record.getMessage() for record in caplog.records)


# --- stratamem worker --------------------------------------------------------------------


@pytest.fixture
def private_database(database: Database) -> Iterator[Database]:
    """A database of this test's own: the worker process claims any job it finds."""
    with own_database(database, "worker") as opened:
        yield opened


#: The worker process's settings, as ``STRATAMEM_*`` variables: a small window, so a few dozen
#: turns make a consolidation due, and no debounce.
WORKER_SETTINGS = {
    "MODEL": "gpt-4o-mini",
    "CONTEXT_WINDOW": "2000",
    "MAX_OUTPUT": "200",
    "LLM_API_KEY": "test",
    "SUMMARY__MODEL": "summariser-1",
    "SUMMARY__DEBOUNCE_SECONDS": "0",
    "SUMMARY__BACKOFF_SECONDS": "0",
    # These tests are about the worker and the summary: a model-free embedder keeps the jobs
    # short, so a job never outlasts the shutdown grace because MiniLM was loading.
    "CARDS__EMBEDDER": "hashing",
}


def worker_environment(database_url: str, base_url: str) -> dict[str, str]:
    """This environment without stratamem's or OpenAI's variables, plus the worker's."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("STRATAMEM_", "OPENAI_"))
    }
    ours = {f"STRATAMEM_{name}": value for name, value in WORKER_SETTINGS.items()}
    return (
        env
        | ours
        | {
            "PYTHONPATH": str(REPO),
            "STRATAMEM_DATABASE_URL": database_url,
            "STRATAMEM_LLM_BASE_URL": base_url,
        }
    )


def same_settings(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> Settings:
    """The settings the worker process reads from ``env``, read the same way here."""
    for name, value in env.items():
        if name.startswith("STRATAMEM_"):
            monkeypatch.setenv(name, value)
    return Settings()


@pytest.mark.parametrize("until_idle", [True, False])
@pytest.mark.slow
def test_sigterm_lets_the_running_job_finish_and_store_its_summary(
    private_database: Database,
    user_id: str,
    session_id: str,
    until_idle: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with FakeOpenAI() as server:
        env = worker_environment(private_database.url, server.base_url)
        memory = Memory(private_database, same_settings(monkeypatch, env))
        for turn in range(40):
            memory.prepare(user_id=user_id, session_id=session_id, input=f"Lisbon trip {turn} " * 6)
        assert memory.summary(user_id=user_id, session_id=session_id) is None
        arrived = threading.Event()

        def hang(body: object) -> Hang:
            arrived.set()
            # One call for the fold's summary and its cards (long-term memory is on).
            reply = {"summary": "Summary after SIGTERM: Lisbon trip notes.", "cards": []}
            return Hang(json.dumps(reply))

        server.responder = hang
        command = [sys.executable, "-m", "memory.cli", "worker"]
        child = subprocess.Popen(
            command + (["--until-idle"] if until_idle else []),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert arrived.wait(WAIT_S), "the worker's summary request never arrived"
            child.send_signal(signal.SIGTERM)  # in the middle of the job
            server.release()
            _, err = child.communicate(timeout=WAIT_S)
        finally:
            if child.poll() is None:
                child.kill()

    assert child.returncode == 0, err
    summary = memory.summary(user_id=user_id, session_id=session_id)
    assert summary is not None
    assert summary.content == "Summary after SIGTERM: Lisbon trip notes."
    with private_database.engine.connect() as connection:
        statuses = connection.execute(text("SELECT status FROM jobs")).scalars().all()
    assert "running" not in statuses


def test_an_unreachable_database_is_one_clear_line_and_exit_code_3(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("STRATAMEM_DATABASE_URL", "postgresql+psycopg://nobody@127.0.0.1:1/none")

    assert main(["worker", "--until-idle"]) == 3

    err = capsys.readouterr().err
    assert err.startswith("stratamem: error: cannot reach the database:")
    assert "Traceback" not in err


@pytest.mark.slow
def test_the_worker_process_reports_an_outage_once_and_carries_on(
    embedded: tuple[Database, Path],
) -> None:
    database, folder = embedded
    env = worker_environment(database.url, "http://127.0.0.1:9/v1")  # no LLM call is made
    child = subprocess.Popen(
        [sys.executable, "-m", "memory.cli", "worker"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stderr is not None
    try:
        assert "stratamem worker running" in child.stdout.readline()
        stop_embedded(folder)
        outage = child.stderr.readline()  # blocks until the worker says something
        Database.open(None, data_dir=folder.parent).close()  # the database comes back
        back = child.stderr.readline()
        child.send_signal(signal.SIGTERM)
        rest = child.communicate(timeout=WAIT_S)[1]
    finally:
        if child.poll() is None:
            child.kill()

    assert "ERROR memory.jobs.worker: database unavailable" in outage
    assert "reachable again" in back  # one line per outage, not one per retry
    assert "database unavailable" not in rest
    assert child.returncode == 0


# --- the idle task ---------------------------------------------------------------------------


def test_the_idle_task_runs_when_nothing_is_due_and_its_jobs_run_next(database: Database) -> None:
    queue = JobQueue(database)
    kind = f"test-{uuid.uuid4()}"
    ran: list[str] = []
    sweeps: list[int] = []

    def sweep() -> int:
        sweeps.append(len(sweeps))
        if len(sweeps) > 1:
            return 0
        return int(queue.enqueue(kind, "u", f"s-{uuid.uuid4()}"))

    worker = Worker(queue, {kind: lambda job: ran.append(job.session_id)}, on_idle=sweep)
    worker.run(threading.Event(), until_idle=True)

    assert len(ran) == 1  # queued by the sweep, run by the same call
    assert sweeps == [0]  # not again within idle_task_seconds (a minute by default)
    worker.run(threading.Event(), until_idle=True)
    assert sweeps == [0]

    eager = Worker(queue, {kind: lambda job: None}, on_idle=sweep, idle_task_seconds=0)
    eager.run(threading.Event(), until_idle=True)
    eager.run(threading.Event(), until_idle=True)
    assert sweeps == [0, 1, 2]


def test_a_failing_idle_task_is_logged_and_the_jobs_go_on(
    database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    queue = JobQueue(database)
    kind = f"test-{uuid.uuid4()}"
    ran: list[int] = []

    def broken_sweep() -> int:
        raise RuntimeError("sweep broke")

    worker = Worker(queue, {kind: lambda job: ran.append(job.id)}, on_idle=broken_sweep)
    queue.enqueue(kind, "u", f"s-{uuid.uuid4()}")
    with caplog.at_level(logging.ERROR, logger="memory.jobs.worker"):
        worker.run(threading.Event(), until_idle=True)

    assert len(ran) == 1
    assert worker.idle_task_failures == 1
    assert worker.failures == 0
    assert any("idle task failed" in record.getMessage() for record in caplog.records)

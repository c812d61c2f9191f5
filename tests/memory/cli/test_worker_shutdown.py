"""``stratamem worker`` as a real process stopped with SIGTERM while a job runs.

The job is a consolidation whose model call the fake server holds (``Hang``), so the test
decides when the job can finish. Every wait is on a condition (a line, a request, a row), with
a generous deadline; none is a sleep that asserts something.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from fake_openai import FakeOpenAI, Hang, Reply
from sqlalchemy import text

from memory import Memory, Settings
from memory.jobs.worker import SHUTDOWN_GRACE_SECONDS
from storage import Database

ROOT = Path(__file__).resolve().parents[3]
#: Generous: the machine may be busy; a condition met earlier ends the wait at once.
DEADLINE_S = 120.0

T = TypeVar("T")


def wait_for(condition: Callable[[], T], what: str) -> T:
    """Poll ``condition`` until it returns something truthy; fail after the deadline."""
    give_up = time.monotonic() + DEADLINE_S
    while not (found := condition()):
        assert time.monotonic() < give_up, f"gave up waiting for {what}"
        time.sleep(0.05)
    return found


class WorkerProcess:
    """``python -m memory.cli worker`` with its stdout read by line and its stderr collected."""

    def __init__(self, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "memory.cli", "worker"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        self._stderr: list[str] = []
        # Drained in a thread so a chatty stderr can never fill its pipe and block the child.
        self._drain = threading.Thread(target=self._collect, daemon=True)
        self._drain.start()

    def _collect(self) -> None:
        assert self.process.stderr is not None
        self._stderr.extend(self.process.stderr)

    def expect(self, fragment: str) -> str:
        """Read stdout until a line contains ``fragment``; fail if the child exits first."""
        assert self.process.stdout is not None
        while line := self.process.stdout.readline():
            if fragment in line:
                return line.strip()
        raise AssertionError(f"exit {self.process.wait()} before {fragment!r}: {self.stderr}")

    def finish(self) -> tuple[int, str]:
        """Wait for the exit; the exit code and the rest of stdout."""
        out, _ = self.process.communicate(timeout=DEADLINE_S)
        self._drain.join(timeout=DEADLINE_S)
        return self.process.returncode, out

    @property
    def stderr(self) -> str:
        return "".join(self._stderr)


@pytest.fixture
def worker_env(fresh_data_dir: Path) -> dict[str, str]:
    """The child's environment: the test's own embedded database, no cards (no model load)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STRATAMEM_", "OPENAI_"))}
    return env | {
        "PYTHONPATH": str(ROOT),
        "STRATAMEM_DATA_DIR": str(fresh_data_dir),
        "STRATAMEM_CARDS__ENABLED": "false",
        "OPENAI_API_KEY": "sk-test",
        "COLUMNS": "200",
    }


@pytest.fixture
def database(fresh_data_dir: Path) -> Iterator[Database]:
    """The embedded database the child worker shares (not the session's: no other jobs)."""
    with Database.open(None, data_dir=fresh_data_dir) as opened:
        yield opened


@pytest.fixture
def started() -> Iterator[list[WorkerProcess]]:
    """Workers this test started; any still running at the end (a failure) is killed."""
    workers: list[WorkerProcess] = []
    yield workers
    for worker in workers:
        if worker.process.poll() is None:
            worker.process.kill()
            worker.process.wait()


def queue_a_consolidation(database: Database, user_id: str, session_id: str) -> None:
    app = Memory(
        database,
        Settings(
            context_window=4_096,
            summary={"debounce_seconds": 0},
            cards={"enabled": False},
            llm_base_url=None,
            llm_api_key=None,
        ),
    )
    trigger = app._parts.fold_policy.trigger_tokens
    for turn in range(200):
        context = app.prepare(user_id=user_id, session_id=session_id, input=f"question {turn} " * 8)
        if context.report.tokens.window + context.report.tokens.input > trigger:
            return  # the job is queued
    raise AssertionError("the trigger was never reached")


def job_row(database: Database, user_id: str) -> tuple[str, int, object]:
    with database.reading() as connection:
        row = connection.execute(
            text("SELECT status, attempts, lease_until FROM jobs WHERE user_id = :u"),
            {"u": user_id},
        ).one()
    return row.status, row.attempts, row.lease_until


def start_worker(
    started: list[WorkerProcess], env: dict[str, str], fake: FakeOpenAI
) -> WorkerProcess:
    worker = WorkerProcess(env | {"OPENAI_BASE_URL": fake.base_url})
    started.append(worker)
    worker.expect("stratamem worker running")
    wait_for(lambda: fake.requests, "the job's model call")
    return worker


@pytest.mark.slow
def test_sigterm_lets_the_running_job_finish_and_exits_0(
    database: Database,
    worker_env: dict[str, str],
    started: list[WorkerProcess],
    user_id: str,
    session_id: str,
) -> None:
    queue_a_consolidation(database, user_id, session_id)
    with FakeOpenAI() as fake:
        fake.script(Hang("Questions 0 to 40 were asked; none was answered yet."))
        worker = start_worker(started, worker_env, fake)
        assert job_row(database, user_id)[0] == "running"

        worker.process.send_signal(signal.SIGTERM)
        said = worker.expect("SIGTERM received, stopping")
        fake.release()  # the model answers: the job can finish
        code, rest = worker.finish()

    assert "a running job finishes first" in said
    assert code == 0, worker.stderr
    assert "stratamem worker stopped (SIGTERM): ran 1 job(s) on 1 session(s)" in rest
    status, attempts, lease = job_row(database, user_id)
    assert (status, attempts, lease) == ("done", 1, None)
    assert Memory(
        database, Settings(cards={"enabled": False}, llm_base_url=None, llm_api_key=None)
    ).summary(user_id=user_id, session_id=session_id)
    assert "Traceback" not in worker.stderr


@pytest.mark.slow
def test_a_job_that_outlasts_the_grace_is_released_to_another_worker_at_once(
    database: Database,
    worker_env: dict[str, str],
    started: list[WorkerProcess],
    user_id: str,
    session_id: str,
) -> None:
    queue_a_consolidation(database, user_id, session_id)
    with FakeOpenAI() as fake:
        # The stopping worker's call hangs; the worker that takes over gets the summary.
        fake.script(Hang("too late"), Reply("The user asked forty numbered questions."))
        worker = start_worker(started, worker_env, fake)
        worker.process.send_signal(signal.SIGTERM)
        worker.expect("SIGTERM received, stopping")
        # The lease would hold the job for 300 s; released, another worker takes it at once.
        other = Memory(
            database,
            Settings(cards={"enabled": False}, llm_base_url=fake.base_url, llm_api_key="sk-test"),
        )
        taken = wait_for(
            lambda: other.run_worker(until_idle=True).outcomes, "another worker to take the job"
        )
        fake.release()  # the stopping worker's call returns, long after the job moved on
        code, rest = worker.finish()

    assert [outcome.session_id for outcome in taken] == [session_id]
    assert code == 0, worker.stderr
    assert (
        f"still running {SHUTDOWN_GRACE_SECONDS:.0f} s after the stop; its lease is released"
        in (worker.stderr)
    )
    assert "stratamem worker stopped (SIGTERM)" in rest
    status, attempts, _ = job_row(database, user_id)
    assert (status, attempts) == ("done", 2)
    summary = other.summary(user_id=user_id, session_id=session_id)
    assert summary is not None
    assert summary.content == "The user asked forty numbered questions."


def test_a_signal_that_arrives_while_the_main_thread_holds_the_stop_events_lock_still_stops() -> (
    None
):
    # The CI hang of stop 32: a handler that set the event itself waited forever for the lock
    # the main thread held inside ``stop.wait()``. Here the main thread holds that lock when the
    # signal is delivered; in a child, so a hang is a timeout, not a stuck suite.
    code = textwrap.dedent(
        """
        import signal
        from memory.cli.worker import stop_on_signals

        with stop_on_signals() as (stop, received):
            with stop._cond:  # what the main thread holds for a few bytecodes of stop.wait()
                signal.raise_signal(signal.SIGTERM)
            print(stop.wait(60), received == [signal.SIGTERM])
        print(signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, signal.set_wakeup_fd(-1))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
        timeout=DEADLINE_S,
    )

    assert done.returncode == 0, done.stderr
    # Stopped, by SIGTERM; then the handler and the wakeup fd are what they were before.
    assert done.stdout.split() == ["True", "True", "True", "-1"]

"""A background worker runs its jobs at the worker's niceness (``jobs.worker_niceness``), so a
worker embedding cards gives the cores to requests; a caller's own thread keeps its priority.

Linux only (niceness per thread); a queue in memory, since only the thread matters here.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Sequence

import pytest

from memory import Settings
from memory.jobs.worker import Worker
from storage import Job

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="niceness per thread: Linux")


class OneJob:
    """A queue holding one due job of kind ``test`` (the worker's ``Queue``)."""

    def __init__(self) -> None:
        self.job: Job | None = Job(
            id=1, kind="test", user_id="u", session_id="s", attempts=1, claimed_by="w"
        )
        self.done = threading.Event()

    def claim(
        self, worker_id: str, *, kinds: Sequence[str] | None = None, lease_seconds: float = 300
    ) -> Job | None:
        job, self.job = self.job, None
        return job

    def complete(self, job: Job) -> bool:
        self.done.set()
        return True

    def fail(self, job: Job, error: str) -> bool:
        self.done.set()
        return True

    def renew(self, job: Job, lease_seconds: float) -> bool:
        return True

    def pending(self, kind: str | None = None) -> int:
        return 0 if self.job is None else 1


def niceness() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def test_the_default_worker_niceness_is_ten() -> None:
    assert Settings().jobs.worker_niceness == 10


def test_a_background_worker_runs_its_jobs_at_its_niceness() -> None:
    queue, seen = OneJob(), []
    worker = Worker(queue, {"test": lambda job: seen.append(niceness())}, poll_seconds=0.01,
                    niceness=7)  # fmt: skip
    stop = threading.Event()
    before = niceness()
    thread = threading.Thread(target=worker.run, args=(stop,))
    thread.start()
    assert queue.done.wait(60)
    stop.set()
    thread.join()

    assert seen == [max(7, before)]
    assert niceness() == before  # only the worker's thread


def test_a_worker_run_until_idle_in_the_callers_thread_leaves_its_priority() -> None:
    queue, seen = OneJob(), []
    worker = Worker(queue, {"test": lambda job: seen.append(niceness())}, niceness=7)
    before = niceness()

    worker.run(threading.Event(), until_idle=True)

    assert seen == [before]
    assert niceness() == before

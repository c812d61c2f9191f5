"""The background worker: claims jobs from Postgres and runs each with the handler of its kind."""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Mapping

from storage import Job, JobQueue

__all__ = ["CONSOLIDATE", "JobHandler", "Worker"]

logger = logging.getLogger(__name__)

#: The job kind that folds a session's dropped messages into its summary.
CONSOLIDATE = "consolidate"

#: Runs one claimed job; raising re-queues it for a retry.
JobHandler = Callable[[Job], None]


class Worker:
    """Runs queued jobs; any number of workers on any number of machines may share one queue,
    since jobs are claimed with ``FOR UPDATE SKIP LOCKED``.

    Args:
        jobs: the queue.
        handlers: the handler of each job kind this worker runs (the table of what it knows).
        poll_seconds: how long to wait when no job is due.
        retry_seconds: how long a failed job waits before its retry.
    """

    def __init__(
        self,
        jobs: JobQueue,
        handlers: Mapping[str, JobHandler],
        *,
        poll_seconds: float = 1.0,
        retry_seconds: float = 30.0,
    ) -> None:
        self._jobs = jobs
        self._handlers = dict(handlers)
        self._poll_seconds = poll_seconds
        self._retry_seconds = retry_seconds
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"
        #: Jobs that raised, since this worker started (each was logged and re-queued).
        self.failures = 0

    def run_once(self) -> bool:
        """Claim and run one due job; ``False`` when none was due."""
        job = self._jobs.claim(self.worker_id, kinds=list(self._handlers))
        if job is None:
            return False
        try:
            self._handlers[job.kind](job)
        except Exception as error:
            # Degradation point: one session's failure must not stop the worker serving the
            # others. The summariser never raises for LLM failures, so this is a database or
            # data problem; the job goes back to the queue and the messages are untouched.
            logger.exception("job %s for session %s failed", job.id, job.session_id)
            self.failures += 1
            self._jobs.fail(job, repr(error))
        else:
            self._jobs.complete(job)
        return True

    def run(self, stop: threading.Event, *, until_idle: bool = False) -> None:
        """Run jobs until ``stop`` is set, or, with ``until_idle``, until none is pending.

        With ``until_idle`` a job that failed is not waited for again: the call returns once
        nothing else is due, and the job stays queued for its retry.
        """
        failures_before = self.failures
        while not stop.is_set():
            if self.run_once():
                continue
            if until_idle and (self._pending() == 0 or self.failures > failures_before):
                return
            # A pending job that is not yet due was debounced: wait for it.
            stop.wait(self._poll_seconds)

    def _pending(self) -> int:
        return sum(self._jobs.pending(kind) for kind in self._handlers)

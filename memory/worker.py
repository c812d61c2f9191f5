"""The background worker: claims consolidation jobs from Postgres and runs them."""

from __future__ import annotations

import logging
import os
import socket
import threading

from memory.consolidator import Consolidator
from storage import JobQueue

__all__ = ["CONSOLIDATE", "Worker"]

logger = logging.getLogger(__name__)

#: The job kind that folds a session's dropped messages into its summary.
CONSOLIDATE = "consolidate"


class Worker:
    """Runs queued consolidations; any number of workers on any number of machines may share
    one queue, since jobs are claimed with ``FOR UPDATE SKIP LOCKED``."""

    def __init__(
        self,
        jobs: JobQueue,
        consolidator: Consolidator,
        *,
        poll_seconds: float = 1.0,
        retry_seconds: float = 30.0,
    ) -> None:
        self._jobs = jobs
        self._consolidator = consolidator
        self._poll_seconds = poll_seconds
        self._retry_seconds = retry_seconds
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"
        #: Jobs that raised, since this worker started (each was logged and re-queued).
        self.failures = 0

    def run_once(self) -> bool:
        """Claim and run one due job; ``False`` when none was due."""
        job = self._jobs.claim(self.worker_id, kinds=[CONSOLIDATE])
        if job is None:
            return False
        try:
            self._consolidator.consolidate(job.user_id, job.session_id)
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
            if until_idle and (
                self._jobs.pending(CONSOLIDATE) == 0 or self.failures > failures_before
            ):
                return
            # A pending job that is not yet due was debounced: wait for it.
            stop.wait(self._poll_seconds)

"""The background worker: claims consolidation jobs from Postgres and runs them."""

from __future__ import annotations

import logging
import os
import socket
import threading

from memory.consolidator import Consolidator
from memory.errors import StratamemError
from storage import JobQueue, StorageError

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

    def run_once(self) -> bool:
        """Claim and run one due job; ``False`` when none was due."""
        job = self._jobs.claim(self.worker_id, kinds=[CONSOLIDATE])
        if job is None:
            return False
        try:
            self._consolidator.consolidate(job.user_id, job.session_id)
        except (StratamemError, StorageError) as error:
            # The summariser never raises for LLM failures; what reaches here is a database
            # or data problem. The job goes back to the queue, the messages are untouched.
            logger.warning("job %s for session %s failed: %s", job.id, job.session_id, error)
            self._jobs.fail(job.id, str(error), retry_in_seconds=self._retry_seconds)
        else:
            self._jobs.complete(job.id)
        return True

    def run(self, stop: threading.Event, *, until_idle: bool = False) -> None:
        """Run jobs until ``stop`` is set, or, with ``until_idle``, until none is pending."""
        while not stop.is_set():
            if self.run_once():
                continue
            if until_idle and self._jobs.pending(CONSOLIDATE) == 0:
                return
            # A pending job that is not yet due was debounced: wait for it.
            stop.wait(self._poll_seconds)

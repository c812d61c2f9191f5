"""Saying so when queued jobs wait for a worker that is not there.

In background mode (the default) folds and the archiving of cards are jobs a worker runs
(``Memory.run_worker``, ``stratamem worker``, or the proxy's own thread). Without one nothing
fails: summaries stay raw archives and no cards are made, so the user's other sessions recall
nothing, silently. So ``record`` asks the queue, at most once every ``CHECK_SECONDS`` and first
``CHECK_SECONDS`` after the ``Memory`` opened, how long the job due longest has waited to be
claimed, and past ``UNCLAIMED_WARNING_SECONDS`` logs a warning that says what to run (again after
``WARNING_REPEAT_SECONDS`` while it lasts).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from time import monotonic

from storage import JobQueue, StorageError

__all__ = ["CHECK_SECONDS", "UNCLAIMED_WARNING_SECONDS", "UnclaimedJobs"]

logger = logging.getLogger(__name__)

#: A due job unclaimed this long means no worker runs (a worker polls every second) or the
#: workers are behind: a fold with a model takes seconds, so a minute is a queue of many.
UNCLAIMED_WARNING_SECONDS = 60.0

#: The most often ``record`` asks (one indexed read of the jobs table), and how long after
#: opening it asks first: that read is added to at most one ``record`` in this time.
CHECK_SECONDS = 30.0

#: How long a warning is not repeated while the jobs still wait.
WARNING_REPEAT_SECONDS = 600.0


class UnclaimedJobs:
    """Warns, from ``record``, when due jobs wait for a worker for too long.

    The first check is due ``CHECK_SECONDS`` after construction, not at the first ``record``:
    a ``record`` then adds a statement at most once every ``CHECK_SECONDS``, a process's first
    one included, and a short script that records a few turns never asks.

    Args:
        jobs: the queue.
        clock: seconds from any fixed point (``time.monotonic`` by default).
    """

    def __init__(self, jobs: JobQueue, *, clock: Callable[[], float] | None = None) -> None:
        self._jobs = jobs
        self._clock = clock if clock is not None else monotonic
        self._next_check = self._clock() + CHECK_SECONDS
        self._lock = threading.Lock()

    def check(self) -> None:
        """Ask the queue when a check is due, and warn if its oldest due job waits too long.

        Never raises: a database error here is left to the next request to meet (the messages
        are stored already).
        """
        now = self._clock()
        with self._lock:
            if now < self._next_check:
                return
            self._next_check = now + CHECK_SECONDS  # one caller asks, the others go on
        try:
            waited = self._jobs.longest_unclaimed_seconds()
        except StorageError as error:
            logger.debug("could not read how long jobs wait for a worker: %s", error)
            return
        if waited is None or waited < UNCLAIMED_WARNING_SECONDS:
            return
        with self._lock:
            self._next_check = now + WARNING_REPEAT_SECONDS
        logger.warning(
            "a queued job has waited %.0f s for a worker: no worker is running, or the workers "
            "are behind. Until one runs it, summaries stay raw archives and no cards are made "
            "(other sessions recall nothing new). Run Memory.run_worker() in this process or "
            "`stratamem worker` beside it, or use summary={'mode': 'inline'}.",
            waited,
        )

"""The worker's idle work: archive sessions gone quiet, delete finished jobs after a while.

A conversation rarely says goodbye: the user closes the tab. Once a session got no message for
``cards.idle_seconds`` and its archive mark is behind its last message, the window that was
never folded would otherwise never become cards. ``IdleSessions`` queues the session's
``cards`` job with the end flag, exactly what ``end_session`` queues; a session that goes on
afterwards is archived again from its mark, so nothing is stored twice. Each sweep reads only
the sessions that went quiet since the sweep before (``ArchiveMarks.idle_sessions``), not every
session there is.

``FinishedJobs`` deletes jobs done ``jobs.done_retention_seconds`` ago and jobs failed for good
``jobs.failed_retention_seconds`` ago: without it the jobs table only grows.
"""

from __future__ import annotations

import logging
from datetime import datetime

from memory.jobs.worker import CARDS, END_OF_SESSION
from memory.settings import JobSettings
from storage import ArchiveMarks, JobQueue

__all__ = ["FinishedJobs", "IdleSessions", "IdleWork"]

logger = logging.getLogger(__name__)

#: Sessions queued per sweep at most: the next sweep takes the rest.
SWEEP_BATCH = 100

#: Finished jobs deleted per run of the idle work at most: the next run takes the rest.
PRUNE_LIMIT = 10_000


class IdleSessions:
    """Queues the end-of-session archiving of every idle session not archived yet.

    The first sweep looks at every session that ever went quiet; each later one only at those
    that went quiet since the one before (and a few minutes more, see
    ``storage.IDLE_SWEEP_OVERLAP_SECONDS``).

    Args:
        marks: the archive marks (the query that finds idle sessions is theirs).
        jobs: the queue the ``cards`` jobs go to.
        idle_seconds: how long without a new message makes a session idle.
    """

    def __init__(self, marks: ArchiveMarks, jobs: JobQueue, idle_seconds: float) -> None:
        self._marks = marks
        self._jobs = jobs
        self._idle_seconds = idle_seconds
        self._since: datetime | None = None

    def __call__(self) -> int:
        """Queue the idle sessions' archiving; how many jobs were created."""
        sweep = self._marks.idle_sessions(self._idle_seconds, limit=SWEEP_BATCH, since=self._since)
        created = 0
        for idle in sweep.sessions:
            # A pending job of the session takes the end flag (params merge key by key).
            created += self._jobs.enqueue(
                CARDS, idle.user_id, idle.session_id, params={END_OF_SESSION: True}
            )
        # Only once the jobs are queued: a sweep that failed midway is done again.
        self._since = sweep.next_since
        if created:
            logger.info("queued the archiving of %d idle session(s)", created)
        return created


class FinishedJobs:
    """Deletes the jobs finished longer ago than their retention (``JobSettings``).

    Args:
        jobs: the queue.
        settings: the retentions of done and failed jobs.
    """

    def __init__(self, jobs: JobQueue, settings: JobSettings) -> None:
        self._jobs = jobs
        self._settings = settings

    def __call__(self) -> int:
        """Delete finished jobs past their retention, at most ``PRUNE_LIMIT``; how many."""
        deleted = self._jobs.prune(
            done_seconds=self._settings.done_retention_seconds,
            failed_seconds=self._settings.failed_retention_seconds,
            limit=PRUNE_LIMIT,
        )
        if deleted:
            logger.info("deleted %d finished job(s) past their retention", deleted)
        return deleted


class IdleWork:
    """The worker's ``on_idle``: the sweep of idle sessions (when long-term memory is on), then
    the deletion of finished jobs.

    Returns (when called) how many jobs the sweep queued: the worker runs those next.
    """

    def __init__(self, sweep: IdleSessions | None, prune: FinishedJobs) -> None:
        self._sweep = sweep
        self._prune = prune

    def __call__(self) -> int:
        queued = self._sweep() if self._sweep is not None else 0
        self._prune()
        return queued

"""``IdleSessions``: the worker's idle task that treats a session gone quiet like an ended one.

A conversation rarely says goodbye: the user closes the tab. Once a session's newest message is
older than ``cards.idle_seconds`` and its archive mark is behind its last message, the window
that was never folded would otherwise never become cards. The sweep queues the session's
``cards`` job with the end flag, exactly what ``end_session`` queues; a session that goes on
afterwards is archived again from its mark, so nothing is stored twice.
"""

from __future__ import annotations

import logging

from memory.worker import CARDS, END_OF_SESSION
from storage import ArchiveMarks, JobQueue

__all__ = ["IdleSessions"]

logger = logging.getLogger(__name__)

#: Sessions queued per sweep at most: the next sweep takes the rest.
SWEEP_BATCH = 100


class IdleSessions:
    """Queues the end-of-session archiving of every idle session not archived yet.

    Args:
        marks: the archive marks (the query that finds idle sessions is theirs).
        jobs: the queue the ``cards`` jobs go to.
        idle_seconds: how long without a new message makes a session idle.
    """

    def __init__(self, marks: ArchiveMarks, jobs: JobQueue, idle_seconds: float) -> None:
        self._marks = marks
        self._jobs = jobs
        self._idle_seconds = idle_seconds

    def __call__(self) -> int:
        """Queue the idle sessions' archiving; how many jobs were created."""
        created = 0
        for idle in self._marks.idle_sessions(self._idle_seconds, limit=SWEEP_BATCH):
            # A pending job of the session takes the end flag (params merge key by key).
            created += self._jobs.enqueue(
                CARDS, idle.user_id, idle.session_id, params={END_OF_SESSION: True}
            )
        if created:
            logger.info("queued the archiving of %d idle session(s)", created)
        return created

"""Which sessions this process queued a job for, so a burst of requests queues one.

Once the raw messages after a session's summary pass the trigger, every request finds them
past it until a worker has folded them. Queueing the job again on each of those requests
changes nothing while the job waits (``JobQueue.enqueue`` merges it with the pending one) and
costs a write transaction each time: about half the requests of a busy session. So a process
queues a session's consolidation once, and again only when the summary it reads has changed
since (a fold ran, and the messages after it may call for another) or ``interval_seconds``
have passed (a job that failed or is waiting for its retry is asked for again, as before).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from time import monotonic

__all__ = ["QueuedArchiving", "QueuedConsolidations"]


class QueuedConsolidations:
    """Remembers, per session, the summary version it queued a consolidation at, and when.

    Args:
        interval_seconds: queue again after this long even if the summary did not change.
        max_sessions: the most sessions remembered; the least recently queued are forgotten
            first (a forgotten session is simply queued again).
        clock: seconds from any fixed point (``time.monotonic`` by default).
    """

    def __init__(
        self,
        *,
        interval_seconds: float,
        max_sessions: int = 10_000,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._interval = interval_seconds
        self._max_sessions = max_sessions
        self._clock = clock if clock is not None else monotonic
        self._queued: OrderedDict[tuple[str, str], tuple[int, float]] = OrderedDict()
        self._lock = threading.Lock()

    def due(self, user_id: str, session_id: str, summary_version: int) -> bool:
        """Whether to queue the session's consolidation, its summary being at this version."""
        with self._lock:
            queued = self._queued.get((user_id, session_id))
        if queued is None:
            return True
        version, at = queued
        return version != summary_version or self._clock() - at >= self._interval

    def queued(self, user_id: str, session_id: str, summary_version: int) -> None:
        """Record that the session's consolidation was just queued at this summary version."""
        key = (user_id, session_id)
        with self._lock:
            self._queued[key] = (summary_version, self._clock())
            self._queued.move_to_end(key)
            while len(self._queued) > self._max_sessions:
                self._queued.popitem(last=False)

    def forget(self, user_id: str, session_id: str | None = None) -> None:
        """Forget one session, or (``None``) every session of the user (erasure)."""
        with self._lock:
            for key in [k for k in self._queued if k[0] == user_id]:
                if session_id is None or key[1] == session_id:
                    del self._queued[key]


class QueuedArchiving:
    """Remembers, per session, until when the ``cards`` job this process created is surely
    still pending, so ``record`` does not queue it again meanwhile.

    Queueing costs a committed transaction (about as much as storing the messages), and a job
    created ``delay`` seconds ahead archives every message stored before a worker claims it.
    So after creating one, a session's next records queue nothing until ``margin`` seconds
    before it is due; then they queue again (a claimed job may have read the session before
    them). A job merged into a pending one of unknown time is not remembered, and a job this
    process moves earlier (``end_session``, a fold) is forgotten.

    Args:
        margin_seconds: how long before the job is due a record queues again.
        max_sessions: the most sessions remembered (the least recently queued are forgotten).
        clock: seconds from any fixed point (``time.monotonic`` by default).
    """

    def __init__(
        self,
        *,
        margin_seconds: float = 1.0,
        max_sessions: int = 10_000,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._margin = margin_seconds
        self._max_sessions = max_sessions
        self._clock = clock if clock is not None else monotonic
        self._pending_until: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._lock = threading.Lock()

    def now(self) -> float:
        """The clock's reading, taken before a job is queued (``created`` counts from it)."""
        return self._clock()

    def pending(self, user_id: str, session_id: str) -> bool:
        """Whether the job this process created for the session surely has not started."""
        with self._lock:
            until = self._pending_until.get((user_id, session_id))
        return until is not None and self._clock() < until

    def created(self, user_id: str, session_id: str, at: float, delay_seconds: float) -> None:
        """Record that a job due ``delay_seconds`` after ``at`` (a ``now``) was just created."""
        until = at + delay_seconds - min(self._margin, delay_seconds / 2)
        key = (user_id, session_id)
        with self._lock:
            self._pending_until[key] = until
            self._pending_until.move_to_end(key)
            while len(self._pending_until) > self._max_sessions:
                self._pending_until.popitem(last=False)

    def forget(self, user_id: str, session_id: str | None = None) -> None:
        """Forget one session, or (``None``) every session of the user."""
        with self._lock:
            for key in [k for k in self._pending_until if k[0] == user_id]:
                if session_id is None or key[1] == session_id:
                    del self._pending_until[key]

"""The background worker: claims jobs from Postgres and runs each with the handler of its kind.

A worker outlives the database: when Postgres goes away (restart, failover, network) every
queue call fails with ``DatabaseUnavailableError``; the worker logs the outage once, waits with
a doubling backoff, and carries on when the database answers again (the engine's pool
reconnects by itself; an embedded server that was stopped or died is started again by the
first connection that finds it gone, so that outage ends at the worker's next try). A job whose
outcome could not be written during the outage is settled first when the database is back.

When no job is due, the worker runs its idle task (``on_idle``; the facade's queues the archiving
of sessions nobody wrote to for ``cards.idle_seconds``) at most every ``idle_task_seconds``.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Protocol

from storage import DatabaseUnavailableError, Job, SessionErasedError

__all__ = [
    "CARDS",
    "CONSOLIDATE",
    "END_OF_SESSION",
    "SHUTDOWN_GRACE_SECONDS",
    "IdleTask",
    "JobHandler",
    "Queue",
    "Worker",
]

logger = logging.getLogger(__name__)

#: The job kind that folds a session's dropped messages into its summary.
CONSOLIDATE = "consolidate"

#: The job kind that archives a session's folded (or, at its end, all) messages as cards.
CARDS = "cards"

#: The ``cards`` job parameter that archives every stored message of the session, not only what
#: was folded: at its end, and for messages archived soon after they were stored
#: (``cards.archive_promptly``).
END_OF_SESSION = "end"
#: How long a job still running when the worker is asked to stop may take before its lease is
#: released to other workers: shorter than the 10 s a container runtime waits before SIGKILL.
SHUTDOWN_GRACE_SECONDS = 5.0

#: How often a running job's lease keeper looks whether the worker was asked to stop.
_STOP_POLL_SECONDS = 0.25

#: Runs one claimed job; raising re-queues it for a retry.
JobHandler = Callable[[Job], None]

#: Run when no job is due; returns how many jobs it queued.
IdleTask = Callable[[], int]

#: How often, at most, the idle task runs by default: often enough that a session idle for half
#: an hour is archived within a minute of it, rarely enough that the sweep's query costs nothing.
IDLE_TASK_SECONDS = 60.0


class Queue(Protocol):
    """What the worker needs of a job queue (``storage.JobQueue`` is one).

    ``complete``, ``fail`` and ``renew`` return ``False`` when the claim is stale (another worker
    took the job over after our lease ran out): the worker then leaves the job to that worker.
    Retry delays and the attempt limit are the queue's.
    """

    def claim(
        self, worker_id: str, *, kinds: Sequence[str] | None = None, lease_seconds: float = 300
    ) -> Job | None:
        """Take the next due job, or ``None``."""
        ...

    def complete(self, job: Job) -> bool:
        """Mark a claimed job done."""
        ...

    def fail(self, job: Job, error: str) -> bool:
        """Record a failure; the queue schedules the retry or gives up."""
        ...

    def renew(self, job: Job, lease_seconds: float) -> bool:
        """Extend our lease on ``job``."""
        ...

    def pending(self, kind: str | None = None) -> int:
        """Count the pending jobs."""
        ...


class _Ledger:
    """Every call the worker makes to its queue, in one place.

    The storage layer's fencing (updates conditional on the claim) changes these calls, and
    only these calls.
    """

    def __init__(self, queue: Queue, worker_id: str, kinds: Sequence[str], lease: float) -> None:
        self._queue = queue
        self._worker_id = worker_id
        self._kinds = list(kinds)
        self.lease_seconds = lease

    def claim(self) -> Job | None:
        return self._queue.claim(
            self._worker_id, kinds=self._kinds, lease_seconds=self.lease_seconds
        )

    def complete(self, job: Job) -> bool:
        return self._queue.complete(job)

    def fail(self, job: Job, error: str) -> bool:
        return self._queue.fail(job, error)

    def renew(self, job: Job) -> bool:
        return self._queue.renew(job, self.lease_seconds)

    def release(self, job: Job) -> bool:
        # A lease that ends now: the job is claimable at once, and our claim still fences.
        return self._queue.renew(job, 0)

    def pending(self) -> int:
        return sum(self._queue.pending(kind) for kind in self._kinds)


class Worker:
    """Runs queued jobs; any number of workers on any number of machines may share one queue,
    since jobs are claimed with ``FOR UPDATE SKIP LOCKED``.

    Args:
        jobs: the queue.
        handlers: the handler of each job kind this worker runs (the table of what it knows).
        poll_seconds: how long to wait when no job is due.
        lease_seconds: how long a claimed job is ours; the lease is renewed every third of it
            while the job runs.
        outage_backoff_seconds: the first wait after the database could not be reached; it
            doubles with each failed try.
        max_outage_backoff_seconds: the longest wait between two tries during an outage.
        on_idle: run when no job is due (the first time this worker finds none, then at most
            every ``idle_task_seconds``); the jobs it queues are run next.
        idle_task_seconds: the least time between two runs of ``on_idle``.
        shutdown_grace_seconds: once ``stop`` is set, how long the running job may take before
            its lease is released, so another worker can take it over at once instead of
            waiting for the lease to run out (the job goes on; its outcome is stored only if
            no other worker claimed it meanwhile).
    """

    def __init__(
        self,
        jobs: Queue,
        handlers: Mapping[str, JobHandler],
        *,
        poll_seconds: float = 1.0,
        lease_seconds: float = 300.0,
        outage_backoff_seconds: float = 1.0,
        max_outage_backoff_seconds: float = 30.0,
        on_idle: IdleTask | None = None,
        idle_task_seconds: float = IDLE_TASK_SECONDS,
        shutdown_grace_seconds: float = SHUTDOWN_GRACE_SECONDS,
    ) -> None:
        self._handlers = dict(handlers)
        self._on_idle = on_idle
        self._idle_task_seconds = idle_task_seconds
        self._idle_task_ran: float | None = None
        self._poll_seconds = poll_seconds
        self._backoff = outage_backoff_seconds
        self._max_backoff = max_outage_backoff_seconds
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"
        self._ledger = _Ledger(jobs, self.worker_id, list(self._handlers), lease_seconds)
        #: A job that ran but whose outcome is not stored yet: (job, error or None).
        self._unsettled: tuple[Job, str | None] | None = None
        self._outage_tries = 0
        self._shutdown_grace = shutdown_grace_seconds
        #: The ``stop`` of the running ``run``: a job still running when it is set is released.
        self._stop: threading.Event | None = None
        #: Jobs whose lease was released because they outlasted the shutdown grace.
        self.released = 0
        #: Jobs that raised, since this worker started (each was logged and re-queued).
        self.failures = 0
        #: Runs of the idle task that raised (each logged).
        self.idle_task_failures = 0
        #: Database outages this worker has lived through (each logged once).
        self.outages = 0
        #: Queue calls that failed because the database could not be reached.
        self.database_errors = 0

    def run_once(self) -> bool:
        """Claim and run one due job; ``False`` when none was due.

        Raises:
            storage.DatabaseUnavailableError: the database could not be reached; a job that
                had run is settled by the next call that reaches it.
        """
        self._settle()
        job = self._ledger.claim()
        if job is None:
            return False
        try:
            with self._lease_kept(job):
                self._handlers[job.kind](job)
        except DatabaseUnavailableError as error:
            # The job's work is undone (its transaction rolled back): record the failure once
            # the database is back (the queue schedules the retry), not after the lease.
            self._unsettled = (job, f"database unavailable: {error}")
            raise
        except SessionErasedError:
            # ``forget`` ran while the job worked: what it made is not stored (each derived
            # write checks), and there is nothing left to redo. The job is done.
            logger.info(
                "job %s: session %s was erased meanwhile; result dropped", job.id, job.session_id
            )
            self._unsettled = (job, None)
        except Exception as error:
            # Degradation point: one session's failure must not stop the worker serving the
            # others. The summariser never raises for LLM failures, so this is a database or
            # data problem; the job goes back to the queue and the messages are untouched.
            logger.exception("job %s for session %s failed", job.id, job.session_id)
            self.failures += 1
            self._unsettled = (job, repr(error))
        else:
            self._unsettled = (job, None)
        self._settle()
        return True

    def run(self, stop: threading.Event, *, until_idle: bool = False) -> None:
        """Run jobs until ``stop`` is set, or, with ``until_idle``, until none is pending.

        A job already running when ``stop`` is set is finished (and its outcome stored) first.
        With ``until_idle`` a job that failed is not waited for again: the call returns once
        nothing else is due, and the job stays queued for its retry.

        Raises:
            storage.DatabaseUnavailableError: with ``until_idle`` only, the database could not
                be reached (a script wants to know; a long-running worker waits it out).
        """
        failures_before = self.failures
        self._stop = stop
        while not stop.is_set():
            try:
                if self.run_once() or self._run_idle_task():
                    self._database_back()
                    continue
                idle = until_idle and (
                    self._ledger.pending() == 0 or self.failures > failures_before
                )
            except DatabaseUnavailableError as error:
                self.database_errors += 1
                if until_idle:
                    raise
                stop.wait(self._database_gone(error))
                continue
            self._database_back()
            if idle:
                return
            # A pending job that is not yet due was debounced: wait for it.
            stop.wait(self._poll_seconds)

    def _run_idle_task(self) -> bool:
        """Run the idle task if it is due; whether it queued jobs.

        Raises:
            storage.DatabaseUnavailableError: the database could not be reached.
        """
        if self._on_idle is None:
            return False
        now = time.monotonic()
        if self._idle_task_ran is not None and now - self._idle_task_ran < self._idle_task_seconds:
            return False
        self._idle_task_ran = now
        try:
            return self._on_idle() > 0
        except DatabaseUnavailableError:
            raise
        except Exception:
            # Degradation point: the sweep is housekeeping; the jobs must go on. It is tried
            # again at its next turn.
            logger.exception("the idle task failed")
            self.idle_task_failures += 1
            return False

    def _settle(self) -> None:
        """Store the outcome of the job that last ran, if the database has not taken it yet."""
        if self._unsettled is None:
            return
        job, error = self._unsettled
        ours = self._ledger.complete(job) if error is None else self._ledger.fail(job, error)
        self._unsettled = None
        if not ours:
            logger.warning(
                "job %s: our claim went stale; the worker that took it over decides", job.id
            )

    @contextmanager
    def _lease_kept(self, job: Job) -> Iterator[None]:
        """Renew the job's lease every third of it while the job runs."""
        done = threading.Event()
        thread = threading.Thread(
            target=self._renew_until, args=(job, done), name=f"lease-{job.id}", daemon=True
        )
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()

    def _renew_until(self, job: Job, done: threading.Event) -> None:
        renew_every = self._ledger.lease_seconds / 3
        next_renewal = time.monotonic() + renew_every
        while True:
            if self._stop is not None and self._stop.is_set():
                if not done.wait(self._shutdown_grace):
                    self._release(job)
                return
            if done.wait(min(_STOP_POLL_SECONDS, max(next_renewal - time.monotonic(), 0))):
                return
            if time.monotonic() < next_renewal:
                continue
            next_renewal += renew_every
            try:
                if not self._ledger.renew(job):
                    logger.warning("job %s: lease lost to another worker", job.id)
                    return
            except DatabaseUnavailableError as error:
                # The job's own queries fail the same way; the main loop handles the outage.
                logger.debug("job %s: lease not renewed: %s", job.id, error)

    def _release(self, job: Job) -> None:
        """Hand a job that outlasted the shutdown grace to the next worker that looks."""
        try:
            released = self._ledger.release(job)
        except DatabaseUnavailableError as error:
            logger.warning("job %s: lease not released (database unavailable): %s", job.id, error)
            return
        if released:
            self.released += 1
            logger.warning(
                "job %s: still running %.0f s after the stop; its lease is released, so another "
                "worker can take it over now",
                job.id,
                self._shutdown_grace,
            )

    def _database_gone(self, error: DatabaseUnavailableError) -> float:
        """Log the outage once, and return how long to wait before the next try."""
        if self._outage_tries == 0:
            self.outages += 1
            # One line in the log (driver messages run over several); the whole at debug level.
            reason = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
            logger.error("database unavailable, retrying with backoff until it is back: %s", reason)
            logger.debug("database outage: %s", error)
        wait: float = min(self._backoff * 2.0 ** min(self._outage_tries, 30), self._max_backoff)
        self._outage_tries += 1
        return wait

    def _database_back(self) -> None:
        if self._outage_tries:
            logger.warning("database reachable again after %d tries", self._outage_tries)
            self._outage_tries = 0


def lower_process_priority(niceness: int) -> None:
    """Run every thread of this process, and the threads they start, at ``niceness`` at least.

    For a process that only works jobs (``stratamem worker``): its card embedding then gives
    the cores to requests while they want them, and runs at full speed otherwise
    (BENCHMARKS.md, "Where a quiet prepare waits"). Linux keeps a niceness per thread, so each
    thread is lowered (``/proc/self/task``); elsewhere the calling thread's call covers the
    process. Not for a worker thread inside a process that serves requests: a lowered thread
    holding Python's GIL would hold up the requests' threads. Where lowering is refused, a
    warning is logged and the process runs as it is.
    """
    if niceness <= 0 or not hasattr(os, "setpriority"):
        return
    try:
        threads = [int(task) for task in os.listdir("/proc/self/task")]
    except OSError:  # no /proc: the calling process
        threads = [0]
    for thread in threads:
        try:
            if os.getpriority(os.PRIO_PROCESS, thread) < niceness:
                os.setpriority(os.PRIO_PROCESS, thread, niceness)
        except ProcessLookupError:  # a thread that ended meanwhile
            continue
        except OSError:  # not permitted here (a sandbox)
            logger.warning("the worker could not lower its priority to niceness %d", niceness)
            return

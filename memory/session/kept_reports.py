"""``ReportKeeper``: each ``prepare``'s report kept for the inspector page, off the request path.

``prepare`` hands its report over and returns: the report goes into a bounded queue in memory,
and one thread writes what is queued in batches (``storage.reports``), each session keeping its
newest ``reports.keep``. The request never waits for the database on the report's account; what
it pays is one append under a lock (the report is turned into JSON by the thread).

What can be lost, by design (a kept report is a debugging aid, never what the model saw):
- the reports still queued when the process dies without ``Memory.close`` (at most
  ``reports.queue``; ``close`` writes them first);
- a report that finds the queue full (the database slower than the requests): counted in
  ``unkept``, never waited for;
- a batch the database refused or could not take: logged (without content) and counted in
  ``unkept``.
A report of a session erased since it was assembled is not stored (``ReportStore.keep``).

The thread starts with the first report and ends after ``IDLE_EXIT_S`` without one, so a
``Memory`` that is never closed leaves no thread waiting forever.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from datetime import UTC, datetime

from memory.context.report import ContextReport
from memory.settings import ReportSettings
from storage import StorageError
from storage.reports import NewReport, ReportStore

__all__ = ["IDLE_EXIT_S", "ReportKeeper"]

logger = logging.getLogger(__name__)

#: The writer thread ends after this long without a report to write (the next one starts it).
IDLE_EXIT_S = 5.0
#: Reports written in one transaction, at most.
_BATCH = 200
#: The longest ``flush`` and ``close`` wait for the writer (a database that hangs).
_WAIT_LIMIT_S = 60.0

_Queued = tuple[str, str, datetime, ContextReport]


class ReportKeeper:
    """Keeps reports of ``prepare`` through a bounded queue and one writer thread.

    Attributes:
        unkept: reports left unkept (queue full, or the database failed while writing them).
    """

    def __init__(self, store: ReportStore, settings: ReportSettings) -> None:
        self._store = store
        self._settings = settings
        self._pending: deque[_Queued] = deque()
        self._changed = threading.Condition()
        self._writer: threading.Thread | None = None
        # Reports handed over, and reports written or given up on: a flush waits for the
        # second to reach what the first was when it was called.
        self._handed = 0
        self._finished = 0
        self._closed = False
        self.unkept = 0

    def keep(self, user_id: str, session_id: str, report: ContextReport) -> None:
        """Queue a request's report for writing; never blocks on the database.

        A report assembled from no stored message (``report.newest`` is ``None``) names no
        point of the session and is not kept.
        """
        if report.newest is None:
            return
        with self._changed:
            if self._closed:
                return
            if len(self._pending) >= self._settings.queue:
                self.unkept += 1
                return
            self._pending.append((user_id, session_id, datetime.now(UTC), report))
            self._handed += 1
            self._changed.notify_all()
            if self._writer is None:
                self._writer = threading.Thread(
                    target=self._write_until_idle, name="stratamem-reports", daemon=True
                )
                self._writer.start()

    def flush(self) -> None:
        """Return once every report handed over before this call is written (or given up on)."""
        with self._changed:
            target = self._handed
            self._changed.wait_for(lambda: self._finished >= target, timeout=_WAIT_LIMIT_S)

    def close(self) -> None:
        """Write what is queued, then stop keeping: later reports are ignored."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
            writer = self._writer
        if writer is not None:
            writer.join(_WAIT_LIMIT_S)

    def _write_until_idle(self) -> None:
        """The writer thread: write queued batches until none came for ``IDLE_EXIT_S``."""
        while True:
            with self._changed:
                if not self._pending and not self._closed:
                    self._changed.wait(IDLE_EXIT_S)
                if not self._pending:
                    self._writer = None
                    return
                batch = [self._pending.popleft() for _ in range(min(_BATCH, len(self._pending)))]
            try:
                kept = self._write(batch)
            except BaseException:
                # A bug (a report that is no JSON, say): this thread ends, so what is queued
                # is given up on and counted, and the next report starts a new writer; a
                # flush waiting for these returns at once rather than at its time limit.
                with self._changed:
                    lost = len(batch) + len(self._pending)
                    self._pending.clear()
                    self.unkept += lost
                    self._finished += lost
                    self._writer = None
                    self._changed.notify_all()
                raise
            with self._changed:
                self.unkept += len(batch) - kept
                self._finished += len(batch)
                self._changed.notify_all()
            # Not kept alive while the thread waits up to IDLE_EXIT_S: its reports hold what
            # the users said, and a forget expects this process to hold none of it.
            del batch

    def _write(self, batch: list[_Queued]) -> int:
        """Store one batch; how many reports were written or deliberately left out.

        A documented degradation point: a database error loses this batch (logged without
        content, counted in ``unkept``); the requests it came from have long been answered.
        """
        reports = [
            NewReport(
                user_id=user_id,
                session_id=session_id,
                prepared_at=prepared_at,
                newest_seq=report.newest.seq,
                newest_id=report.newest.id,
                report=report.to_dict(),
            )
            for user_id, session_id, prepared_at, report in batch
            if report.newest is not None
        ]
        try:
            self._store.keep(reports, per_session=self._settings.keep)
        except StorageError as error:
            logger.warning("could not keep %d request report(s): %s", len(reports), error)
            return 0
        # Reports of sessions erased since were left out on purpose: not a loss to count.
        return len(batch)

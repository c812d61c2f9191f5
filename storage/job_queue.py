"""``JobQueue``: debounced background jobs, claimed with fenced leases by any number of workers."""

import json
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import Connection, TextClause, text
from sqlalchemy.exc import IntegrityError

from storage.engine import Database
from storage.errors import InvalidInputError, StorageError
from storage.inputs import check_id
from storage.records import Job

__all__ = ["JobQueue"]

#: Longest ``last_error`` kept, in characters: enough for a traceback's last line, bounded.
MAX_ERROR_CHARS = 2_000

# The status is a literal: Postgres matches a partial index's predicate by its text.
_PRUNE = {
    status: text(
        "DELETE FROM jobs WHERE (user_id, id) IN (SELECT user_id, id FROM jobs WHERE status = "
        f"'{status}' AND updated_at < now() - make_interval(secs => :seconds) "
        "LIMIT :limit FOR UPDATE SKIP LOCKED)"
    )
    for status in ("done", "failed")
}

# The params arrive as JSON text and are cast on the server. ``status = 'pending'`` is a
# literal, not a bound parameter: Postgres matches the partial index's predicate by its text,
# and a prepared statement would hide the value. xmax is 0 only for a row version created by an
# INSERT: Postgres's way to tell an insert from the update arm of an upsert.
_ENQUEUE = text(
    "INSERT INTO jobs (user_id, kind, session_id, run_after, params) "
    "VALUES (:user_id, :kind, :session_id, now() + CAST(:delay AS interval), "
    "CAST(:params AS jsonb)) "
    "ON CONFLICT (user_id, session_id, kind) WHERE status = 'pending' DO UPDATE SET "
    "run_after = CASE WHEN jobs.attempts > 0 THEN jobs.run_after "
    "ELSE least(jobs.run_after, now() + CAST(:delay AS interval)) END, "
    "params = jobs.params || excluded.params, updated_at = now() "
    "RETURNING xmax = 0"
)


def _claim(of_kinds: str) -> str:
    return (
        "UPDATE jobs SET status = 'running', attempts = jobs.attempts + 1, "
        "claimed_by = :worker_id, lease_until = now() + CAST(:lease AS interval), "
        "updated_at = now() "
        "FROM (SELECT user_id, id FROM jobs "
        "WHERE (status = 'pending' AND run_after <= now() "
        f"OR status = 'running' AND lease_until <= now()){of_kinds} "
        "ORDER BY run_after, id LIMIT 1 FOR UPDATE SKIP LOCKED) AS next_job "
        "WHERE jobs.user_id = next_job.user_id AND jobs.id = next_job.id "
        "RETURNING jobs.id, jobs.kind, jobs.user_id, jobs.session_id, jobs.attempts, jobs.params"
    )


# Of any kind, or of the kinds given.
_CLAIM = {False: text(_claim("")), True: text(_claim(" AND kind = ANY(CAST(:kinds AS text[]))"))}

_PENDING = {
    False: text("SELECT count(*) FROM jobs WHERE status = 'pending'"),
    True: text("SELECT count(*) FROM jobs WHERE status = 'pending' AND kind = :kind"),
}

# How long the job due longest has waited to be claimed, by the database clock (the claim's
# order: the first row of ``ix_jobs_status_run_after`` past ``pending``).
_LONGEST_UNCLAIMED = text(
    "SELECT extract(epoch FROM now() - run_after) FROM jobs "
    "WHERE status = 'pending' AND run_after <= now() ORDER BY run_after LIMIT 1"
)

# The fence: the job row is still running under the claim (``JobQueue``'s docstring).
_CLAIMED = (
    "user_id = :user_id AND id = :id AND status = 'running' "
    "AND claimed_by = :claimed_by AND attempts = :attempts"
)
_RENEW = text(
    "UPDATE jobs SET lease_until = now() + CAST(:lease AS interval), updated_at = now() "
    f"WHERE {_CLAIMED}"
)
_FINISH = text(
    "UPDATE jobs SET status = :status, lease_until = NULL, last_error = :last_error, "
    f"updated_at = now() WHERE {_CLAIMED}"
)
_LOCK_CLAIMED = text(f"SELECT id FROM jobs WHERE {_CLAIMED} FOR UPDATE")
_PENDING_SIBLING = text(
    "SELECT id, run_after FROM jobs WHERE user_id = :user_id AND session_id = :session_id "
    "AND kind = :kind AND status = 'pending' FOR UPDATE"
)
_DELETE_JOB = text("DELETE FROM jobs WHERE user_id = :user_id AND id = :id")
# greatest() leaves out a NULL: without a sibling the retry is simply ``delay`` from now.
_RETRY = text(
    "UPDATE jobs SET status = 'pending', "
    "run_after = greatest(now() + CAST(:delay AS interval), "
    "CAST(:sibling_run_after AS timestamptz)), "
    "lease_until = NULL, last_error = :last_error, updated_at = now() "
    "WHERE user_id = :user_id AND id = :id"
)


class JobQueue:
    """Jobs on sessions, such as "fold what left the window into the summary".

    A job is ``pending`` until a worker claims it (``running``, with a lease), then ``done``,
    ``pending`` again to be retried after a backoff, or ``failed`` for good once it has been
    tried ``max_attempts`` times (its last error is kept). All times come from the database
    clock, so workers on machines with skewed clocks agree.

    Every update of a claimed job (``renew``, ``complete``, ``fail``) is fenced by its claim:
    it applies only while the job is still running under the same claim (``claimed_by`` and the
    claim number ``attempts``). A worker whose lease ran out and whose job was claimed by
    another worker gets False and changes nothing.
    """

    def __init__(
        self,
        database: Database,
        *,
        retry_base_seconds: float = 30.0,
        retry_max_seconds: float = 3_600.0,
        max_attempts: int = 6,
    ) -> None:
        """Create a queue on an open database.

        Args:
            database: The database to use.
            retry_base_seconds: Delay before the first retry; each further retry waits twice
                as long as the one before (30 s, 60 s, 120 s, ... by default).
            retry_max_seconds: The longest delay between two attempts (an hour by default).
            max_attempts: How many times a job is tried before it is marked ``failed``
                (6 by default: the last retry comes about 15 minutes after the first failure).

        Raises:
            InvalidInputError: A delay is negative or ``max_attempts`` is below 1.
        """
        if retry_base_seconds < 0 or retry_max_seconds < 0 or max_attempts < 1:
            raise InvalidInputError("retry delays must be >= 0 and max_attempts >= 1")
        self._database = database
        self._retry_base_seconds = retry_base_seconds
        self._retry_max_seconds = retry_max_seconds
        self.max_attempts = max_attempts

    def retry_delay(self, attempts: int) -> timedelta:
        """Return how long a job that failed on its ``attempts``-th try waits before the next.

        Args:
            attempts: The number of the failed attempt (1 for the first).

        Returns:
            ``retry_base_seconds * 2 ** (attempts - 1)``, at most ``retry_max_seconds``.
        """
        # The exponent is capped so a huge attempt count cannot overflow the float.
        doubling = 2.0 ** min(max(attempts - 1, 0), 64)
        return timedelta(seconds=min(self._retry_base_seconds * doubling, self._retry_max_seconds))

    def enqueue(
        self,
        kind: str,
        user_id: str,
        session_id: str,
        *,
        delay_seconds: float = 0.0,
        params: Mapping[str, Any] | None = None,
    ) -> bool:
        """Ask for a job to run ``delay_seconds`` from now, merging with a pending one.

        Args:
            kind: What the job does.
            user_id: The user the session belongs to.
            session_id: The session the job works on.
            delay_seconds: How long to wait before the job may be claimed.
            params: JSON the job runs with (``Job.params``). Merged into a pending job's
                params key by key, the newest value of a key winning; a key left out keeps
                the pending job's value.

        Returns:
            True when a job was created; False when a pending job of this kind already existed
            for the session. A pending job that was never tried keeps the earlier of its time
            and ``delay_seconds`` from now, so requests arriving faster than the delay cannot
            postpone it forever. A pending job that is waiting for a retry keeps its time:
            new messages never bring a failing job forward.

        Raises:
            InvalidInputError: An id or the kind is not usable.
        """
        check_id("kind", kind)
        check_id("user_id", user_id)
        check_id("session_id", session_id)
        values = {
            "kind": kind,
            "user_id": user_id,
            "session_id": session_id,
            "delay": timedelta(seconds=delay_seconds),
            "params": json.dumps(dict(params or {})),
        }
        with self._database.transaction() as connection:
            return bool(connection.scalar(_ENQUEUE, values))

    def claim(
        self, worker_id: str, *, kinds: Sequence[str] | None = None, lease_seconds: float = 300
    ) -> Job | None:
        """Take the next due job: pending and due, or running with an expired lease.

        ``FOR UPDATE SKIP LOCKED`` lets concurrent workers each take a different job without
        waiting for each other. A job whose worker died (even by SIGKILL) becomes claimable
        again when its lease runs out; the new claim counts as a new attempt.

        Args:
            worker_id: Who claims the job; part of the claim that fences later updates.
            kinds: Only claim jobs of these kinds; any kind when None.
            lease_seconds: How long the job is ours before another worker may take it over;
                extend it with ``renew`` while working.

        Returns:
            The claimed job, or None when no job is due.

        Raises:
            InvalidInputError: ``worker_id`` is not a usable id.
        """
        check_id("worker_id", worker_id)
        values = {
            "worker_id": worker_id,
            "lease": timedelta(seconds=lease_seconds),
            "kinds": None if kinds is None else list(kinds),
        }
        with self._database.transaction() as connection:
            row = connection.execute(_CLAIM[kinds is not None], values).one_or_none()
        if row is None:
            return None
        return Job(
            id=row.id,
            kind=row.kind,
            user_id=row.user_id,
            session_id=row.session_id,
            attempts=row.attempts,
            claimed_by=worker_id,
            params=row.params,
        )

    def renew(self, job: Job, lease_seconds: float) -> bool:
        """Extend the lease of a claimed job to ``lease_seconds`` from now.

        Args:
            job: The job as claimed.
            lease_seconds: The new lease, counted from now.

        Returns:
            True when the lease was extended; False when the claim is lost (the job was
            claimed again by another worker after the lease ran out, or is finished).
        """
        return self._update_claimed(job, _RENEW, lease=timedelta(seconds=lease_seconds))

    def complete(self, job: Job) -> bool:
        """Mark a claimed job done.

        Returns:
            True when the job was marked done; False when the claim is lost (see ``renew``),
            in which case nothing changed.
        """
        return self._update_claimed(job, _FINISH, status="done", last_error=None)

    def fail(self, job: Job, error: str) -> bool:
        """Record a failed attempt: retry the job after a backoff, or give up on it.

        The retry waits ``retry_delay(job.attempts)``. After ``max_attempts`` attempts the job
        is marked ``failed`` with ``error`` kept in ``last_error``. When another pending job of
        the same kind already waits for the session (enqueued while this one ran), the two are
        merged: the retry keeps this job's attempt count and the later of the two times, so
        new messages never reset or shorten the backoff. A job failed for good stays failed; a
        job of the same kind enqueued for the session afterwards (new messages may change the
        outcome) counts its own attempts.

        Args:
            job: The job as claimed.
            error: What went wrong; cut to ``MAX_ERROR_CHARS`` characters.

        Returns:
            True when the failure was recorded; False when the claim is lost (see ``renew``),
            in which case nothing changed.
        """
        last_error = _error_text(error)
        if job.attempts >= self.max_attempts:
            return self._update_claimed(job, _FINISH, status="failed", last_error=last_error)
        delay = self.retry_delay(job.attempts)
        with self._database.transaction() as connection:
            if not _lock_claimed(connection, job):
                return False
            # A sibling enqueued (and committed) after our look turns the update into a
            # unique violation of the one-pending-job index: look again and merge it.
            for _ in range(2):
                try:
                    with connection.begin_nested():
                        _retry_merging_sibling(connection, job, delay, last_error)
                    return True
                except IntegrityError:
                    continue
        raise StorageError(f"job {job.id}: could not record its failure (sibling races)")

    def prune(
        self, *, done_seconds: float, failed_seconds: float, limit: int = 10_000, batch: int = 1_000
    ) -> int:
        """Delete the jobs done over ``done_seconds`` ago and those failed for good over
        ``failed_seconds`` ago (by their last update, on the database clock): at most
        ``limit``, ``batch`` rows per transaction (a job another transaction holds is left),
        by the index of finished jobs. A call is bounded; the next one takes the rest.

        Returns:
            How many jobs were deleted.

        Raises:
            InvalidInputError: A retention or a bound is negative.
        """
        if min(done_seconds, failed_seconds, limit) < 0 or batch < 1:
            raise InvalidInputError("retentions and limits must be >= 0 and batch >= 1")
        deleted = 0
        for status, seconds in (("done", done_seconds), ("failed", failed_seconds)):
            while deleted < limit:
                size = min(batch, limit - deleted)
                with self._database.transaction() as connection:
                    result = connection.execute(_PRUNE[status], {"seconds": seconds, "limit": size})
                deleted += result.rowcount
                if result.rowcount < size:
                    break
        return deleted

    def pending(self, kind: str | None = None) -> int:
        """Count the pending jobs (due or not) of every user, of one kind or of all kinds."""
        with self._database.transaction() as connection:
            return int(connection.scalar(_PENDING[kind is not None], {"kind": kind}) or 0)

    def longest_unclaimed_seconds(self) -> float | None:
        """How long the job due longest (of any user and kind) has waited for a worker to
        claim it, in seconds by the database clock; ``None`` when no job is due.

        Workers claim a due job within their poll (a second by default), so a long wait says
        that no worker is running, or that the workers are behind.
        """
        with self._database.reading() as connection:
            waited = connection.scalar(_LONGEST_UNCLAIMED)
        return None if waited is None else float(waited)

    def _update_claimed(self, job: Job, statement: TextClause, **values: object) -> bool:
        """Run ``statement`` (``_RENEW``, ``_FINISH``) on the job if it is still running under
        this claim."""
        with self._database.transaction() as connection:
            result = connection.execute(statement, _claim_of(job) | values)
            return bool(result.rowcount)


def _claim_of(job: Job) -> dict[str, object]:
    """The parameters of ``_CLAIMED``: the job's row and its claim (the fence)."""
    return {
        "user_id": job.user_id,
        "id": job.id,
        "claimed_by": job.claimed_by,
        "attempts": job.attempts,
    }


def _lock_claimed(connection: Connection, job: Job) -> bool:
    """Lock the job row if it is still running under ``job``'s claim; whether it is."""
    return connection.execute(_LOCK_CLAIMED, _claim_of(job)).first() is not None


def _retry_merging_sibling(
    connection: Connection, job: Job, delay: timedelta, last_error: str
) -> None:
    """Make the job pending again ``delay`` from now, absorbing a pending sibling if there is
    one (then not before the sibling's time)."""
    where = {"user_id": job.user_id, "session_id": job.session_id, "kind": job.kind}
    sibling = connection.execute(_PENDING_SIBLING, where).first()
    if sibling is not None:
        # The sibling only asked for "run again after the new messages": the retry does that.
        connection.execute(_DELETE_JOB, {"user_id": job.user_id, "id": sibling.id})
    connection.execute(
        _RETRY,
        {
            "user_id": job.user_id,
            "id": job.id,
            "delay": delay,
            "sibling_run_after": None if sibling is None else sibling.run_after,
            "last_error": last_error,
        },
    )


def _error_text(error: str) -> str:
    """Make an error description storable: bounded, no NUL, no lone surrogate."""
    clean = error.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")
    return clean if len(clean) <= MAX_ERROR_CHARS else clean[: MAX_ERROR_CHARS - 1] + "…"

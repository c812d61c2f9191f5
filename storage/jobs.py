"""``JobQueue``: debounced background jobs, claimed with leases by any number of workers."""

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import (
    Boolean,
    ColumnElement,
    and_,
    case,
    func,
    literal_column,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import IntegrityError

from storage.engine import Database
from storage.models import JobRow
from storage.records import Job

__all__ = ["JobQueue"]


class JobQueue:
    """Jobs on sessions, such as "fold what left the window into the summary".

    A job is ``pending`` until a worker claims it (``running``, with a lease), then ``done`` or
    ``failed``, or ``pending`` again to be retried. All times come from the database clock, so
    workers on machines with skewed clocks agree.
    """

    def __init__(self, database: Database) -> None:
        """Create a queue on an open database.

        Args:
            database: The database to use.
        """
        self._database = database

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
            for the session (it then keeps the earlier of its time and ``delay_seconds`` from
            now, so requests arriving faster than the delay cannot postpone it forever).
        """
        run_after = func.now() + timedelta(seconds=delay_seconds)
        new_job = insert(JobRow).values(
            kind=kind,
            user_id=user_id,
            session_id=session_id,
            run_after=run_after,
            params=dict(params or {}),
        )
        with self._database.transaction() as session:
            created = session.scalar(
                new_job.on_conflict_do_update(
                    index_elements=[JobRow.kind, JobRow.session_id],
                    # A literal, not a bound parameter: Postgres matches the partial index's
                    # predicate by its text, and a prepared statement would hide the value.
                    index_where=text("status = 'pending'"),
                    # Keep the earlier time: a busy session must not push its job back forever.
                    set_={
                        "run_after": func.least(JobRow.run_after, run_after),
                        "params": JobRow.params.op("||")(new_job.excluded.params),
                        "updated_at": func.now(),
                    },
                )
                # xmax is 0 only for a row version created by an INSERT: Postgres's way to
                # tell an insert from the update arm of an upsert.
                .returning(literal_column("xmax = 0", Boolean))
            )
            return bool(created)

    def claim(
        self, worker_id: str, *, kinds: Sequence[str] | None = None, lease_seconds: float = 300
    ) -> Job | None:
        """Take the next due job: pending and due, or running with an expired lease.

        ``FOR UPDATE SKIP LOCKED`` lets concurrent workers each take a different job without
        waiting for each other. A job whose worker died (even by SIGKILL) becomes claimable
        again when its lease runs out.

        Args:
            worker_id: Who claims the job, recorded for diagnosis.
            kinds: Only claim jobs of these kinds; any kind when None.
            lease_seconds: How long the job is ours before another worker may take it over.

        Returns:
            The claimed job, or None when no job is due.
        """
        due: ColumnElement[bool] = or_(
            and_(JobRow.status == "pending", JobRow.run_after <= func.now()),
            and_(JobRow.status == "running", JobRow.lease_until <= func.now()),
        )
        if kinds is not None:
            due = and_(due, JobRow.kind.in_(list(kinds)))
        next_job = (
            select(JobRow.id)
            .where(due)
            .order_by(JobRow.run_after, JobRow.id)
            .limit(1)
            .with_for_update(skip_locked=True)
            .scalar_subquery()
        )
        with self._database.transaction() as session:
            row = session.execute(
                update(JobRow)
                .where(JobRow.id == next_job)
                .values(
                    status="running",
                    attempts=JobRow.attempts + 1,
                    claimed_by=worker_id,
                    lease_until=func.now() + timedelta(seconds=lease_seconds),
                    updated_at=func.now(),
                )
                .returning(
                    JobRow.id,
                    JobRow.kind,
                    JobRow.user_id,
                    JobRow.session_id,
                    JobRow.attempts,
                    JobRow.params,
                )
                .execution_options(synchronize_session=False)
            ).one_or_none()
            if row is None:
                return None
            return Job(
                id=row.id,
                kind=row.kind,
                user_id=row.user_id,
                session_id=row.session_id,
                attempts=row.attempts,
                params=row.params,
            )

    def complete(self, job_id: int) -> None:
        """Mark a claimed job done."""
        self._finish(job_id, status="done", last_error=None)

    def fail(self, job_id: int, error: str, *, retry_in_seconds: float | None) -> None:
        """Record a failure; retry the job after ``retry_in_seconds``, or give up when None.

        When another pending job of the same kind already waits for the session, that job
        will do the work: this one is marked failed rather than retried twice.

        Args:
            job_id: The claimed job.
            error: What went wrong, kept in ``last_error``.
            retry_in_seconds: Delay before the retry, or None to mark the job failed for good.
        """
        if retry_in_seconds is None:
            self._finish(job_id, status="failed", last_error=error)
            return
        sibling = JobRow.__table__.alias("sibling")
        pending_sibling = (
            select(sibling.c.id)
            .where(
                sibling.c.kind == JobRow.kind,
                sibling.c.session_id == JobRow.session_id,
                sibling.c.status == "pending",
            )
            .exists()
        )
        statement = (
            update(JobRow)
            .where(JobRow.id == job_id)
            .values(
                status=case((pending_sibling, "failed"), else_="pending"),
                run_after=func.now() + timedelta(seconds=retry_in_seconds),
                lease_until=None,
                last_error=error,
                updated_at=func.now(),
            )
            .execution_options(synchronize_session=False)
        )
        # A sibling enqueued between our check and our write makes the update violate the
        # one-pending-job index; the second attempt sees it and marks this job failed.
        for attempt in range(2):
            try:
                with self._database.transaction() as session:
                    session.execute(statement)
                return
            except IntegrityError:
                if attempt == 1:
                    raise

    def pending(self, kind: str | None = None) -> int:
        """Count the pending jobs (due or not), of one kind or of all kinds."""
        query = select(func.count()).select_from(JobRow).where(JobRow.status == "pending")
        if kind is not None:
            query = query.where(JobRow.kind == kind)
        with self._database.transaction() as session:
            return int(session.scalar(query) or 0)

    def _finish(self, job_id: int, *, status: str, last_error: str | None) -> None:
        with self._database.transaction() as session:
            session.execute(
                update(JobRow)
                .where(JobRow.id == job_id)
                .values(
                    status=status,
                    lease_until=None,
                    last_error=last_error,
                    updated_at=func.now(),
                )
                .execution_options(synchronize_session=False)
            )

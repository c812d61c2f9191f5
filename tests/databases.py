"""A database of a test module's own, on the test run's shared embedded server; the jobs a test
leaves queued; how many rows a user has in each table; and how a test takes an embedded server
down as an outage would."""

import contextlib
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

import psutil
from sqlalchemy import make_url, text

from storage import Database
from storage.embedded.programs import run_program, server_account


@contextlib.contextmanager
def own_database(database: Database, prefix: str) -> Iterator[Database]:
    """A new database on ``database``'s server, dropped afterwards.

    For tests that run a worker: the job queue and the idle-session sweep are global, so a
    worker on the shared database would also take what other test modules left behind.
    """
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = database.engine.execution_options(isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    opened = Database.open(make_url(database.url).set(database=name).render_as_string(False))
    try:
        yield opened
    finally:
        opened.close()
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))


def last_job_id(database: Database) -> int:
    """The id of the newest job in ``database``'s queue (0 when it never held one)."""
    with database.engine.connect() as connection:
        return int(connection.scalar(text("SELECT coalesce(max(id), 0) FROM jobs")))


def drop_pending_jobs(database: Database, *, after: int = 0) -> int:
    """Delete the jobs queued after job ``after`` that no worker has taken; how many.

    The job queue is global: what a test queues and leaves (no worker runs in most tests) is
    taken by the next worker that runs until idle on the same database, in whatever module.
    A job a worker holds already is left to it.
    """
    with database.engine.begin() as connection:
        deleted = connection.execute(
            text("DELETE FROM jobs WHERE status = 'pending' AND id > :after"), {"after": after}
        )
    return deleted.rowcount


def user_rows(database: Database, user_id: str, tables: Iterable[str]) -> dict[str, int]:
    """How many rows each of ``tables`` holds for the user (0 everywhere once forgotten)."""
    with database.engine.connect() as connection:
        return {
            table: int(
                connection.scalar(
                    text(f"SELECT count(*) FROM {table} WHERE user_id = :u"), {"u": user_id}
                )
            )
            for table in tables
        }


def postmaster(data_folder: Path) -> psutil.Process | None:
    """The running postmaster of the embedded server in ``data_folder``, if any."""
    try:
        pid = int((data_folder / "postmaster.pid").read_text().split()[0])
        return psutil.Process(pid)
    except (FileNotFoundError, psutil.NoSuchProcess):
        return None


def crash_embedded(data_folder: Path, how: str) -> int:
    """Take the embedded server in ``data_folder`` down as an outage would; its old pid.

    ``immediate`` is ``pg_ctl stop -m immediate`` (sessions cut, no checkpoint: the next start
    replays the WAL); ``kill`` is SIGKILL to the postmaster, which leaves its ``postmaster.pid``
    and socket behind. Returns once every process of the server is gone.
    """
    running = postmaster(data_folder)
    assert running is not None, "no server runs there"
    children = running.children()
    if how == "immediate":
        run_program(server_account(), data_folder, "pg_ctl", "-m", "immediate", "-w", "stop")
    else:
        assert how == "kill", how
        running.kill()
    # pg_ctl returns once postmaster.pid is gone, a moment before the process itself.
    psutil.wait_procs([running, *children], timeout=60)
    assert not running.is_running()
    return running.pid

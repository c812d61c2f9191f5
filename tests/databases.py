"""A database of a test module's own, on the test run's shared embedded server."""

import contextlib
import uuid
from collections.abc import Iterator

from sqlalchemy import make_url, text

from storage import Database


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

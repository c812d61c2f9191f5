"""The ``Database`` handle: an engine on a given URL or on an embedded Postgres in a data folder."""

import select
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import platformdirs
import psycopg
from filelock import Timeout
from sqlalchemy import URL, Connection, Engine, create_engine, event, make_url
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError, DisconnectionError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from storage.embedded import server as embedded
from storage.errors import DatabaseUnavailableError, describe, shorten, storage_error
from storage.migrations import migrate

__all__ = ["Database", "default_data_dir", "embedded_lock_path", "stop_embedded"]

#: URL schemes that name PostgreSQL, and the drivers given psycopg 3 in their place.
_POSTGRES_SCHEMES = frozenset({"postgres", "postgresql"})
_PSYCOPG_DRIVERS = frozenset({"", "psycopg", "psycopg2"})
# Long enough for another process to run initdb and start the server (about 1 s), short enough
# that a genuinely stuck lock surfaces as an error instead of a hang.
_LOCK_TIMEOUT_SECONDS = 120.0


def default_data_dir() -> Path:
    """Return the per-user folder the embedded database lives in by default.

    Returns:
        For example ``~/.local/share/stratamem`` on Linux.
    """
    return platformdirs.user_data_path("stratamem", appauthor=False)


class Database:
    """A migrated Postgres database: the SQLAlchemy engine plus how it was reached.

    Use ``Database.open`` to get one; ``close`` it (or use it as a context manager) when done.
    """

    def __init__(self, engine: Engine, *, data_folder: Path | None = None) -> None:
        """Wrap an engine whose database is already migrated; prefer ``Database.open``.

        Args:
            engine: The engine to use.
            data_folder: The embedded server's data folder, or None for a database given by URL.
        """
        self._engine = engine
        self._data_folder = data_folder
        # True while this handle counts as a user of the embedded server (see ``open``).
        self._holds_server = False
        # Reads on the hot path need no BEGIN/COMMIT round trips: each statement is its own
        # snapshot, which is all they need (stored messages never change).
        self._reader = engine.execution_options(isolation_level="AUTOCOMMIT")

    @classmethod
    def open(
        cls, url: str | None = None, *, data_dir: Path | None = None, pool_size: int = 10
    ) -> "Database":
        """Connect to a database (starting the embedded one when no URL is given) and migrate it.

        With ``url`` None, an embedded Postgres with pgvector runs in ``data_dir / "pg"``,
        reachable only by the account that owns the folder (see ``storage.embedded`` and
        its docs). It is started when no server runs there (never started, stopped, crashed),
        and joined when one does. Every process with an open handle is recorded next to the
        folder; closing the last handle of the last process stops the server, and records of
        processes that died without closing are ignored. A server that stops or dies while a
        handle is open is started again by the handle's next connection (see
        ``storage.embedded``). A handle opened by URL on the embedded server's socket does not
        count, and never starts the server.

        Args:
            url: A SQLAlchemy URL (``postgresql+psycopg://...``; ``postgres://``,
                ``postgresql://`` and ``postgresql+psycopg2://`` are given the psycopg 3
                driver), or None for the embedded database.
            data_dir: The folder of the embedded database; ``default_data_dir()`` when None.
                Ignored when ``url`` is given.
            pool_size: The size of the connection pool.

        Returns:
            An open, migrated database.

        Raises:
            DatabaseUnavailableError: The server could not be started or reached; the message
                names the data folder (embedded) or the URL without its password.
        """
        data_folder: Path | None = None
        if url is None:
            data_folder = (data_dir or default_data_dir()).expanduser().resolve() / "pg"
            target = _start_embedded(data_folder)
            where = f"embedded database in {data_folder}"
        else:
            target = _with_psycopg(make_url(url))
            where = f"database {target.render_as_string(hide_password=True)}"
        # hide_parameters: the SQL of a failed statement stays in the error for diagnosis, but
        # the values (message contents) never reach a log or a traceback. No pool_pre_ping:
        # it costs a round trip on every checkout; ``_refuse_closed`` checks locally instead.
        engine = create_engine(target, pool_size=pool_size, hide_parameters=True)
        event.listen(engine.pool, "checkout", _refuse_closed)
        try:
            migrate(engine)
        except (DBAPIError, PoolTimeoutError) as error:
            engine.dispose()
            if data_folder is not None:
                _release_embedded(data_folder)
            raise DatabaseUnavailableError(
                shorten(f"cannot use the {where}: {describe(error)}")
            ) from error
        database = cls(engine, data_folder=data_folder)
        database._holds_server = data_folder is not None
        if data_folder is not None:
            event.listen(engine, "do_connect", database._connect_or_restart)
        return database

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine, for storage repositories and tests."""
        return self._engine

    @property
    def url(self) -> str:
        """The URL of the database, password included, for other processes to connect to."""
        return self._engine.url.render_as_string(hide_password=False)

    @property
    def data_folder(self) -> Path | None:
        """The embedded server's data folder, or None when the database was given by URL."""
        return self._data_folder

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """Open a connection in a transaction, committed on success, rolled back on error.

        Yields:
            The connection; run SQL text on it with ``execute`` (docs/design.md, "Storage").

        Raises:
            DatabaseUnavailableError: The database could not be reached.
            InvalidInputError: The database rejected the data as invalid.
            StorageError: Any other database error.
        """
        try:
            with self._engine.begin() as connection:
                yield connection
        except (DBAPIError, PoolTimeoutError) as error:
            raise storage_error(error) from error

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        """Open a connection in autocommit mode, for reads whose statements stand alone.

        Yields:
            The connection; each statement sees the data committed when it starts.

        Raises:
            DatabaseUnavailableError: The database could not be reached.
            InvalidInputError: The database rejected the data as invalid.
            StorageError: Any other database error.
        """
        with self.autocommit() as connection:
            yield connection

    @contextmanager
    def autocommit(self) -> Iterator[Connection]:
        """Open a connection in autocommit mode: each statement is its own transaction.

        For a write that is one statement: it costs no BEGIN and no COMMIT round trip, and it
        is committed (durably: ``synchronous_commit`` is left on) when the statement returns.

        Yields:
            The connection.

        Raises:
            DatabaseUnavailableError: The database could not be reached.
            InvalidInputError: The database rejected the data as invalid.
            StorageError: Any other database error.
        """
        try:
            with self._reader.connect() as connection:
                yield connection
        except (DBAPIError, PoolTimeoutError) as error:
            raise storage_error(error) from error

    def close(self) -> None:
        """Close every pooled connection and give back this handle on the embedded server.

        The embedded server stops when this was the last handle of the last process using it.
        Closing twice is harmless.

        Raises:
            DatabaseUnavailableError: The embedded server could not be stopped.
        """
        self._engine.dispose()
        if self._holds_server and self._data_folder is not None:
            self._holds_server = False
            _release_embedded(self._data_folder)

    def _connect_or_restart(
        self, dialect: Dialect, record: Any, cargs: list[Any], cparams: dict[str, Any]
    ) -> Any:
        """Connect for the pool; start the embedded server again first if it has gone.

        A server that was stopped or died (its socket gone, or nobody listening on it) is
        started again while this handle is open, under the folder's lock (so concurrent
        processes start one server), and the connection is tried once more: a long-running
        process (the proxy, a worker, an application) goes on after its server was stopped.

        Raises:
            DatabaseUnavailableError: The server could not be started again.
        """
        try:
            return dialect.connect(*cargs, **cparams)
        except psycopg.OperationalError:
            if not self._holds_server or self._data_folder is None:
                raise
        # Outside the except block: the failed try is no part of what went wrong next.
        cparams["host"] = str(_restart_embedded(self._data_folder))
        return dialect.connect(*cargs, **cparams)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def embedded_lock_path(data_folder: Path) -> Path:
    """Return the lock file that serialises starting the server in ``data_folder``.

    Args:
        data_folder: The embedded server's data folder.

    Returns:
        A file next to the folder (inside it would race with its creation).
    """
    return embedded.lock_path(data_folder)


def stop_embedded(data_folder: Path) -> None:
    """Stop the embedded server in ``data_folder`` now, whoever uses it (tests, operators).

    Args:
        data_folder: The embedded server's data folder (``Database.data_folder``).

    Raises:
        DatabaseUnavailableError: The server could not be stopped.
    """
    try:
        embedded.stop(data_folder, lock_timeout=_LOCK_TIMEOUT_SECONDS)
    except (Timeout, OSError, RuntimeError) as error:
        raise DatabaseUnavailableError(
            shorten(f"cannot stop the embedded database in {data_folder}: {error}")
        ) from error


def _start_embedded(data_folder: Path) -> URL:
    """Start (or join) the embedded server in ``data_folder`` and return its psycopg URL."""
    try:
        socket_dir = embedded.acquire(data_folder, lock_timeout=_LOCK_TIMEOUT_SECONDS)
    except Timeout as error:
        raise DatabaseUnavailableError(
            f"timed out waiting for {embedded.lock_path(data_folder)} to start the embedded "
            f"database in {data_folder}"
        ) from error
    except (OSError, RuntimeError, subprocess.SubprocessError) as error:
        raise DatabaseUnavailableError(
            shorten(f"cannot start the embedded database in {data_folder}: {error}")
        ) from error
    return URL.create(
        "postgresql+psycopg",
        username="postgres",
        database="postgres",
        query={"host": str(socket_dir)},
    )


def _restart_embedded(data_folder: Path) -> Path:
    """Start the embedded server in ``data_folder`` again unless it runs; its socket folder."""
    try:
        return embedded.restart(data_folder, lock_timeout=_LOCK_TIMEOUT_SECONDS)
    except Timeout as error:
        raise DatabaseUnavailableError(
            f"timed out waiting for {embedded.lock_path(data_folder)} to restart the embedded "
            f"database in {data_folder}"
        ) from error
    except (OSError, RuntimeError, subprocess.SubprocessError) as error:
        raise DatabaseUnavailableError(
            shorten(f"the embedded database in {data_folder} stopped and cannot start: {error}")
        ) from error


def _release_embedded(data_folder: Path) -> None:
    """Give back a handle taken by ``_start_embedded`` (the last one stops the server)."""
    try:
        embedded.release(data_folder, lock_timeout=_LOCK_TIMEOUT_SECONDS)
    except (Timeout, OSError, RuntimeError) as error:
        raise DatabaseUnavailableError(
            shorten(f"cannot release the embedded database in {data_folder}: {error}")
        ) from error


def _refuse_closed(dbapi_connection: Any, record: Any, proxy: Any) -> None:
    """Pool checkout: refuse a connection the server has closed, without a round trip.

    A server that shuts down, restarts or ends a backend sends a last message and closes the
    socket, so an idle connection whose socket has anything to read is one the server gave up
    (an idle session is never sent anything else: stratamem does not ``LISTEN``). Raising
    ``DisconnectionError`` makes the pool throw it away and connect anew. This replaces
    ``pool_pre_ping``, which sends a ``SELECT 1`` before every use of a pooled connection.
    """
    if dbapi_connection.closed:
        raise DisconnectionError("the connection is closed")
    readable, _, _ = select.select([dbapi_connection.fileno()], [], [], 0)
    if readable:
        raise DisconnectionError("the server closed the connection")


def _with_psycopg(url: URL) -> URL:
    """Give a PostgreSQL URL the psycopg 3 driver stratamem is written for.

    ``postgres://`` (the scheme most providers hand out), ``postgresql://`` and the psycopg2
    driver SQLAlchemy would pick for them become ``postgresql+psycopg://``; other schemes and
    drivers are left alone (the settings refuse them before this is reached).
    """
    scheme, _, driver = url.drivername.partition("+")
    if scheme in _POSTGRES_SCHEMES and driver in _PSYCOPG_DRIVERS:
        return url.set(drivername="postgresql+psycopg")
    return url

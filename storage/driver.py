"""The pool's own psycopg connections, for the statements of the request path.

On a request's statements SQLAlchemy's execution context and result machinery cost more client
CPU than the rest of the statement's client side together (measured on ``prepare``'s statement:
0.45 of 0.8 ms; on a card search's two statements 1.5 ms in all), and they add nothing to a
fixed statement. ``driver_autocommit`` lends a pooled connection as psycopg's own, and
``driver_sql`` turns a statement written for SQLAlchemy's ``text`` (``:name`` parameters) into
the driver's (``%(name)s``), once per statement. psycopg prepares a statement on the server
once a connection has run it a few times, so the server plans it once per connection too.
"""

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

import psycopg
from psycopg.pq import TransactionStatus
from sqlalchemy import text
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from storage.engine import Database
from storage.errors import storage_error

__all__ = ["driver_autocommit", "driver_sql"]


@contextmanager
def driver_autocommit(database: Database) -> Iterator[psycopg.Connection[Any]]:
    """A pooled connection as psycopg's own, in autocommit mode, for one-statement requests.

    Each statement is its own transaction, committed (durably: ``synchronous_commit`` is left
    on) when it returns. The connection goes back to the pool afterwards, in the mode the
    pool's other users expect; one the server closed, or one left inside a statement, is
    thrown away instead.

    Raises:
        DatabaseUnavailableError: The database could not be reached.
        InvalidInputError: The database rejected the data as invalid.
        StorageError: Any other database error.
    """
    engine = database.engine
    try:
        pooled = engine.raw_connection()
    except (DBAPIError, PoolTimeoutError, psycopg.Error) as error:
        raise storage_error(error) from error
    connection = cast(psycopg.Connection[Any], pooled.driver_connection)
    try:
        connection.autocommit = True
        yield connection
    except psycopg.Error as error:
        raise storage_error(error) from error
    finally:
        if connection.closed or connection.info.transaction_status != TransactionStatus.IDLE:
            # The server closed it, or a statement was interrupted (KeyboardInterrupt) midway:
            # no other user of the pool may get it.
            pooled.invalidate()
        else:
            connection.autocommit = False
            pooled.close()


def driver_sql(database: Database, statement: str) -> str:
    """``statement``, written with ``:name`` parameters for SQLAlchemy's ``text``, in the
    driver's own parameter style (``%(name)s``; a literal ``%`` escaped), for
    ``driver_autocommit``'s connection."""
    return _compiled(database.engine.dialect, statement)


@functools.lru_cache(maxsize=256)
def _compiled(dialect: Dialect, statement: str) -> str:
    return str(text(statement).compile(dialect=dialect))

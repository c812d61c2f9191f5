"""Tests of the connection a request's one statement runs on (``driver_autocommit``).

It is the pool's own psycopg connection, lent in autocommit mode: errors must still arrive as
the storage errors every other path raises, and the connection must go back to the pool as
its other users expect it (in a transaction per ``Database.transaction``), or not at all when
the server closed it.
"""

from collections.abc import Iterator

import pytest
from psycopg._queries import MAX_CACHED_STATEMENT_LENGTH
from sqlalchemy import text
from storage_samples import user

from storage import (
    Database,
    DatabaseUnavailableError,
    InvalidInputError,
    MessageStore,
    StorageError,
)
from storage.driver import driver_autocommit
from storage.messages.request_statements import (
    APPEND,
    INPUT_AND_WINDOW,
    WINDOW,
    run_window_statement,
)


@pytest.fixture
def one_connection(database_url: str) -> Iterator[Database]:
    """A handle whose pool keeps one connection: each use gets the one the last returned."""
    with Database.open(database_url, pool_size=1) as opened:
        yield opened


def backend_pid(database: Database) -> int:
    with driver_autocommit(database) as connection:
        return connection.info.backend_pid


def test_each_statement_is_committed_on_its_own(
    one_connection: Database, user_id: str, session_id: str
) -> None:
    store = MessageStore(one_connection)
    store.append(user_id, session_id, [user("a")])

    with driver_autocommit(one_connection) as connection:
        connection.execute("UPDATE sessions SET last_seq = last_seq WHERE user_id = %s", (user_id,))
        assert connection.info.transaction_status.name == "IDLE"  # nothing left open


def test_the_connection_goes_back_to_the_pool_in_transaction_mode(
    one_connection: Database, user_id: str, session_id: str
) -> None:
    store = MessageStore(one_connection)
    store.append(user_id, session_id, [user("a")])
    pid = backend_pid(one_connection)
    with driver_autocommit(one_connection) as connection:
        run_window_statement(
            connection, WINDOW, user_id, session_id, {"floor": 0, "floor_id": None, "batch": 8}
        )

    # The same connection, and a transaction on it still rolls back as a whole.
    with pytest.raises(RuntimeError), one_connection.transaction() as connection:
        driver = connection.connection.driver_connection
        assert driver is not None and driver.info.backend_pid == pid
        connection.execute(
            text("UPDATE sessions SET last_seq = 99 WHERE user_id = :u AND session_id = :s"),
            {"u": user_id, "s": session_id},
        )
        raise RuntimeError("roll back")

    assert [m.seq for m in store.history(user_id, session_id)] == [1]
    assert store.append(user_id, session_id, [user("b")])[0].seq == 2


@pytest.mark.parametrize(
    ("statement", "expected"),
    [
        ("SELECT 1 / 0", InvalidInputError),  # 22012: the data, retrying cannot help
        ("SELECT * FROM no_such_table", StorageError),  # 42P01: a bug, not the network
    ],
)
def test_errors_are_the_storage_errors_of_every_other_path(
    one_connection: Database, statement: str, expected: type[StorageError]
) -> None:
    with pytest.raises(expected) as caught, driver_autocommit(one_connection) as connection:
        connection.execute(statement)

    assert type(caught.value) is expected
    # The connection is usable afterwards.
    with driver_autocommit(one_connection) as connection:
        assert connection.execute("SELECT 2").fetchone() == (2,)


def test_a_connection_the_server_closed_is_not_returned_to_the_pool(
    one_connection: Database, database: Database, user_id: str, session_id: str
) -> None:
    store = MessageStore(one_connection)
    store.append(user_id, session_id, [user("a")])
    pid = backend_pid(one_connection)

    with pytest.raises(DatabaseUnavailableError), driver_autocommit(one_connection) as connection:
        with database.reading() as other:
            other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        connection.execute("SELECT 1")

    # The next request gets a new connection, and nothing stored was lost.
    assert backend_pid(one_connection) != pid
    assert [m.payload["content"] for m in store.history(user_id, session_id)] == ["a"]


def test_a_connection_left_inside_a_transaction_is_not_returned_to_the_pool(
    one_connection: Database, user_id: str, session_id: str
) -> None:
    store = MessageStore(one_connection)
    store.append(user_id, session_id, [user("a")])
    pid = backend_pid(one_connection)

    with driver_autocommit(one_connection) as connection:
        connection.execute("BEGIN")
        connection.execute(
            "UPDATE sessions SET last_seq = 99 WHERE user_id = %s AND session_id = %s",
            (user_id, session_id),
        )

    # Thrown away, its transaction with it: the next user of the pool starts clean.
    assert backend_pid(one_connection) != pid
    assert store.append(user_id, session_id, [user("b")])[0].seq == 2


@pytest.mark.parametrize("statement", [WINDOW, INPUT_AND_WINDOW, APPEND])
def test_each_statement_is_parsed_by_psycopg_once(statement: str) -> None:
    # psycopg remembers a statement's parsed placeholders only up to this length: a longer one
    # is parsed again on every request (INPUT_AND_WINDOW was, 0.17 ms of CPU each time).
    assert len(statement.encode()) <= MAX_CACHED_STATEMENT_LENGTH

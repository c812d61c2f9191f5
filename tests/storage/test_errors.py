"""Tests of how driver errors are translated: only a lost connection is "unavailable"."""

import psycopg
import psycopg.errors
import pytest
from sqlalchemy import exc

from storage import DatabaseUnavailableError, InvalidInputError, StorageError
from storage.errors import MAX_MESSAGE_CHARS, storage_error


def wrapped(sqlstate: str, message: str = "the server's reason") -> exc.DBAPIError:
    """A driver error with this SQLSTATE, as SQLAlchemy hands it over."""
    original = psycopg.errors.lookup(sqlstate)(message)
    return exc.DBAPIError.instance("SELECT 1", {"content": "secret"}, original, psycopg.Error)


@pytest.mark.parametrize(
    ("sqlstate", "expected"),
    [
        ("08006", DatabaseUnavailableError),  # connection failure
        ("57P01", DatabaseUnavailableError),  # administrator shutdown
        ("53300", DatabaseUnavailableError),  # too many connections
        ("54000", InvalidInputError),  # index row size exceeds btree maximum
        ("22P05", InvalidInputError),  # untranslatable character
        ("22003", InvalidInputError),  # numeric value out of range
        ("23505", InvalidInputError),  # unique violation
        ("42P01", StorageError),  # undefined table: a bug, not the input, not the network
        ("40001", StorageError),  # serialization failure
    ],
)
def test_each_sqlstate_becomes_the_error_a_caller_can_act_on(
    sqlstate: str, expected: type[StorageError]
) -> None:
    error = storage_error(wrapped(sqlstate))

    assert type(error) is expected
    assert "the server's reason" in str(error)
    assert "secret" not in str(error)


@pytest.mark.parametrize(
    "sqlstate", ["08006", "57P01", "53300", "54000", "23505", "42P01", "40001"]
)
def test_the_drivers_own_error_is_translated_as_sqlalchemys(sqlstate: str) -> None:
    # One translation for both paths: the request path's psycopg errors (storage.driver) and
    # the errors SQLAlchemy wraps.
    original = psycopg.errors.lookup(sqlstate)("the server's reason")

    direct, through_sqlalchemy = storage_error(original), storage_error(wrapped(sqlstate))

    assert type(direct) is type(through_sqlalchemy)
    assert str(direct) == str(through_sqlalchemy)


def test_errors_raised_before_the_server_answered() -> None:
    lost = exc.DBAPIError.instance(
        "SELECT 1", {}, psycopg.OperationalError("connection refused"), psycopg.Error
    )
    refused = exc.DBAPIError.instance(
        "SELECT 1", {}, psycopg.DataError("cannot contain NUL (0x00) bytes"), psycopg.Error
    )

    assert type(storage_error(lost)) is DatabaseUnavailableError
    assert type(storage_error(refused)) is InvalidInputError
    assert type(storage_error(lost.orig)) is DatabaseUnavailableError
    assert type(storage_error(refused.orig)) is InvalidInputError


def test_messages_are_one_short_line() -> None:
    error = storage_error(wrapped("22P02", "x" * 5_000 + "\nDETAIL: the whole payload"))

    assert len(str(error)) <= MAX_MESSAGE_CHARS
    assert "\n" not in str(error) and "payload" not in str(error)

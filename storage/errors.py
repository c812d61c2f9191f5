"""The exceptions the storage layer raises, and how driver errors are translated into them.

The whole tree, under ``StratamemError``, the root of every error stratamem raises on purpose
(defined here, in the lowest layer, so that retrieval's and memory's errors derive from it too;
``memory.StratamemError`` is this class)::

    StratamemError(Exception)
    └── StorageError                     base of every error raised by storage itself
        ├── DatabaseUnavailableError         the database cannot be started or reached: a lost
        │                                    connection, a server shutting down, too many clients
        │                                    (worth retrying later)
        ├── SessionErasedError(LookupError)  a write made from a session's messages found them
        │                                    erased (``forget`` ran since they were read); nothing
        │                                    was stored, and retrying cannot store it
        └── InvalidInputError(ValueError)    the caller's input can never be stored as given: an id
            │                                that is empty or too long, a lone surrogate, a value
            │                                that is not JSON, a value the database rejects
            │                                (retrying the same call cannot succeed)
            └── ImportConflictError          an import would mix into what the user has (data
                                             without a merge, or a session of the same id)

A database error that is neither (a bug in a query, a serialization failure) is raised as a
plain ``StorageError``. No message of these errors carries stored content (the texts of
messages and metadata) or grows beyond a few hundred characters; the original driver error is
kept as ``__cause__`` (SQL without its parameters) for diagnosis.

Whatever a ``validate`` callback given to ``MessageStore.append`` raises propagates unchanged,
after the transaction has been rolled back, so a caller that validates with its own exception
type keeps it.
"""

from __future__ import annotations

__all__ = [
    "MAX_MESSAGE_CHARS",
    "DatabaseUnavailableError",
    "ImportConflictError",
    "InvalidInputError",
    "SessionErasedError",
    "StorageError",
    "StratamemError",
    "describe",
    "shorten",
    "sqlstate",
    "storage_error",
]

# SQLSTATE classes (first two characters) that mean "the database is not there or not usable
# now": connection exceptions, insufficient resources (too many clients, disk full, out of
# memory). Together with errors raised before any server answered (no SQLSTATE at all).
_UNAVAILABLE_CLASSES = frozenset({"08", "53"})
# Shutting down, crash shutdown, cannot connect now: an administrator or a crash, not the query.
_UNAVAILABLE_STATES = frozenset({"57P01", "57P02", "57P03"})
# Data exceptions, integrity violations, program limits (an index row too large, too many
# parameters): the input is the problem, and sending it again fails again.
_INVALID_INPUT_CLASSES = frozenset({"22", "23", "54"})
#: Error messages are cut to this length: they go to logs and to users, never whole payloads.
MAX_MESSAGE_CHARS = 300


class StratamemError(Exception):
    """Base class of every error stratamem raises on purpose, whatever its layer."""


class StorageError(StratamemError):
    """Base class of the errors raised by the storage layer."""


class DatabaseUnavailableError(StorageError):
    """The database could not be started, reached or used; retrying later may succeed."""


class InvalidInputError(StorageError, ValueError):
    """The input can never be stored as given; nothing was stored."""


class SessionErasedError(StorageError, LookupError):
    """What a write was made from (a session's messages) was erased since it was read.

    Raised by every write derived from earlier reads (a fold's summary and cards, an archive
    mark, a reply to an assembled context) when ``forget`` ran in between; nothing was stored.
    """


def storage_error(error: BaseException) -> StorageError:
    """Translate a database error into the storage error a caller can act on: the one
    translation of storage, for errors SQLAlchemy raised and for psycopg's own (the request
    path runs on the driver: ``storage.driver``).

    Only a lost or refused connection is ``DatabaseUnavailableError`` (a caller may retry it);
    data the database rejects is ``InvalidInputError`` (retrying cannot help); anything else is
    a plain ``StorageError``. The message is the database's one-line reason, never the
    statement's parameters, and at most a few hundred characters.

    Args:
        error: What SQLAlchemy (a ``DBAPIError``, a pool timeout) or psycopg raised.

    Returns:
        The error to raise (``from error``).
    """
    reason = describe(error)
    unavailable = DatabaseUnavailableError(shorten(f"database unavailable: {reason}"))
    # SQLAlchemy's wrapper keeps the driver's error as ``orig``; both name their classes as
    # the DB-API does (PEP 249), so one look at the names serves both, without importing
    # either here (this module is the error root the pure layers import).
    driver_error = getattr(error, "orig", None) or error
    kinds = {kind.__name__ for kind in (*type(error).__mro__, *type(driver_error).__mro__)}
    if _is_pool_timeout(error) or "InterfaceError" in kinds:
        return unavailable
    state = sqlstate(error)
    if not state:
        # Raised by the driver before the server said anything: a connection that failed,
        # or data the driver itself refuses to send.
        if kinds & {"DataError", "IntegrityError"}:
            return InvalidInputError(shorten(f"the driver rejected the input: {reason}"))
        if "OperationalError" in kinds:
            return unavailable
        return StorageError(shorten(f"database error: {reason}"))
    if state[:2] in _UNAVAILABLE_CLASSES or state in _UNAVAILABLE_STATES:
        return unavailable
    if state[:2] in _INVALID_INPUT_CLASSES:
        return InvalidInputError(shorten(f"the database rejected the input ({state}): {reason}"))
    return StorageError(shorten(f"database error ({state}): {reason}"))


def sqlstate(error: BaseException) -> str:
    """The SQLSTATE the server gave ``error`` (SQLAlchemy's wrapper or psycopg's own error), or
    ``""`` when the driver raised it before the server said anything."""
    driver_error = getattr(error, "orig", None) or error
    return getattr(driver_error, "sqlstate", None) or ""


def _is_pool_timeout(error: BaseException) -> bool:
    """Whether ``error`` is SQLAlchemy's pool timeout (no free connection in time)."""
    # Imported here, not at the top: see ``storage_error``; by now SQLAlchemy is loaded.
    from sqlalchemy.exc import TimeoutError as PoolTimeoutError

    return isinstance(error, PoolTimeoutError)


def describe(error: BaseException) -> str:
    """Return the first line of the driver's reason, without the SQL and parameters."""
    original = getattr(error, "orig", None) or error
    diagnostic = getattr(original, "diag", None)
    primary = getattr(diagnostic, "message_primary", None)
    text = primary or str(original)
    return text.strip().splitlines()[0] if text.strip() else type(error).__name__


def shorten(message: str) -> str:
    """Return ``message``, cut to ``MAX_MESSAGE_CHARS`` characters."""
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    return message[: MAX_MESSAGE_CHARS - 1] + "…"


class ImportConflictError(InvalidInputError):
    """An import would mix into what the user has: data without a merge, or one of the
    imported sessions (``storage.imports``); nothing was stored."""

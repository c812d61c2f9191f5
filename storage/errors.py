"""The exceptions the storage layer raises.

The whole tree::

    StorageError(Exception)          base of every error raised by storage itself
    ├── SessionOwnershipError        the session id belongs to another user
    ├── DatabaseUnavailableError     the database cannot be started or reached
    │                                (wraps psycopg / SQLAlchemy operational errors)
    └── MessageValidationError       a batch of messages was rejected before it was stored

``MessageValidationError`` is the exception a ``validate`` callback given to
``MessageStore.append`` is expected to raise. Storage never wraps what the callback raises:
whatever it is propagates unchanged, after the transaction has been rolled back, so a caller
that validates with its own exception type keeps it.

Programming errors (a client id repeated inside one batch, a summary boundary moving backwards)
are ``ValueError``, not storage errors: retrying cannot fix them.
"""

__all__ = [
    "DatabaseUnavailableError",
    "MessageValidationError",
    "SessionOwnershipError",
    "StorageError",
]


class StorageError(Exception):
    """Base class of the errors raised by the storage layer."""


class SessionOwnershipError(StorageError):
    """The session id is already owned by another user; sessions are never shared."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} belongs to another user")
        self.session_id = session_id


class DatabaseUnavailableError(StorageError):
    """The database could not be started, reached or used."""


class MessageValidationError(StorageError):
    """A batch of messages was rejected by a ``validate`` callback; nothing was stored."""

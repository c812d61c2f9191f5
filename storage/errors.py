"""The exceptions the storage layer raises.

The whole tree::

    StorageError(Exception)              base of every error raised by storage itself
    ├── DatabaseUnavailableError         the database cannot be started or reached: a lost
    │                                    connection, a server shutting down, too many clients
    │                                    (worth retrying later)
    └── InvalidInputError(ValueError)    the caller's input can never be stored as given: an id
                                         that is empty or too long, a lone surrogate, a value
                                         that is not JSON, a value the database rejects
                                         (retrying the same call cannot succeed)

A database error that is neither (a bug in a query, a serialization failure) is raised as a
plain ``StorageError``. No message of these errors carries stored content (the texts of
messages and metadata) or grows beyond a few hundred characters; the original driver error is
kept as ``__cause__`` (SQL without its parameters) for diagnosis.

Whatever a ``validate`` callback given to ``MessageStore.append`` raises propagates unchanged,
after the transaction has been rolled back, so a caller that validates with its own exception
type keeps it.
"""

__all__ = [
    "DatabaseUnavailableError",
    "InvalidInputError",
    "StorageError",
]


class StorageError(Exception):
    """Base class of the errors raised by the storage layer."""


class DatabaseUnavailableError(StorageError):
    """The database could not be started, reached or used; retrying later may succeed."""


class InvalidInputError(StorageError, ValueError):
    """The input can never be stored as given; nothing was stored."""

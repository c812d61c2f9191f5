"""Checks of what callers hand to storage (ids, texts, JSON documents), before any SQL runs.

Postgres ``text`` cannot hold a NUL character and ``jsonb`` cannot hold ``\\u0000``, so NULs in
message payloads and metadata would be rejected by the database. They are kept losslessly by
storing those two documents in ``json`` columns: ``json`` keeps the document's text as sent, and
``json.dumps`` writes a NUL as the escape ``\\u0000`` (and a backslash as ``\\\\``), which
``json.loads`` turns back into exactly the original string. No escaping scheme of our own is
involved, so there is nothing to double-escape. Short texts stored in ``text`` columns (ids,
roles, summaries) reject NUL instead, with an ``InvalidInputError``. A lone surrogate cannot be
encoded as UTF-8 anywhere and is always rejected.
"""

import json
from typing import Any

from storage.errors import InvalidInputError

__all__ = ["MAX_ID_LENGTH", "check_encodable", "check_id", "check_text", "encode_json"]

#: The longest user id, session id or client message id, in characters. Ids are keys of
#: b-tree indexes, whose entries are limited to about 2,700 bytes: 256 characters of up to 4
#: UTF-8 bytes each stay below that whatever the script, with room for the other key columns.
MAX_ID_LENGTH = 256


def check_id(name: str, value: object) -> str:
    """Return ``value`` when it is a usable id; raise otherwise.

    Args:
        name: What the id is (``"user_id"``, ``"session_id"``, ...), for the error message.
        value: The id to check.

    Returns:
        The id, unchanged.

    Raises:
        InvalidInputError: The id is not a string, is empty, is longer than
            ``MAX_ID_LENGTH`` characters, or holds a NUL or a lone surrogate.
    """
    if not isinstance(value, str):
        raise InvalidInputError(f"{name} must be a string, not {type(value).__name__}")
    if not value:
        raise InvalidInputError(f"{name} must not be empty")
    if len(value) > MAX_ID_LENGTH:
        raise InvalidInputError(
            f"{name} has {len(value)} characters; at most {MAX_ID_LENGTH} are allowed"
        )
    check_text(name, value)
    return value


def check_text(name: str, value: str) -> None:
    """Raise unless ``value`` can be stored in a Postgres ``text`` column.

    Args:
        name: What the text is, for the error message.
        value: The text to check.

    Raises:
        InvalidInputError: The text holds a NUL character or a lone surrogate.
    """
    if "\x00" in value:
        raise InvalidInputError(f"{name} contains a NUL character, which this field cannot store")
    check_encodable(name, value)


def encode_json(name: str, document: Any) -> str:
    """Serialise a JSON document for a ``json`` column, keeping NULs (see the module docstring).

    Args:
        name: What the document is (``"message 3 payload"``), for the error message.
        document: Any value made of dicts, lists, strings, numbers, booleans and None.

    Returns:
        The document as compact JSON text.

    Raises:
        InvalidInputError: The document holds a value JSON has no form for (a ``datetime``,
            NaN, a circular reference), is nested too deeply to serialise, or holds a lone
            surrogate.
    """
    try:
        encoded = json.dumps(document, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except RecursionError:
        raise InvalidInputError(f"{name} is nested too deeply to be stored") from None
    except (TypeError, ValueError) as error:
        # These messages name a type or a rule ("Object of type datetime is not JSON
        # serializable"), never the content.
        raise InvalidInputError(f"{name} is not JSON: {error}") from None
    check_encodable(name, encoded)
    return encoded


def check_encodable(name: str, value: str) -> None:
    """Raise when ``value`` holds a lone surrogate, which no UTF-8 database can store."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        # ``from None``: the codec's message quotes the offending character and its position.
        raise InvalidInputError(
            f"{name} contains a lone surrogate (an unpaired UTF-16 half), which is not text"
        ) from None

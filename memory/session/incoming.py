"""What callers hand to ``record`` and ``prepare``, turned into messages ready to store.

A message arrives as a dict (``None`` values allowed) or an ``openai`` SDK object; it leaves as
a ``NewMessage``: the request dict the chat API accepts (response-only keys removed), its token
count, its client ``id`` and its ``metadata`` made JSON (as pydantic's JSON mode makes it).
Replays are recognised here too: a client id is an idempotency key.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticSerializationError, to_jsonable_python

from memory.context.messages import Message, message_dict, parse_messages
from memory.errors import InvalidHistoryError, Problem, RecordConflictError
from storage import NewMessage, StoredMessage

__all__ = [
    "CLIENT_KEYS",
    "METADATA_MAX_DEPTH",
    "batch_items",
    "check_replay",
    "check_system",
    "json_metadata",
    "name_stored",
    "parse_input",
    "parse_timestamp",
    "refuse_repeated_ids",
]

#: Keys of a message dict that belong to stratamem and are never sent to the model.
CLIENT_KEYS = ("id", "metadata", "timestamp")

#: Metadata may nest dicts and lists this deep; deeper is refused (it is never a real need,
#: and a cyclic structure would otherwise recurse without end).
METADATA_MAX_DEPTH = 32


def batch_items(messages: object) -> list[object]:
    """The messages given to ``record``, as a list: a list, a tuple, any iterable of messages.

    Raises:
        InvalidHistoryError: ``messages`` is one message (a dict or a chat message object)
            rather than a list of them, a string, or not a collection at all.
    """
    if isinstance(messages, Mapping | BaseModel):
        kind = "dict" if isinstance(messages, Mapping) else "chat message object"
        raise InvalidHistoryError(
            [f"messages must be a list of messages, not a single {kind}: pass [message]"]
        )
    if isinstance(messages, str | bytes) or not isinstance(messages, Iterable):
        raise InvalidHistoryError(
            [f"messages must be a list of messages, not {type(messages).__name__}"]
        )
    return list(messages)


def check_system(system: object) -> None:
    """Refuse a system prompt that is not a string (or ``None``), naming ``system``.

    Raises:
        InvalidHistoryError: ``system`` is a list, a dict, a number...
    """
    if system is not None and not isinstance(system, str):
        raise InvalidHistoryError(
            [f"system must be the system prompt as a string (or None), not {type(system).__name__}"]
        )


def parse_input(
    index: int, item: object
) -> tuple[Message, str | None, dict[str, Any], datetime | None]:
    """Parse one message given to ``record`` or ``prepare``: message, client id, metadata, time.

    The time is the message's optional ``timestamp`` (see ``parse_timestamp``).

    Raises:
        InvalidHistoryError: the item is not a chat message the API would accept, its id is
            not a string, or its metadata is not a JSON-compatible dict; the problem names
            ``message {index}``.
    """
    try:
        data = message_dict(item)
    except TypeError as error:
        raise InvalidHistoryError([Problem(index, str(error))]) from error
    client_id = data.get("id")
    if client_id is not None and not isinstance(client_id, str):
        raise InvalidHistoryError([Problem(index, "id must be a string")])
    metadata = json_metadata(data.get("metadata", {}), f"message {index}")
    timestamp = parse_timestamp(index, data.get("timestamp"))
    payload = {key: value for key, value in data.items() if key not in CLIENT_KEYS}
    try:
        [message] = parse_messages([payload])
    except InvalidHistoryError as error:
        # parse_messages numbers the one message it was given 0: name its place in the batch.
        raise InvalidHistoryError(
            replace(problem, index=index) for problem in error.problems
        ) from error
    return message, client_id, metadata, timestamp


def parse_timestamp(index: int, value: object) -> datetime | None:
    """A message's ``timestamp``: an ISO 8601 string or a ``datetime``; naive means UTC.

    Raises:
        InvalidHistoryError: it is neither, or the string is not ISO 8601.
    """
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError as error:
            raise InvalidHistoryError(
                [Problem(index, f"timestamp {value!r} is not an ISO 8601 date and time")]
            ) from error
    if not isinstance(value, datetime):
        raise InvalidHistoryError(
            [Problem(index, "timestamp must be an ISO 8601 string or a datetime")]
        )
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def json_metadata(metadata: object, where: str) -> dict[str, Any]:
    """``metadata`` as a JSON-compatible dict: ``datetime``, ``UUID``, ``Decimal``... as strings.

    Conversion follows pydantic's JSON mode (``datetime`` to ISO 8601, ``UUID`` and ``Decimal``
    to strings, tuples and sets to lists).

    Raises:
        InvalidHistoryError: not a dict, nested deeper than ``METADATA_MAX_DEPTH``, or holding
            a value with no JSON form; the problem starts with ``where``.
    """
    if not isinstance(metadata, Mapping):
        raise InvalidHistoryError([f"{where}: metadata must be a dict"])
    depth = _depth(metadata)
    if depth > METADATA_MAX_DEPTH:
        raise InvalidHistoryError(
            [f"{where}: metadata nests deeper than {METADATA_MAX_DEPTH} levels"]
        )
    try:
        converted = to_jsonable_python(dict(metadata))
    except PydanticSerializationError as error:
        raise InvalidHistoryError(
            [f"{where}: metadata is not JSON-compatible ({error})"]
        ) from error
    if not isinstance(converted, dict):  # pragma: no cover - a dict stays a dict
        raise InvalidHistoryError([f"{where}: metadata must be a dict"])
    return converted


def _depth(value: object) -> int:
    """How deep dicts and lists nest in ``value``, counted without recursion.

    Stops counting just past ``METADATA_MAX_DEPTH`` (a cyclic structure is infinitely deep).
    """
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Sequence[object] = list(item.values())
        elif isinstance(item, list | tuple | set | frozenset):
            children = list(item)
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > METADATA_MAX_DEPTH:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


def refuse_repeated_ids(batch: Sequence[NewMessage]) -> None:
    """Raise ``InvalidHistoryError`` when one client id appears twice in a batch."""
    seen: dict[str, int] = {}
    problems: list[str] = []
    for index, message in enumerate(batch):
        if message.client_id is None:
            continue
        first = seen.setdefault(message.client_id, index)
        if first != index:
            problems.append(f"message {index}: id {message.client_id!r} is also message {first}")
    if problems:
        raise InvalidHistoryError(problems)


def check_replay(batch: Sequence[NewMessage], stored: Sequence[StoredMessage]) -> None:
    """Raise ``RecordConflictError`` unless ``stored`` is exactly what ``batch`` asks to store.

    Called when every message of ``batch`` was found stored under its client id: the batch is a
    replay only when each stored message has the same content and metadata.
    """
    conflicts = [
        f"message {index}: {name_stored(record)} is stored with other "
        + ("content" if record.payload != message.payload else "metadata")
        for index, (message, record) in enumerate(zip(batch, stored, strict=True))
        if record.payload != message.payload or record.metadata != message.metadata
    ]
    if conflicts:
        raise RecordConflictError(conflicts)


def name_stored(record: StoredMessage) -> str:
    """How errors and reports name a stored message: its seq, and its client id if any."""
    if record.client_id is None:
        return f"seq {record.seq}"
    return f"seq {record.seq} (id {record.client_id!r})"

"""The statements of ``MessageStore.append``'s transaction (lock the session, find the client ids
stored already, load the open tail, insert the batch): the general write path's SQL, apart from
the store's methods as the request path's one statement is
(``storage.messages.request_statements``)."""

from collections import Counter
from typing import Any

from sqlalchemy import Connection, text

from storage.errors import InvalidInputError
from storage.inputs import check_id, check_text, encode_json
from storage.messages.reads import MESSAGE_COLUMNS, message_of
from storage.messages.request_statements import batch_parameters
from storage.records import NewMessage, StoredMessage

__all__ = [
    "by_client_id",
    "check_unique",
    "insert_messages",
    "lock_session",
    "message_row",
    "open_tail",
]

_SESSION = "user_id = :user_id AND session_id = :session_id"
#: How often ``lock_session`` creates a session erased as it was created.
_CREATE_ATTEMPTS = 3
_LOCK = text(f"SELECT last_seq FROM sessions WHERE {_SESSION} FOR UPDATE")
_CREATE = text(
    "INSERT INTO sessions (user_id, session_id) VALUES (:user_id, :session_id) "
    "ON CONFLICT (user_id, session_id) DO NOTHING"
)
# One statement for any number of rows: one array per column (``batch_parameters``, as the
# request path's ``APPEND``), so no page of parameters and no limit on their count. The
# documents arrive as JSON text made by ``encode_json`` and are cast on the server, so they are
# serialised exactly once.
_INSERT = text(
    "INSERT INTO messages "
    "(user_id, session_id, seq, role, payload, tokens, client_id, metadata, created_at) "
    "SELECT :user_id, :session_id, :last_seq + b.position, b.role, CAST(b.payload AS json), "
    "b.tokens, b.client_id, CAST(b.metadata AS json), coalesce(b.created_at, now()) "
    "FROM unnest(CAST(:roles AS text[]), CAST(:payloads AS text[]), "
    "CAST(:tokens AS integer[]), CAST(:client_ids AS text[]), CAST(:metadatas AS text[]), "
    "CAST(:created_ats AS timestamptz[])) "
    "WITH ORDINALITY AS b(role, payload, tokens, client_id, metadata, created_at, position) "
    f"RETURNING {MESSAGE_COLUMNS}"
)
# The clock, not the transaction's start: the idle sweep's watermark (``ArchiveMarks``) must
# not pass a time that a transaction still to commit writes. This statement's start, not
# clock_timestamp(): Citus refuses a volatile function in an UPDATE.
_MOVE_LAST_SEQ = text(
    "UPDATE sessions SET last_seq = :last_seq, last_active_at = statement_timestamp() "
    f"WHERE {_SESSION}"
)
# One array parameter, not one parameter per id: a batch may carry any number of ids.
_BY_CLIENT_ID = text(
    f"SELECT {MESSAGE_COLUMNS} FROM messages "
    f"WHERE {_SESSION} AND client_id = ANY(CAST(:client_ids AS text[]))"
)
# max() with the filter scans the session's key backwards and stops at the first non-tool
# message, so the cost is the length of the tail, not of the session.
_OPEN_TAIL = text(
    f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE {_SESSION} AND seq >= coalesce(("
    f"SELECT max(seq) FROM messages WHERE {_SESSION} AND role <> 'tool'), 0) ORDER BY seq"
)


def check_unique(client_ids: list[str]) -> None:
    """Raise ``InvalidInputError`` naming (a few of) the client ids that appear twice."""
    counts = Counter(client_ids)
    repeated = [client_id for client_id, count in counts.items() if count > 1]
    if repeated:
        # At most three ids, each cut to 64 characters: the message stays short.
        named = ", ".join(repr(client_id[:64]) for client_id in repeated[:3])
        raise InvalidInputError(f"a client id appears twice in one batch: {named}")


def message_row(index: int, message: NewMessage) -> dict[str, Any]:
    """Check one new message and turn it into the insert's parameters (without its key)."""
    name = f"message {index}"
    if message.client_id is not None:
        check_id(f"{name} client id", message.client_id)
    check_text(f"{name} role", message.role)
    return {
        "role": message.role,
        "payload": encode_json(f"{name} payload", message.payload),
        "tokens": message.tokens,
        "client_id": message.client_id,
        "metadata": encode_json(f"{name} metadata", message.metadata),
        "created_at": message.created_at,
    }


def lock_session(connection: Connection, user_id: str, session_id: str) -> int:
    """Create the session if missing, lock its row for this transaction, return its last seq."""
    session = {"user_id": user_id, "session_id": session_id}
    last_seq = connection.scalar(_LOCK, session)
    for _ in range(_CREATE_ATTEMPTS):
        if last_seq is not None:
            break
        connection.execute(_CREATE, session)
        # After the insert (ours or a concurrent one) it exists, unless a concurrent one was
        # erased at this very moment (``storage.erasure``): then it is created again, so the
        # messages start the session afresh rather than fail on its foreign key.
        last_seq = connection.scalar(_LOCK, session)
    return int(last_seq or 0)


def insert_messages(
    connection: Connection,
    user_id: str,
    session_id: str,
    last_seq: int,
    rows: list[dict[str, Any]],
) -> list[StoredMessage]:
    """Insert the rows after ``last_seq``, move the session's last seq past them and mark it
    active now."""
    session = {"user_id": user_id, "session_id": session_id}
    parameters = {**batch_parameters(rows), **session, "last_seq": last_seq}
    inserted = connection.execute(_INSERT, parameters)
    stored = sorted((message_of(row) for row in inserted), key=lambda message: message.seq)
    connection.execute(_MOVE_LAST_SEQ, {**session, "last_seq": last_seq + len(rows)})
    return stored


def by_client_id(
    connection: Connection, user_id: str, session_id: str, client_ids: list[str]
) -> dict[str, StoredMessage]:
    """Load the session's messages that carry one of ``client_ids``, keyed by client id."""
    if not client_ids:
        return {}
    rows = connection.execute(
        _BY_CLIENT_ID, {"user_id": user_id, "session_id": session_id, "client_ids": client_ids}
    )
    return {row.client_id: message_of(row) for row in rows}


def open_tail(connection: Connection, user_id: str, session_id: str) -> list[StoredMessage]:
    """Load the stored messages from the last non-``tool`` message of the session onward."""
    rows = connection.execute(_OPEN_TAIL, {"user_id": user_id, "session_id": session_id})
    return [message_of(row) for row in rows]

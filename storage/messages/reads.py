"""Reads of the messages table (rows by seq range, a session's last seq, the tail's token sum,
where the current turn starts, the next increment to fold) and the record a row becomes: apart
from ``MessageStore`` because its appends (``storage.messages.appends``) and walks
(``storage.messages.walking``) build on them too."""

from typing import Any

from sqlalchemy import Connection, Row, TextClause, text

from storage.records import StoredMessage

__all__ = [
    "MESSAGE_COLUMNS",
    "TOKENS_AFTER_SUMMARY",
    "increment_after",
    "last_seq_of",
    "message_of",
    "messages_after",
    "turn_start_of",
]

#: The columns of a messages row that ``message_of`` reads.
MESSAGE_COLUMNS = (
    "id, user_id, session_id, seq, role, payload, tokens, client_id, metadata, created_at"
)

_LAST_SEQ = text(
    "SELECT last_seq FROM sessions WHERE user_id = :user_id AND session_id = :session_id"
)


def _after(*, upto: bool, newest_first: bool) -> TextClause:
    # ``LIMIT NULL`` is no limit at all.
    return text(
        f"SELECT {MESSAGE_COLUMNS} FROM messages "
        "WHERE user_id = :user_id AND session_id = :session_id AND seq > :after_seq"
        + (" AND seq <= :upto_seq" if upto else "")
        + (" ORDER BY seq DESC" if newest_first else " ORDER BY seq")
        + " LIMIT :limit"
    )


# By (``upto_seq`` given, newest first).
_AFTER = {
    (upto, newest_first): _after(upto=upto, newest_first=newest_first)
    for upto in (False, True)
    for newest_first in (False, True)
}

# The boundary comes from the summary row (0 without one), in the same statement. When a job of
# the given kind is already pending for the session (a fold queued, the worker behind) the sum is
# not computed: the answer would not change what the caller does, and that is exactly when the
# tail after the boundary grows long. So the scan is never longer than what one fold leaves.
TOKENS_AFTER_SUMMARY = text(
    "SELECT CASE WHEN EXISTS ("
    "  SELECT 1 FROM jobs AS j "
    "  WHERE j.user_id = :user_id AND j.session_id = :session_id "
    "  AND j.kind = :queued_kind AND j.status = 'pending'"
    ") THEN NULL ELSE ("
    "  SELECT coalesce(sum(m.tokens), 0) FROM messages AS m "
    "  WHERE m.user_id = :user_id AND m.session_id = :session_id "
    "  AND m.seq > coalesce(("
    "    SELECT b.boundary_seq FROM session_summaries AS b "
    "    WHERE b.user_id = :user_id AND b.session_id = :session_id"
    "  ), 0)"
    ") END"
)

_TURN_START = text(
    "SELECT seq FROM messages WHERE user_id = :user_id "
    "AND session_id = :session_id AND role = 'user' ORDER BY seq DESC LIMIT 1"
)


def last_seq_of(connection: Connection, user_id: str, session_id: str) -> int:
    """Return the session's last seq (0 for a session this user does not have)."""
    last = connection.scalar(_LAST_SEQ, {"user_id": user_id, "session_id": session_id})
    return int(last or 0)


def messages_after(
    connection: Connection,
    user_id: str,
    session_id: str,
    after_seq: int,
    *,
    upto_seq: int | None = None,
    limit: int | None = None,
    newest_first: bool = False,
) -> list[StoredMessage]:
    """The messages with ``after_seq < seq`` (``<= upto_seq``), in seq order or newest first.

    With ``limit``, the first ``limit`` of them in that order.
    """
    parameters = {
        "user_id": user_id,
        "session_id": session_id,
        "after_seq": after_seq,
        "upto_seq": upto_seq,
        "limit": limit,
    }
    rows = connection.execute(_AFTER[upto_seq is not None, newest_first], parameters)
    return [message_of(row) for row in rows]


def turn_start_of(connection: Connection, user_id: str, session_id: str) -> int:
    """The seq of the session's last user message (0: none), read backwards on its key."""
    found = connection.execute(
        _TURN_START, {"user_id": user_id, "session_id": session_id}
    ).scalar_one_or_none()
    return int(found or 0)


def increment_after(
    connection: Connection,
    user_id: str,
    session_id: str,
    after_seq: int,
    *,
    max_tokens: int,
    max_messages: int,
    batch: int,
) -> list[StoredMessage]:
    """The messages after ``after_seq`` that fit ``max_tokens`` (the first always), in order,
    read ``batch`` rows at a time (``MessageStore.read_increment``)."""
    increment: list[StoredMessage] = []
    total = 0
    cursor = after_seq
    while len(increment) < max_messages:
        limit = min(batch, max_messages - len(increment))
        rows = messages_after(connection, user_id, session_id, cursor, limit=limit)
        for record in rows:
            if increment and total + record.tokens > max_tokens:
                return increment
            increment.append(record)
            total += record.tokens
        if len(rows) < limit:
            break
        cursor = rows[-1].seq
    return increment


def message_of(row: Row[Any]) -> StoredMessage:
    """Turn a row of the messages table into the record callers see."""
    # The row was validated on its way in; skipping validation keeps window loads cheap.
    return StoredMessage.model_construct(
        id=row.id,
        user_id=row.user_id,
        session_id=row.session_id,
        seq=row.seq,
        role=row.role,
        payload=row.payload,
        tokens=row.tokens,
        client_id=row.client_id,
        metadata=row.metadata,
        created_at=row.created_at,
    )

"""The statements of a request: each loads the window's rows in one round trip.

A request reads the session's summary and the messages after its boundary, and when it brings
a new user message it first stores it durably. As separate statements in a transaction that was
seven round trips to the server (lock, open-tail check, insert, last seq, commit, summary,
rows). Here it is one statement, committed on its own (autocommit): ``INPUT_AND_WINDOW`` when
there is an input, ``WINDOW`` when there is none.

``INPUT_AND_WINDOW`` stores the input only when that is sure to be right without looking
further, and otherwise stores nothing, so the caller takes the general path
(``MessageStore.append``):

- the session exists (a new one is created by the general path);
- its tail is closed: the last message that is not a ``tool`` result has no ``tool_calls``, or
  as many results after it as calls (stored structures are valid, so the results answer
  distinct calls), and a user message after a closed tail is always valid;
- the input's client id, if any, is not stored in the session yet (a replay or a conflict);
- nobody appended between the statement's snapshot and its lock on the session row.

The last point is what makes the others safe. The checks and reads run on the statement's
snapshot, taken before it waits for the session's row lock; the ``UPDATE`` re-checks its
``WHERE`` on the newest version of the row once it holds the lock, and ``last_seq`` still being
the snapshot's means no message was stored in between: the snapshot's tail, client ids and rows
are the session's current ones, and the input's seq follows the rows read.
"""

from typing import Any

from sqlalchemy import BigInteger, Connection, DateTime, Integer, Row, Text, TextualSelect, text
from sqlalchemy import bindparam as param
from sqlalchemy.dialects.postgresql import JSON

from storage.records import StoredMessage, SummaryRecord

__all__ = ["INPUT_AND_WINDOW", "WINDOW", "run_window_statement"]

_MESSAGE_COLUMNS = "id, seq, role, payload, tokens, client_id, metadata, created_at"

# The summary, and the newest rows after the larger of its boundary and :floor.
_READS = f"""
summary AS (
    SELECT content, kind, boundary_seq, covered, version, updated_at FROM session_summaries
    WHERE user_id = :user_id AND session_id = :session_id
),
recent AS (
    SELECT {_MESSAGE_COLUMNS} FROM messages
    WHERE user_id = :user_id AND session_id = :session_id
      AND seq > greatest(:floor, (SELECT boundary_seq FROM summary))
    ORDER BY seq DESC LIMIT :batch
)"""

# One result for both: a row per message (newest first) and one for the summary, told apart
# by ``part``; the summary's columns ride in the same row type, its time in ``created_at``.
_NO_SUMMARY = """NULL::text AS content, NULL::text AS kind, NULL::bigint AS boundary_seq,
       NULL::integer AS covered, NULL::integer AS version"""
_UNION = f"""
SELECT 'recent' AS part, {_MESSAGE_COLUMNS}, {_NO_SUMMARY}
FROM recent
UNION ALL
SELECT 'summary', NULL, NULL, NULL, NULL, NULL, NULL, NULL, updated_at,
       content, kind, boundary_seq, covered, version
FROM summary"""

_STORE_INPUT = f"""
snapshot AS (
    SELECT last_seq FROM sessions WHERE user_id = :user_id AND session_id = :session_id
),
unit_start AS (
    SELECT seq, payload -> 'tool_calls' AS calls FROM messages
    WHERE user_id = :user_id AND session_id = :session_id AND role <> 'tool'
    ORDER BY seq DESC LIMIT 1
),
open_calls AS (
    SELECT FROM unit_start
    WHERE json_typeof(unit_start.calls) = 'array'
      AND json_array_length(unit_start.calls) > (
          SELECT count(*) FROM messages
          WHERE user_id = :user_id AND session_id = :session_id AND seq > unit_start.seq
      )
),
bumped AS (
    UPDATE sessions SET last_seq = sessions.last_seq + 1
    WHERE user_id = :user_id AND session_id = :session_id
      AND last_seq = (SELECT last_seq FROM snapshot)
      AND NOT EXISTS (SELECT FROM open_calls)
      AND NOT EXISTS (
          SELECT FROM messages
          WHERE user_id = :user_id AND session_id = :session_id AND client_id = :client_id
      )
    RETURNING last_seq
),
inserted AS (
    INSERT INTO messages
        (user_id, session_id, seq, role, payload, tokens, client_id, metadata, created_at)
    SELECT :user_id, :session_id, bumped.last_seq, 'user', CAST(:payload AS json), :tokens,
           :client_id, CAST(:metadata AS json), coalesce(:created_at, now())
    FROM bumped
    RETURNING {_MESSAGE_COLUMNS}
)"""

_READ_PARAMS = (
    param("user_id", type_=Text),
    param("session_id", type_=Text),
    param("floor", type_=BigInteger),
    param("batch", type_=BigInteger),
)

WINDOW: TextualSelect = (
    text(f"WITH {_READS}\n{_UNION}\nORDER BY seq DESC NULLS LAST")
    .bindparams(*_READ_PARAMS)
    .columns(payload=JSON, metadata=JSON)
)
"""The summary and the newest ``:batch`` rows after ``max(:floor, boundary)``, newest first."""

INPUT_AND_WINDOW: TextualSelect = (
    text(
        f"WITH {_STORE_INPUT},{_READS}\n"
        f"SELECT 'input' AS part, {_MESSAGE_COLUMNS}, {_NO_SUMMARY} FROM inserted"
        f"\nUNION ALL{_UNION}\nORDER BY seq DESC NULLS LAST"
    )
    .bindparams(
        *_READ_PARAMS,
        param("payload", type_=Text),
        param("tokens", type_=Integer),
        param("client_id", type_=Text),
        param("metadata", type_=Text),
        param("created_at", type_=DateTime(timezone=True)),
    )
    .columns(payload=JSON, metadata=JSON)
)
"""``WINDOW``, after storing a user input when the session allows it (the module docstring);
the input is not among the rows read (a statement does not see its own writes)."""


def run_window_statement(
    connection: Connection,
    statement: TextualSelect,
    user_id: str,
    session_id: str,
    parameters: dict[str, Any],
) -> tuple[StoredMessage | None, SummaryRecord | None, list[StoredMessage]]:
    """Run ``WINDOW`` or ``INPUT_AND_WINDOW``: the stored input, the summary, the rows read.

    Returns:
        The input as stored (None when there was none or it was not stored), the summary (or
        None), and the rows read, newest first.
    """
    stored: StoredMessage | None = None
    summary: SummaryRecord | None = None
    recent: list[StoredMessage] = []
    params = {**parameters, "user_id": user_id, "session_id": session_id}
    for row in connection.execute(statement, params):
        if row.part == "summary":
            summary = _summary(row, user_id, session_id)
        elif row.part == "input":
            stored = _message(row, user_id, session_id)
        else:
            recent.append(_message(row, user_id, session_id))
    return stored, summary, recent


def _message(row: Row[Any], user_id: str, session_id: str) -> StoredMessage:
    # Validated on its way in, like every row the message store hands out.
    return StoredMessage.model_construct(
        id=row.id,
        user_id=user_id,
        session_id=session_id,
        seq=row.seq,
        role=row.role,
        payload=row.payload,
        tokens=row.tokens,
        client_id=row.client_id,
        metadata=row.metadata,
        created_at=row.created_at,
    )


def _summary(row: Row[Any], user_id: str, session_id: str) -> SummaryRecord:
    return SummaryRecord(
        user_id=user_id,
        session_id=session_id,
        content=row.content,
        kind=row.kind,
        boundary_seq=row.boundary_seq,
        covered=row.covered,
        version=row.version,
        updated_at=row.created_at,  # the union's one time column
    )

"""The statements of a request: each stores or loads what it needs in one round trip.

A request reads the session's summary and the messages after its boundary, and when it brings
a new user message it first stores it durably. As separate statements in a transaction that was
seven round trips to the server (lock, open-tail check, insert, last seq, commit, summary,
rows). Here it is one statement, committed on its own (autocommit): ``INPUT_AND_WINDOW`` when
there is an input, ``WINDOW`` when there is none. ``APPEND`` stores a batch the same way
without reading (``record``: an assistant's reply, the next turns), instead of the five
statements of ``MessageStore.append``'s transaction.

``INPUT_AND_WINDOW`` and ``APPEND`` store their messages only when that is sure to be right
without looking further, and otherwise store nothing, so the caller takes the general path
(``MessageStore.append``):

- the session exists (a new one is created by the general path);
- its tail is closed: the last message that is not a ``tool`` result has no ``tool_calls``, or
  as many results after it as calls (stored structures are valid, so the results answer
  distinct calls); after a closed tail a user message is always valid, and so is any batch
  that is valid on its own and does not start with a tool result (which the caller checks);
- no client id of the messages is stored in the session yet (a replay or a conflict);
- for a reply to an assembled context (``after``), the session still holds the message the
  context was built up to (``storage.erasure``: not erased since);
- nobody appended between the statement's snapshot and its lock on the session row.

A tail whose last message holds a NUL (``\\u0000`` in its stored JSON) counts as open: every
JSON operator of Postgres refuses to read such a document, and the general path reads it in
Python.

The last point is what makes the others safe. The checks and reads run on the statement's
snapshot, taken before it waits for the session's row lock; the ``UPDATE`` re-checks its
``WHERE`` on the newest version of the row once it holds the lock, and ``last_seq`` still being
the snapshot's means no message was stored in between: the snapshot's tail, client ids and rows
are the session's current ones, and the input's seq follows the rows read.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from storage.records import MessageAt, StoredMessage, SummaryRecord

__all__ = [
    "APPEND",
    "INPUT_AND_WINDOW",
    "WINDOW",
    "WindowRows",
    "batch_parameters",
    "run_append",
    "run_window_statement",
]

# The statements are plain driver SQL (psycopg's ``%(name)s`` placeholders, each cast to its
# column's type), run on the pooled psycopg connection itself (``storage.driver``).

_MESSAGE_COLUMNS = "id, seq, role, payload, tokens, client_id, metadata, created_at"
_USER_SESSION = "user_id = %(user_id)s::text AND session_id = %(session_id)s::text"


# The summary, and the newest rows after the larger of its boundary and the floor: the rows
# the caller holds end at :floor, whose message has the id :floor_id. If the session no longer
# holds that message (it was erased, and perhaps started again), the floor is 0: what the
# caller holds is gone, and it is read afresh. ``beside_input`` leaves out what the same
# statement stored: one server reads the statement's snapshot, which holds none of its own
# writes, but Citus runs the CTEs as steps, each with a snapshot of its own, and the read after
# the insert saw the input it had just stored (the prompt held it twice).
def _reads(*, beside_input: bool) -> str:
    stored = "\n      AND seq NOT IN (SELECT seq FROM inserted)" if beside_input else ""
    return f"""
summary AS (
    SELECT content, kind, boundary_seq, covered, version, updated_at FROM session_summaries
    WHERE {_USER_SESSION}
),
held AS (
    SELECT CASE WHEN EXISTS (
        SELECT FROM messages WHERE {_USER_SESSION}
          AND seq = %(floor)s::bigint AND id = %(floor_id)s::bigint
    ) THEN %(floor)s::bigint ELSE 0 END AS floor
),
recent AS (
    SELECT {_MESSAGE_COLUMNS} FROM messages
    WHERE {_USER_SESSION}
      AND seq > greatest((SELECT floor FROM held), (SELECT boundary_seq FROM summary)){stored}
    ORDER BY seq DESC LIMIT %(batch)s::bigint
)"""


_READS = _reads(beside_input=False)

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
FROM summary
UNION ALL
SELECT 'floor', NULL, floor, NULL, NULL, NULL, NULL, NULL, NULL, {_NO_SUMMARY}
FROM held"""

_STORE = f"""
snapshot AS (
    SELECT last_seq FROM sessions WHERE {_USER_SESSION}
),
unit_start AS (
    SELECT seq, payload, strpos(payload::text, '\\u0000') > 0 AS has_nul FROM messages
    WHERE {_USER_SESSION} AND role <> 'tool'
    ORDER BY seq DESC LIMIT 1
),
open_calls AS (
    SELECT FROM unit_start
    WHERE CASE WHEN has_nul THEN true  -- the JSON is not read at all (module docstring)
        ELSE json_typeof(payload -> 'tool_calls') = 'array'
            AND json_array_length(payload -> 'tool_calls') > (
                SELECT count(*) FROM messages
                WHERE {_USER_SESSION} AND seq > unit_start.seq
            )
    END
),
batch AS (
    SELECT * FROM unnest(
        %(roles)s::text[], %(payloads)s::text[], %(tokens)s::integer[],
        %(client_ids)s::text[], %(metadatas)s::text[], %(created_ats)s::timestamptz[]
    ) WITH ORDINALITY AS b(role, payload, tokens, client_id, metadata, created_at, position)
),
bumped AS (
    UPDATE sessions SET last_seq = sessions.last_seq + (SELECT count(*) FROM batch),
        last_active_at = statement_timestamp()  -- stable, which Citus requires in an UPDATE
    WHERE {_USER_SESSION}
      AND last_seq = (SELECT last_seq FROM snapshot)
      AND NOT EXISTS (SELECT FROM open_calls)
      AND NOT EXISTS (
          SELECT FROM messages
          WHERE {_USER_SESSION} AND client_id = ANY(%(client_ids)s::text[])
      )
      AND (%(after_id)s::bigint IS NULL OR EXISTS (
          SELECT FROM messages
          WHERE {_USER_SESSION} AND seq = %(after_seq)s::bigint AND id = %(after_id)s::bigint
      ))
    RETURNING last_seq
),
inserted AS (
    INSERT INTO messages
        (user_id, session_id, seq, role, payload, tokens, client_id, metadata, created_at)
    SELECT %(user_id)s::text, %(session_id)s::text,
           bumped.last_seq - (SELECT count(*) FROM batch) + batch.position, batch.role,
           CAST(batch.payload AS json), batch.tokens, batch.client_id,
           CAST(batch.metadata AS json), coalesce(batch.created_at, now())
    FROM bumped CROSS JOIN batch
    RETURNING {_MESSAGE_COLUMNS}
)"""


def _unindented(statement: str) -> str:
    """``statement`` without the indentation of its lines.

    psycopg parses a statement's placeholders once and remembers the result only for a
    statement of at most 4,096 characters (``psycopg._queries.MAX_CACHED_STATEMENT_LENGTH``):
    ``INPUT_AND_WINDOW`` as written is 4,108, and parsing it took 0.17 ms of every request's
    CPU. Without its indentation it is about a quarter shorter (line comments still end at
    their line's end).
    """
    return "\n".join(line.strip() for line in statement.splitlines())


WINDOW = _unindented(f"WITH {_READS}\n{_UNION}\nORDER BY seq DESC NULLS LAST")
"""The summary and the newest ``batch`` rows after ``max(floor, boundary)``, newest first, and
the floor used (0 when the session no longer holds message ``floor`` with id ``floor_id``).

Parameters: ``user_id``, ``session_id``, ``floor``, ``floor_id``, ``batch``."""

INPUT_AND_WINDOW = _unindented(
    f"WITH {_STORE},{_reads(beside_input=True)}\n"
    f"SELECT 'input' AS part, {_MESSAGE_COLUMNS}, {_NO_SUMMARY} FROM inserted"
    f"\nUNION ALL{_UNION}\nORDER BY seq DESC NULLS LAST"
)
"""``WINDOW``, after storing a user input when the session allows it (the module docstring);
the input is not among the rows read (a statement does not see its own writes).

Parameters: those of ``WINDOW`` and the input as a batch of one (``batch_parameters``)."""

APPEND = _unindented(
    f"WITH {_STORE}\nSELECT 'stored' AS part, {_MESSAGE_COLUMNS} FROM inserted ORDER BY seq"
)
"""Store a batch of messages when the session allows it without looking further (the module
docstring: a batch whose first message is not a tool result is valid after a closed tail once
it is valid on its own, which the caller checks), else nothing; the stored rows by seq.

Parameters: ``user_id``, ``session_id`` and the batch (``batch_parameters``)."""


def batch_parameters(
    rows: Sequence[Mapping[str, Any]], after: MessageAt | None = None
) -> dict[str, Any]:
    """The messages to store, one array per column (``_STORE``'s parameters), from rows of
    ``role``, ``payload`` and ``metadata`` (JSON text), ``tokens``, ``client_id`` and
    ``created_at`` (either may be None); with ``after``, stored only while the session still
    holds that message (a reply to a context built from it: ``storage.erasure``)."""
    return {
        "after_seq": after.seq if after else None,
        "after_id": after.id if after else None,
        "roles": [row["role"] for row in rows],
        "payloads": [row["payload"] for row in rows],
        "tokens": [row["tokens"] for row in rows],
        "client_ids": [row["client_id"] for row in rows],
        "metadatas": [row["metadata"] for row in rows],
        "created_ats": [row["created_at"] for row in rows],
    }


# The positions of the columns in a row of either statement.
_PART, _ID, _SEQ, _ROLE, _PAYLOAD, _TOKENS, _CLIENT_ID, _METADATA, _CREATED_AT = range(9)
_CONTENT, _KIND, _BOUNDARY_SEQ, _COVERED, _VERSION = range(9, 14)


@dataclass(frozen=True, slots=True)
class WindowRows:
    """What ``WINDOW`` or ``INPUT_AND_WINDOW`` returned.

    Attributes:
        input: the input as stored (None when there was none or it was not stored).
        summary: the session's summary, or None.
        recent: the rows read, newest first.
        floor: the seq the rows were read after (besides the summary's boundary): the caller's
            floor, or 0 when the session no longer holds the caller's message there.
    """

    input: StoredMessage | None
    summary: SummaryRecord | None
    recent: list[StoredMessage]
    floor: int


def run_window_statement(
    connection: psycopg.Connection[Any],
    statement: str,
    user_id: str,
    session_id: str,
    parameters: dict[str, Any],
) -> WindowRows:
    """Run ``WINDOW`` or ``INPUT_AND_WINDOW``: the stored input, the summary, the rows read."""
    stored: StoredMessage | None = None
    summary: SummaryRecord | None = None
    recent: list[StoredMessage] = []
    floor = 0
    params = {**parameters, "user_id": user_id, "session_id": session_id}
    for row in connection.execute(statement, params):
        part = row[_PART]
        if part == "recent":
            recent.append(_message(row, user_id, session_id))
        elif part == "summary":
            summary = _summary(row, user_id, session_id)
        elif part == "floor":
            floor = row[_SEQ]
        else:
            stored = _message(row, user_id, session_id)
    return WindowRows(stored, summary, recent, floor)


def run_append(
    connection: psycopg.Connection[Any],
    user_id: str,
    session_id: str,
    rows: Sequence[Mapping[str, Any]],
    after: MessageAt | None = None,
) -> list[StoredMessage]:
    """Run ``APPEND``: the stored messages by seq, none when the session did not allow it (or,
    with ``after``, no longer holds that message)."""
    parameters = {**batch_parameters(rows, after), "user_id": user_id, "session_id": session_id}
    return [_message(row, user_id, session_id) for row in connection.execute(APPEND, parameters)]


def _message(row: tuple[Any, ...], user_id: str, session_id: str) -> StoredMessage:
    # Validated on its way in, like every row the message store hands out.
    return StoredMessage.model_construct(
        id=row[_ID],
        user_id=user_id,
        session_id=session_id,
        seq=row[_SEQ],
        role=row[_ROLE],
        payload=row[_PAYLOAD],
        tokens=row[_TOKENS],
        client_id=row[_CLIENT_ID],
        metadata=row[_METADATA],
        created_at=row[_CREATED_AT],
    )


def _summary(row: tuple[Any, ...], user_id: str, session_id: str) -> SummaryRecord:
    return SummaryRecord(
        user_id=user_id,
        session_id=session_id,
        content=row[_CONTENT],
        kind=row[_KIND],
        boundary_seq=row[_BOUNDARY_SEQ],
        covered=row[_COVERED],
        version=row[_VERSION],
        updated_at=row[_CREATED_AT],  # the union's one time column
    )

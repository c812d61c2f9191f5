"""The statements of ``MessageStore.append``'s transaction (lock the session, find the client ids
stored already, load the open tail, insert the batch): the general write path's SQL, apart from
the store's methods as the request path's one statement is
(``storage.messages.request_statements``)."""

from collections import Counter
from typing import Any

from sqlalchemy import JSON, Connection, DateTime, Text, any_, bindparam, cast, func, select
from sqlalchemy import update as sql_update
from sqlalchemy.dialects.postgresql import ARRAY, insert

from storage.errors import InvalidInputError
from storage.inputs import check_id, check_text, encode_json
from storage.messages.reads import MESSAGES, message_of
from storage.models import SessionRow
from storage.records import NewMessage, StoredMessage

__all__ = [
    "by_client_id",
    "check_unique",
    "insert_messages",
    "lock_session",
    "message_row",
    "open_tail",
]

# One statement for any number of rows: SQLAlchemy's "insertmanyvalues" sends it in pages of
# multi-row VALUES (well below Postgres's 65,535 parameters per statement), all inside the
# caller's transaction, and returns the rows in parameter order. The documents arrive as JSON
# text made by ``encode_json`` and are cast on the server, so they are serialised exactly once.
_INSERT = (
    insert(MESSAGES)
    .values(
        user_id=bindparam("user_id"),
        session_id=bindparam("session_id"),
        seq=bindparam("seq"),
        role=bindparam("role"),
        payload=cast(bindparam("payload", type_=Text), JSON),
        tokens=bindparam("tokens"),
        client_id=bindparam("client_id"),
        metadata=cast(bindparam("metadata", type_=Text), JSON),
        created_at=func.coalesce(
            bindparam("created_at", type_=DateTime(timezone=True)), func.now()
        ),
    )
    .returning(*MESSAGES.c, sort_by_parameter_order=True)
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
    locked = (
        select(SessionRow.last_seq)
        .where(SessionRow.user_id == user_id, SessionRow.session_id == session_id)
        .with_for_update()
    )
    last_seq = connection.scalar(locked)
    if last_seq is None:
        connection.execute(
            insert(SessionRow)
            .values(user_id=user_id, session_id=session_id)
            .on_conflict_do_nothing(index_elements=[SessionRow.user_id, SessionRow.session_id])
        )
        # After the insert (ours or a concurrent one) it exists, unless erased at this very
        # moment (``erase_conversations``): then the insert fails and a retry starts afresh.
        last_seq = connection.scalar(locked)
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
    parameters = [
        {**row, "user_id": user_id, "session_id": session_id, "seq": last_seq + position}
        for position, row in enumerate(rows, start=1)
    ]
    stored = [message_of(row) for row in connection.execute(_INSERT, parameters)]
    connection.execute(
        sql_update(SessionRow)
        .where(SessionRow.user_id == user_id, SessionRow.session_id == session_id)
        # The clock, not the transaction's start: the idle sweep's watermark (``ArchiveMarks``)
        # must not pass a time that a transaction still to commit writes. This statement's
        # start, not clock_timestamp(): Citus refuses a volatile function in an UPDATE.
        .values(last_seq=last_seq + len(rows), last_active_at=func.statement_timestamp())
    )
    return stored


def by_client_id(
    connection: Connection, user_id: str, session_id: str, client_ids: list[str]
) -> dict[str, StoredMessage]:
    """Load the session's messages that carry one of ``client_ids``, keyed by client id."""
    if not client_ids:
        return {}
    # One array parameter, not one parameter per id: a batch may carry any number of ids.
    wanted = bindparam("client_ids", client_ids, type_=ARRAY(Text))
    rows = connection.execute(
        select(MESSAGES).where(
            MESSAGES.c.user_id == user_id,
            MESSAGES.c.session_id == session_id,
            MESSAGES.c.client_id == any_(wanted),
        )
    )
    return {row.client_id: message_of(row) for row in rows}


def open_tail(connection: Connection, user_id: str, session_id: str) -> list[StoredMessage]:
    """Load the stored messages from the last non-``tool`` message of the session onward."""
    # max() with the filter scans the session's key backwards and stops at the first non-tool
    # message, so the cost is the length of the tail, not of the session.
    in_session = (MESSAGES.c.user_id == user_id, MESSAGES.c.session_id == session_id)
    last_unit_start = (
        select(func.max(MESSAGES.c.seq))
        .where(*in_session, MESSAGES.c.role != "tool")
        .scalar_subquery()
    )
    rows = connection.execute(
        select(MESSAGES)
        .where(*in_session, MESSAGES.c.seq >= func.coalesce(last_unit_start, 0))
        .order_by(MESSAGES.c.seq)
    )
    return [message_of(row) for row in rows]

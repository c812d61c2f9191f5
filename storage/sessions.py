"""``MessageStore``: append-only messages of users' sessions, in per-session order."""

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from sqlalchemy import (
    JSON,
    Connection,
    DateTime,
    Row,
    Table,
    Text,
    any_,
    bindparam,
    cast,
    func,
    select,
    text,
)
from sqlalchemy import update as sql_update
from sqlalchemy.dialects.postgresql import ARRAY, insert

from storage.driver import driver_autocommit
from storage.engine import Database
from storage.errors import InvalidInputError
from storage.inputs import check_id, check_text, encode_json
from storage.models import MessageRow, SessionRow
from storage.records import NewMessage, StoredMessage, SummaryRecord
from storage.request_statements import (
    INPUT_AND_WINDOW,
    WINDOW,
    batch_parameters,
    run_window_statement,
)

__all__ = ["MessageStore", "Validator"]

#: The messages table, for Core statements on the hot paths.
MESSAGES: Table = MessageRow.__table__  # type: ignore[assignment]  # declared with a Table

#: Called as ``validate(open_tail, new_messages)`` before a batch is stored; raising rejects it.
Validator = Callable[[list[StoredMessage], list[NewMessage]], None]

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


# The boundary comes from the summary row (0 without one), in the same statement. When a job of
# the given kind is already pending for the session (a fold queued, the worker behind) the sum is
# not computed: the answer would not change what the caller does, and that is exactly when the
# tail after the boundary grows long. So the scan is never longer than what one fold leaves.
_TOKENS_AFTER_SUMMARY = text(
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


class MessageStore:
    """The messages of every session, each session named by its user and its session id.

    Every method takes the user id first and only ever touches that user's sessions: two users
    may both have a session ``"default"``, and a session id that only another user has reads
    as empty, exactly like one nobody has.

    Ids (user, session, client) are non-empty strings of at most ``MAX_ID_LENGTH`` characters;
    anything else is an ``InvalidInputError`` before any SQL runs.
    """

    def __init__(self, database: Database) -> None:
        """Create a store on an open database.

        Args:
            database: The database to use.
        """
        self._database = database

    def append(
        self,
        user_id: str,
        session_id: str,
        messages: Sequence[NewMessage],
        *,
        validate: Validator | None = None,
    ) -> list[StoredMessage]:
        """Append messages to a session (created if missing), all of them or none.

        The session row is locked for the whole transaction, which serialises appends to one
        session: seqs are contiguous and follow commit order. A message whose ``client_id`` is
        already stored in the session is not stored again; its stored record is returned in its
        place, which makes a retried append harmless. A batch may hold any number of messages.

        Args:
            user_id: The user the session belongs to.
            session_id: The session, chosen by the application.
            messages: The messages, in order.
            validate: Called with the session's open tail (its stored messages from the last
                non-``tool`` message on, so an open tool call can be checked) and the messages
                about to be inserted, while the lock is held; skipped when nothing is new.
                Whatever it raises propagates unchanged and nothing is stored.

        Returns:
            One stored record per input message, in input order.

        Raises:
            InvalidInputError: An id is not usable, a client id appears twice in ``messages``,
                or a message cannot be stored (a lone surrogate, a value that is not JSON);
                the error names the message by its position. Nothing is stored.
            DatabaseUnavailableError: The database could not be reached; nothing is stored.
        """
        check_id("user_id", user_id)
        check_id("session_id", session_id)
        rows = [_row(index, message) for index, message in enumerate(messages)]
        client_ids = [m.client_id for m in messages if m.client_id is not None]
        _check_unique(client_ids)
        with self._database.transaction() as session:
            # Core statements on the session's connection: this is the hot path of every
            # request, and the ORM's unit of work would only add overhead here.
            connection = session.connection()
            last_seq = _lock_session(connection, user_id, session_id)
            existing = _by_client_id(connection, user_id, session_id, client_ids)
            fresh = [
                (message, row)
                for message, row in zip(messages, rows, strict=True)
                if message.client_id is None or message.client_id not in existing
            ]
            stored: list[StoredMessage] = []
            if fresh:
                if validate is not None:
                    tail = _open_tail(connection, user_id, session_id)
                    validate(tail, [message for message, _ in fresh])
                stored = _insert(connection, user_id, session_id, last_seq, [r for _, r in fresh])
            inserted = iter(stored)
            return [
                existing[m.client_id]
                if m.client_id is not None and m.client_id in existing
                else next(inserted)
                for m in messages
            ]

    def append_input(
        self,
        user_id: str,
        session_id: str,
        message: NewMessage,
        *,
        floor: int = 0,
        batch: int = 64,
    ) -> tuple[StoredMessage, SummaryRecord | None, Iterator[StoredMessage]] | None:
        """Append a user's input and read the summary and the messages after it, in one statement.

        What a request needs in one round trip, committed durably when it returns: the input
        appended (as ``append`` would), the session's summary, and the session's messages after
        the larger of the summary boundary and ``floor``, newest first (the input first), read
        ``batch`` at a time as ``walk_back`` reads them.

        Stores nothing and returns None when the general path must decide (see
        ``storage.request_statements``): the session does not exist, tool calls of its last
        assistant message wait for results, the message's client id is stored already, or
        another writer appended at the same moment. Call ``append`` then.

        Args:
            user_id: The user the session belongs to.
            session_id: The session.
            message: A ``user`` message.
            floor: Messages at or before this seq are not read (those the caller has).
            batch: How many messages each query reads.

        Raises:
            InvalidInputError: An id is not usable, the message cannot be stored or is not a
                ``user`` message, or ``batch`` is below 1. Nothing is stored.
            DatabaseUnavailableError: The database could not be reached; nothing is stored.
        """
        _check_session(user_id, session_id)
        if message.role != "user":
            raise InvalidInputError(f"append_input stores a user message, not {message.role!r}")
        if batch < 1:
            raise InvalidInputError("batch must be at least 1")
        input_batch = batch_parameters([_row(0, message)])
        with driver_autocommit(self._database) as connection:
            stored, summary, recent = run_window_statement(
                connection,
                INPUT_AND_WINDOW,
                user_id,
                session_id,
                {**input_batch, "floor": floor, "batch": batch},
            )
        if stored is None:
            return None
        after_seq = max(floor, summary.boundary_seq if summary else 0)
        upto = recent[-1].seq - 1 if len(recent) == batch else after_seq
        walked = self._walk([stored, *recent], user_id, session_id, upto, after_seq, batch)
        return stored, summary, walked

    def walk_back(
        self, user_id: str, session_id: str, *, after_seq: int = 0, batch: int = 64
    ) -> Iterator[StoredMessage]:
        """Yield a session's messages newest first, reading ``batch`` rows at a time.

        Each batch is one short query on the session's key, made only when the caller asks
        for a message beyond the previous batch, so the cost follows what is consumed, not the
        session length. No connection is held between batches.

        Args:
            user_id: The user the session belongs to.
            session_id: The session.
            after_seq: Stop before reaching this seq (messages at or before it are never read).
            batch: How many messages each query reads.

        Returns:
            An iterator over stored messages, highest seq first.

        Raises:
            InvalidInputError: An id is not usable, or ``batch`` is below 1.
        """
        _check_session(user_id, session_id)
        if batch < 1:
            raise InvalidInputError("batch must be at least 1")
        with self._database.reading() as connection:
            # One statement for the newest batch (no separate read of the last seq): a request
            # that needs only the newest messages makes a single round trip.
            first = _messages(
                connection, user_id, session_id, after_seq, limit=batch, newest_first=True
            )
        upto = first[-1].seq - 1 if len(first) == batch else after_seq
        return self._walk(first, user_id, session_id, upto, after_seq, batch)

    def walk_back_after_summary(
        self, user_id: str, session_id: str, *, floor: int = 0, batch: int = 64
    ) -> tuple[SummaryRecord | None, Iterator[StoredMessage]]:
        """The session's summary, and its messages after the summary boundary, newest first.

        Like ``walk_back`` with ``after_seq`` the larger of the summary boundary and ``floor``,
        but the summary and the first batch are read in one statement: one round trip.

        Raises:
            InvalidInputError: An id is not usable, or ``batch`` is below 1.
        """
        _check_session(user_id, session_id)
        if batch < 1:
            raise InvalidInputError("batch must be at least 1")
        with driver_autocommit(self._database) as connection:
            _, summary, first = run_window_statement(
                connection, WINDOW, user_id, session_id, {"floor": floor, "batch": batch}
            )
        after_seq = max(floor, summary.boundary_seq if summary else 0)
        upto = first[-1].seq - 1 if len(first) == batch else after_seq
        return summary, self._walk(first, user_id, session_id, upto, after_seq, batch)

    def _walk(
        self,
        first: list[StoredMessage],
        user_id: str,
        session_id: str,
        upto: int,
        after_seq: int,
        batch: int,
    ) -> Iterator[StoredMessage]:
        # Seqs are contiguous (appends are serialised), so each seq range holds exactly `batch`.
        yield from first
        while upto > after_seq:
            with self._database.reading() as connection:
                records = _messages(
                    connection,
                    user_id,
                    session_id,
                    max(after_seq, upto - batch),
                    upto_seq=upto,
                    newest_first=True,
                )
            yield from records
            upto -= batch

    def history(self, user_id: str, session_id: str) -> list[StoredMessage]:
        """Return every message of a session in order ([] for a session the user does not have).

        Raises:
            InvalidInputError: An id is not usable.
        """
        return self.between(user_id, session_id, 0, None)

    def between(
        self, user_id: str, session_id: str, after_seq: int, upto_seq: int | None
    ) -> list[StoredMessage]:
        """Return the messages with ``after_seq < seq <= upto_seq``, in order.

        Args:
            user_id: The user the session belongs to.
            session_id: The session.
            after_seq: Messages at or before this seq are left out.
            upto_seq: Messages after this seq are left out; None for no upper bound.

        Returns:
            The messages, lowest seq first.

        Raises:
            InvalidInputError: An id is not usable.
        """
        _check_session(user_id, session_id)
        with self._database.reading() as connection:
            last = _last_seq(connection, user_id, session_id)
            upto = last if upto_seq is None else min(upto_seq, last)
            return _messages(connection, user_id, session_id, after_seq, upto_seq=upto)

    def tokens_after_summary(
        self, user_id: str, session_id: str, *, unless_queued: str | None = None
    ) -> int | None:
        """The stored token counts of the session's messages after its summary boundary, summed.

        What decides whether a fold is due, read without loading a message: one index range
        scan on the session's key from the boundary on.

        Args:
            user_id: The user the session belongs to.
            session_id: The session.
            unless_queued: A job kind (the fold's): when such a job is pending for the session,
                nothing is summed and the answer is ``None``. The tail after the boundary only
                grows long while a fold waits for a worker, so the sum stays as short as the
                window a fold leaves.

        Raises:
            InvalidInputError: An id is not usable.
        """
        _check_session(user_id, session_id)
        with self._database.reading() as connection:
            total = connection.execute(
                _TOKENS_AFTER_SUMMARY,
                {"user_id": user_id, "session_id": session_id, "queued_kind": unless_queued},
            ).scalar_one()
        return None if total is None else int(total)

    def read_increment(
        self,
        user_id: str,
        session_id: str,
        *,
        after_seq: int,
        max_tokens: int,
        max_messages: int = 1_000,
        batch: int = 64,
    ) -> list[StoredMessage]:
        """Return the next messages after ``after_seq``, as many as fit ``max_tokens``.

        For a consolidation step that folds one bounded increment: the cost is the size of the
        increment (plus at most one ``batch``), never the length of the backlog behind it. Token
        counts are the ones stored with the messages.

        Args:
            user_id: The user the session belongs to.
            session_id: The session.
            after_seq: Start after this seq (a summary's boundary).
            max_tokens: Stop before the message that would bring the total over this. The
                first message is always returned, however large, so a caller always advances.
            max_messages: Never return more messages than this.
            batch: How many rows each query reads.

        Returns:
            The messages, lowest seq first; [] when nothing follows ``after_seq``.

        Raises:
            InvalidInputError: An id is not usable, or a limit is below 1.
        """
        _check_session(user_id, session_id)
        if min(max_tokens, max_messages, batch) < 1:
            raise InvalidInputError("max_tokens, max_messages and batch must be at least 1")
        increment: list[StoredMessage] = []
        total = 0
        cursor = after_seq
        with self._database.reading() as connection:
            while len(increment) < max_messages:
                limit = min(batch, max_messages - len(increment))
                rows = _messages(connection, user_id, session_id, cursor, limit=limit)
                for record in rows:
                    if increment and total + record.tokens > max_tokens:
                        return increment
                    increment.append(record)
                    total += record.tokens
                if len(rows) < limit:
                    break
                cursor = rows[-1].seq
        return increment


def _check_session(user_id: str, session_id: str) -> None:
    """Raise ``InvalidInputError`` unless both ids are usable."""
    check_id("user_id", user_id)
    check_id("session_id", session_id)


def _check_unique(client_ids: list[str]) -> None:
    """Raise ``InvalidInputError`` naming (a few of) the client ids that appear twice."""
    counts = Counter(client_ids)
    repeated = [client_id for client_id, count in counts.items() if count > 1]
    if repeated:
        # At most three ids, each cut to 64 characters: the message stays short.
        named = ", ".join(repr(client_id[:64]) for client_id in repeated[:3])
        raise InvalidInputError(f"a client id appears twice in one batch: {named}")


def _row(index: int, message: NewMessage) -> dict[str, Any]:
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


def _lock_session(connection: Connection, user_id: str, session_id: str) -> int:
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


def _insert(
    connection: Connection,
    user_id: str,
    session_id: str,
    last_seq: int,
    rows: list[dict[str, Any]],
) -> list[StoredMessage]:
    """Insert the rows after ``last_seq`` and move the session's last seq past them."""
    parameters = [
        {**row, "user_id": user_id, "session_id": session_id, "seq": last_seq + position}
        for position, row in enumerate(rows, start=1)
    ]
    stored = [_record(row) for row in connection.execute(_INSERT, parameters)]
    connection.execute(
        sql_update(SessionRow)
        .where(SessionRow.user_id == user_id, SessionRow.session_id == session_id)
        .values(last_seq=last_seq + len(rows))
    )
    return stored


def _last_seq(connection: Connection, user_id: str, session_id: str) -> int:
    """Return the session's last seq (0 for a session this user does not have)."""
    last = connection.scalar(
        select(SessionRow.last_seq).where(
            SessionRow.user_id == user_id, SessionRow.session_id == session_id
        )
    )
    return int(last or 0)


def _messages(
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
    conditions = [
        MESSAGES.c.user_id == user_id,
        MESSAGES.c.session_id == session_id,
        MESSAGES.c.seq > after_seq,
    ]
    if upto_seq is not None:
        conditions.append(MESSAGES.c.seq <= upto_seq)
    order = MESSAGES.c.seq.desc() if newest_first else MESSAGES.c.seq
    rows = connection.execute(select(MESSAGES).where(*conditions).order_by(order).limit(limit))
    return [_record(row) for row in rows]


def _by_client_id(
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
    return {row.client_id: _record(row) for row in rows}


def _open_tail(connection: Connection, user_id: str, session_id: str) -> list[StoredMessage]:
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
    return [_record(row) for row in rows]


def _record(row: Row[Any]) -> StoredMessage:
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

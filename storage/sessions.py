"""``MessageStore``: append-only messages of user-owned sessions, in per-session order."""

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from sqlalchemy import Connection, Row, Table, func, select, update
from sqlalchemy.dialects.postgresql import insert

from storage.engine import Database
from storage.errors import SessionOwnershipError
from storage.models import MessageRow, SessionRow
from storage.records import NewMessage, StoredMessage

__all__ = ["MessageStore", "Validator"]

#: The messages table, for Core statements on the hot paths.
MESSAGES: Table = MessageRow.__table__  # type: ignore[assignment]  # declared with a Table

#: Called as ``validate(open_tail, new_messages)`` before a batch is stored; raising rejects it.
Validator = Callable[[list[StoredMessage], list[NewMessage]], None]


class MessageStore:
    """The messages of every session, each session owned by one user.

    Every method takes the user id first and only ever touches that user's sessions: a session
    id that belongs to another user raises ``SessionOwnershipError``; an unknown session reads
    as empty.
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
        place, which makes a retried append harmless.

        Args:
            user_id: The user the session belongs to.
            session_id: The session, chosen by the application.
            messages: The messages, in order.
            validate: Called with the session's open tail (its stored messages from the last
                non-``tool`` message on, so an open tool call can be checked) and the messages
                about to be inserted, while the lock is held; skipped when nothing is new.
                Whatever it raises propagates unchanged (``MessageValidationError`` is the
                intended type) and nothing is stored.

        Returns:
            One stored record per input message, in input order.

        Raises:
            ValueError: A client id appears twice in ``messages``.
            SessionOwnershipError: The session belongs to another user; nothing is stored.
            DatabaseUnavailableError: The database could not be reached.
        """
        client_ids = [m.client_id for m in messages if m.client_id is not None]
        if len(client_ids) != len(set(client_ids)):
            raise ValueError(f"a client id appears twice in one batch: {client_ids}")
        with self._database.transaction() as session:
            # Core statements on the session's connection: this is the hot path of every
            # request, and the ORM's unit of work would only add overhead here.
            connection = session.connection()
            owner = _lock_session(connection, session_id)
            if owner is None:
                connection.execute(
                    insert(SessionRow)
                    .values(id=session_id, user_id=user_id)
                    .on_conflict_do_nothing(index_elements=[SessionRow.id])
                )
                owner = _lock_session(connection, session_id)
            if owner is None or owner.user_id != user_id:  # sessions are never deleted
                raise SessionOwnershipError(session_id)
            existing = _by_client_id(connection, session_id, client_ids)
            fresh = [m for m in messages if m.client_id is None or m.client_id not in existing]
            stored: list[StoredMessage] = []
            if fresh:
                if validate is not None:
                    validate(_open_tail(connection, session_id), fresh)
                rows = connection.execute(
                    insert(MESSAGES)
                    .values(
                        [
                            {
                                "session_id": session_id,
                                "seq": owner.last_seq + position,
                                "role": m.role,
                                "payload": m.payload,
                                "tokens": m.tokens,
                                "client_id": m.client_id,
                                "metadata": m.metadata,
                            }
                            for position, m in enumerate(fresh, start=1)
                        ]
                    )
                    .returning(*MESSAGES.c)
                )
                stored = sorted(map(_record, rows), key=lambda record: record.seq)
                connection.execute(
                    update(SessionRow)
                    .where(SessionRow.id == session_id)
                    .values(last_seq=owner.last_seq + len(fresh))
                )
            inserted = iter(stored)
            return [
                existing[m.client_id]
                if m.client_id is not None and m.client_id in existing
                else next(inserted)
                for m in messages
            ]

    def walk_back(
        self, user_id: str, session_id: str, *, after_seq: int = 0, batch: int = 64
    ) -> Iterator[StoredMessage]:
        """Yield a session's messages newest first, reading ``batch`` rows at a time.

        The owner is checked at the call; then each batch is one short query on the
        (session_id, seq) index, made only when the caller asks for a message beyond the
        previous batch, so the cost follows what is consumed, not the session length. No
        connection is held between batches.

        Args:
            user_id: The user the session belongs to.
            session_id: The session.
            after_seq: Stop before reaching this seq (messages at or before it are never read).
            batch: How many messages each query reads.

        Returns:
            An iterator over stored messages, highest seq first.

        Raises:
            SessionOwnershipError: The session belongs to another user.
        """
        if batch < 1:
            raise ValueError("batch must be at least 1")
        with self._database.reading() as connection:
            last = _owned_last_seq(connection, user_id, session_id)
            first = _between(
                connection, session_id, max(after_seq, last - batch), last, newest_first=True
            )
        return self._walk(first, session_id, last - batch, after_seq, batch)

    def _walk(
        self,
        first: list[StoredMessage],
        session_id: str,
        upto: int,
        after_seq: int,
        batch: int,
    ) -> Iterator[StoredMessage]:
        # Seqs are contiguous (appends are serialised), so each seq range holds exactly `batch`.
        yield from first
        while upto > after_seq:
            with self._database.reading() as connection:
                records = _between(
                    connection, session_id, max(after_seq, upto - batch), upto, newest_first=True
                )
            yield from records
            upto -= batch

    def history(self, user_id: str, session_id: str) -> list[StoredMessage]:
        """Return every message of a session in order ([] for an unknown session)."""
        return self.between(user_id, session_id, 0, None)

    def between(
        self, user_id: str, session_id: str, after_seq: int, upto_seq: int | None
    ) -> list[StoredMessage]:
        """Return the messages with ``after_seq < seq <= upto_seq``, in order.

        Args:
            user_id: The user the session belongs to.
            session_id: The session.
            after_seq: Exclusive lower bound.
            upto_seq: Inclusive upper bound, or None for the end of the session.

        Raises:
            SessionOwnershipError: The session belongs to another user.
        """
        with self._database.reading() as connection:
            last = _owned_last_seq(connection, user_id, session_id)
            upto = last if upto_seq is None else min(upto_seq, last)
            return _between(connection, session_id, after_seq, upto)

    def tokens_after(self, user_id: str, session_id: str, after_seq: int) -> tuple[int, int]:
        """Return the total tokens and the number of the messages after ``after_seq``.

        Raises:
            SessionOwnershipError: The session belongs to another user.
        """
        with self._database.reading() as connection:
            _owned_last_seq(connection, user_id, session_id)
            total, count = connection.execute(
                select(func.coalesce(func.sum(MessageRow.tokens), 0), func.count()).where(
                    MessageRow.session_id == session_id, MessageRow.seq > after_seq
                )
            ).one()
            return int(total), int(count)

    def session_owner(self, session_id: str) -> str | None:
        """Return the user owning a session, or None when no such session exists."""
        with self._database.reading() as connection:
            return connection.scalar(select(SessionRow.user_id).where(SessionRow.id == session_id))

    def last_seq(self, user_id: str, session_id: str) -> int:
        """Return the seq of the session's last message (0 when empty or unknown).

        Raises:
            SessionOwnershipError: The session belongs to another user.
        """
        with self._database.reading() as connection:
            return _owned_last_seq(connection, user_id, session_id)


def _lock_session(connection: Connection, session_id: str) -> Row[str, int] | None:
    """Lock the session row for this transaction; return its owner and last seq."""
    return connection.execute(
        select(SessionRow.user_id, SessionRow.last_seq)
        .where(SessionRow.id == session_id)
        .with_for_update()
    ).one_or_none()


def _owned_last_seq(connection: Connection, user_id: str, session_id: str) -> int:
    """Return the session's last seq after checking its owner (0 for an unknown session)."""
    row = connection.execute(
        select(SessionRow.user_id, SessionRow.last_seq).where(SessionRow.id == session_id)
    ).one_or_none()
    if row is None:
        return 0
    if row.user_id != user_id:
        raise SessionOwnershipError(session_id)
    return int(row.last_seq)


def _between(
    connection: Connection,
    session_id: str,
    after_seq: int,
    upto_seq: int,
    *,
    newest_first: bool = False,
) -> list[StoredMessage]:
    """The messages with ``after_seq < seq <= upto_seq`` in seq order (or newest first)."""
    order = MESSAGES.c.seq.desc() if newest_first else MESSAGES.c.seq
    rows = connection.execute(
        select(MESSAGES)
        .where(
            MESSAGES.c.session_id == session_id,
            MESSAGES.c.seq > after_seq,
            MESSAGES.c.seq <= upto_seq,
        )
        .order_by(order)
    )
    return [_record(row) for row in rows]


def _by_client_id(
    connection: Connection, session_id: str, client_ids: list[str]
) -> dict[str, StoredMessage]:
    """Load the session's messages that carry one of ``client_ids``, keyed by client id."""
    if not client_ids:
        return {}
    rows = connection.execute(
        select(MESSAGES).where(
            MESSAGES.c.session_id == session_id, MESSAGES.c.client_id.in_(client_ids)
        )
    )
    return {row.client_id: _record(row) for row in rows}


def _open_tail(connection: Connection, session_id: str) -> list[StoredMessage]:
    """Load the stored messages from the last non-``tool`` message of the session onward."""
    # max() with the filter scans the (session_id, seq) index backwards and stops at the first
    # non-tool message, so the cost is the length of the tail, not of the session.
    last_unit_start = (
        select(func.max(MESSAGES.c.seq))
        .where(MESSAGES.c.session_id == session_id, MESSAGES.c.role != "tool")
        .scalar_subquery()
    )
    rows = connection.execute(
        select(MESSAGES)
        .where(
            MESSAGES.c.session_id == session_id,
            MESSAGES.c.seq >= func.coalesce(last_unit_start, 0),
        )
        .order_by(MESSAGES.c.seq)
    )
    return [_record(row) for row in rows]


def _record(row: Row[Any]) -> StoredMessage:
    """Turn a row of the messages table into the record callers see."""
    # The row was validated on its way in; skipping validation keeps window loads cheap.
    return StoredMessage.model_construct(
        id=row.id,
        session_id=row.session_id,
        seq=row.seq,
        role=row.role,
        payload=row.payload,
        tokens=row.tokens,
        client_id=row.client_id,
        metadata=row.metadata,
        created_at=row.created_at,
    )

"""``MessageStore``: append-only messages of user-owned sessions, in per-session order."""

from collections.abc import Callable, Iterator, Sequence

from sqlalchemy import func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from storage.engine import Database
from storage.errors import SessionOwnershipError
from storage.models import MessageRow, SessionRow
from storage.records import NewMessage, StoredMessage

__all__ = ["MessageStore", "Validator"]

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
            session.execute(
                insert(SessionRow)
                .values(id=session_id, user_id=user_id)
                .on_conflict_do_nothing(index_elements=[SessionRow.id])
            )
            owner = session.execute(
                select(SessionRow.user_id, SessionRow.last_seq)
                .where(SessionRow.id == session_id)
                .with_for_update()
            ).one()
            if owner.user_id != user_id:
                raise SessionOwnershipError(session_id)
            existing = _by_client_id(session, session_id, client_ids)
            fresh = [m for m in messages if m.client_id is None or m.client_id not in existing]
            rows: list[MessageRow] = []
            if fresh:
                if validate is not None:
                    validate(_open_tail(session, session_id), fresh)
                rows = [
                    MessageRow(
                        session_id=session_id,
                        seq=owner.last_seq + position,
                        role=m.role,
                        payload=m.payload,
                        tokens=m.tokens,
                        client_id=m.client_id,
                        meta=m.metadata,
                    )
                    for position, m in enumerate(fresh, start=1)
                ]
                session.add_all(rows)
                session.execute(
                    update(SessionRow)
                    .where(SessionRow.id == session_id)
                    .values(last_seq=owner.last_seq + len(rows))
                )
                session.flush()
            inserted = iter(rows)
            return [
                _record(existing[m.client_id])
                if m.client_id is not None and m.client_id in existing
                else _record(next(inserted))
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
        with self._database.transaction() as session:
            last = _owned_last_seq(session, user_id, session_id)
        return self._walk(session_id, last, after_seq, batch)

    def _walk(
        self, session_id: str, upto: int, after_seq: int, batch: int
    ) -> Iterator[StoredMessage]:
        # Seqs are contiguous (appends are serialised), so each seq range holds exactly `batch`.
        # Plain column rows, not ORM objects: this is the hot path of every request.
        table = MessageRow.__table__
        while upto > after_seq:
            with self._database.transaction() as session:
                rows = session.execute(
                    select(table)
                    .where(
                        table.c.session_id == session_id,
                        table.c.seq > max(after_seq, upto - batch),
                        table.c.seq <= upto,
                    )
                    .order_by(table.c.seq.desc())
                ).all()
            for row in rows:
                yield StoredMessage.model_construct(
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
        with self._database.transaction() as session:
            last = _owned_last_seq(session, user_id, session_id)
            upto = last if upto_seq is None else min(upto_seq, last)
            return [_record(row) for row in _between(session, session_id, after_seq, upto)]

    def tokens_after(self, user_id: str, session_id: str, after_seq: int) -> tuple[int, int]:
        """Return the total tokens and the number of the messages after ``after_seq``.

        Raises:
            SessionOwnershipError: The session belongs to another user.
        """
        with self._database.transaction() as session:
            _owned_last_seq(session, user_id, session_id)
            total, count = session.execute(
                select(func.coalesce(func.sum(MessageRow.tokens), 0), func.count()).where(
                    MessageRow.session_id == session_id, MessageRow.seq > after_seq
                )
            ).one()
            return int(total), int(count)

    def session_owner(self, session_id: str) -> str | None:
        """Return the user owning a session, or None when no such session exists."""
        with self._database.transaction() as session:
            return session.scalar(select(SessionRow.user_id).where(SessionRow.id == session_id))

    def last_seq(self, user_id: str, session_id: str) -> int:
        """Return the seq of the session's last message (0 when empty or unknown).

        Raises:
            SessionOwnershipError: The session belongs to another user.
        """
        with self._database.transaction() as session:
            return _owned_last_seq(session, user_id, session_id)


def _owned_last_seq(session: Session, user_id: str, session_id: str) -> int:
    """Return the session's last seq after checking its owner (0 for an unknown session)."""
    row = session.execute(
        select(SessionRow.user_id, SessionRow.last_seq).where(SessionRow.id == session_id)
    ).one_or_none()
    if row is None:
        return 0
    if row.user_id != user_id:
        raise SessionOwnershipError(session_id)
    return int(row.last_seq)


def _between(session: Session, session_id: str, after_seq: int, upto_seq: int) -> list[MessageRow]:
    """Load the rows with ``after_seq < seq <= upto_seq`` in seq order, via the seq index."""
    return list(
        session.scalars(
            select(MessageRow)
            .where(
                MessageRow.session_id == session_id,
                MessageRow.seq > after_seq,
                MessageRow.seq <= upto_seq,
            )
            .order_by(MessageRow.seq)
        )
    )


def _by_client_id(
    session: Session, session_id: str, client_ids: list[str]
) -> dict[str, MessageRow]:
    """Load the session's rows that carry one of ``client_ids``, keyed by client id."""
    if not client_ids:
        return {}
    rows = session.scalars(
        select(MessageRow).where(
            MessageRow.session_id == session_id, MessageRow.client_id.in_(client_ids)
        )
    )
    return {row.client_id: row for row in rows if row.client_id is not None}


def _open_tail(session: Session, session_id: str) -> list[StoredMessage]:
    """Load the stored messages from the last non-``tool`` message of the session onward."""
    # Scans backwards on (session_id, seq) and stops at the first non-tool message, so the cost
    # is the length of the tail, not of the session.
    start = session.scalar(
        select(MessageRow.seq)
        .where(MessageRow.session_id == session_id, MessageRow.role != "tool")
        .order_by(MessageRow.seq.desc())
        .limit(1)
    )
    rows = session.scalars(
        select(MessageRow)
        .where(MessageRow.session_id == session_id, MessageRow.seq >= (start or 0))
        .order_by(MessageRow.seq)
    )
    return [_record(row) for row in rows]


def _record(row: MessageRow) -> StoredMessage:
    """Turn an ORM row into the record callers see."""
    # The row was validated on its way in; skipping validation keeps window loads cheap.
    return StoredMessage.model_construct(
        id=row.id,
        session_id=row.session_id,
        seq=row.seq,
        role=row.role,
        payload=row.payload,
        tokens=row.tokens,
        client_id=row.client_id,
        metadata=row.meta,
        created_at=row.created_at,
    )

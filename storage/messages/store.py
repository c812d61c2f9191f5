"""``MessageStore``: append-only messages of users' sessions, in per-session order."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from storage.driver import driver_autocommit
from storage.engine import Database
from storage.erasure import lock_source
from storage.errors import InvalidInputError
from storage.inputs import check_id
from storage.messages.appends import (
    by_client_id,
    check_unique,
    insert_messages,
    lock_session,
    message_row,
    open_tail,
)
from storage.messages.reads import (
    TOKENS_AFTER_SUMMARY,
    increment_after,
    last_seq_of,
    messages_after,
    turn_start_of,
)
from storage.messages.request_statements import (
    INPUT_AND_WINDOW,
    WINDOW,
    batch_parameters,
    run_append,
    run_window_statement,
)
from storage.messages.walking import WindowRead, floor_parameters, walk_back_from, window_read
from storage.records import MessageAt, NewMessage, StoredMessage

__all__ = ["MessageStore", "Validator", "WindowRead"]

#: Called as ``validate(open_tail, new_messages)`` before a batch is stored; raising rejects it.
Validator = Callable[[list[StoredMessage], list[NewMessage]], None]


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
        after: MessageAt | None = None,
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
            after: The message the batch follows from (a reply, and the context it answers):
                stored only while the session still holds it, never into a session erased
                (and perhaps started again) since (``storage.erasure``).

        Returns:
            One stored record per input message, in input order.

        Raises:
            InvalidInputError: An id is not usable, a client id appears twice in ``messages``,
                or a message cannot be stored (a lone surrogate, a value that is not JSON);
                the error names the message by its position. Nothing is stored.
            SessionErasedError: With ``after``, the session no longer holds it.
            DatabaseUnavailableError: The database could not be reached; nothing is stored.
        """
        check_id("user_id", user_id)
        check_id("session_id", session_id)
        rows = [message_row(index, message) for index, message in enumerate(messages)]
        client_ids = [m.client_id for m in messages if m.client_id is not None]
        check_unique(client_ids)
        with self._database.transaction() as connection:
            if after is not None:
                lock_source(connection, user_id, session_id, after.seq, after.id)
            last_seq = lock_session(connection, user_id, session_id)
            existing = by_client_id(connection, user_id, session_id, client_ids)
            fresh = [
                (message, row)
                for message, row in zip(messages, rows, strict=True)
                if message.client_id is None or message.client_id not in existing
            ]
            stored: list[StoredMessage] = []
            if fresh:
                if validate is not None:
                    tail = open_tail(connection, user_id, session_id)
                    validate(tail, [message for message, _ in fresh])
                stored = insert_messages(
                    connection, user_id, session_id, last_seq, [r for _, r in fresh]
                )
            inserted = iter(stored)
            return [
                existing[m.client_id]
                if m.client_id is not None and m.client_id in existing
                else next(inserted)
                for m in messages
            ]

    def append_after_closed_tail(
        self,
        user_id: str,
        session_id: str,
        messages: Sequence[NewMessage],
        *,
        after: MessageAt | None = None,
    ) -> list[StoredMessage] | None:
        """Append messages in one statement, or store nothing and return None (call ``append``).

        Stored only when that is sure to be right without looking further (see
        ``storage.messages.request_statements``): the session exists, its tail is closed, no
        client id of ``messages`` is stored in it, nobody appends at the same moment, and (with
        ``after``) the session still holds that message. The caller has checked that
        ``messages`` are valid on their own and do not start with a ``tool`` result: after a
        closed tail they are then valid.

        Raises:
            InvalidInputError: An id is not usable, a client id appears twice in ``messages``,
                or a message cannot be stored; nothing is stored.
            DatabaseUnavailableError: The database could not be reached; nothing is stored.
        """
        _check_session(user_id, session_id)
        rows = [message_row(index, message) for index, message in enumerate(messages)]
        check_unique([m.client_id for m in messages if m.client_id is not None])
        if not rows:
            return None
        with driver_autocommit(self._database) as connection:
            stored = run_append(connection, user_id, session_id, rows, after)
        return stored or None

    def append_input(
        self,
        user_id: str,
        session_id: str,
        message: NewMessage,
        *,
        held: StoredMessage | None = None,
        batch: int = 64,
    ) -> tuple[StoredMessage, WindowRead] | None:
        """Append a user's input and read the summary and the messages after it, in one statement.

        What a request needs in one round trip, committed durably when it returns: the input
        appended (as ``append`` would), and what ``walk_back_after_summary`` reads (the input
        first among the messages).

        Stores nothing and returns None when the general path must decide (see
        ``storage.messages.request_statements``): the session does not exist, tool calls of its last
        assistant message wait for results, the message's client id is stored already, or
        another writer appended at the same moment. Call ``append`` then.

        Args:
            user_id: The user the session belongs to.
            session_id: The session.
            message: A ``user`` message.
            held: The newest message the caller holds already (see ``walk_back_after_summary``).
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
        input_batch = batch_parameters([message_row(0, message)])
        with driver_autocommit(self._database) as connection:
            rows = run_window_statement(
                connection,
                INPUT_AND_WINDOW,
                user_id,
                session_id,
                {**input_batch, **floor_parameters(held), "batch": batch},
            )
        if rows.input is None:
            return None
        return rows.input, window_read(
            self._database, rows, [rows.input], user_id, session_id, batch
        )

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
            first = messages_after(
                connection, user_id, session_id, after_seq, limit=batch, newest_first=True
            )
        upto = first[-1].seq - 1 if len(first) == batch else after_seq
        return walk_back_from(self._database, first, user_id, session_id, upto, after_seq, batch)

    def walk_back_after_summary(
        self,
        user_id: str,
        session_id: str,
        *,
        held: StoredMessage | None = None,
        batch: int = 64,
    ) -> WindowRead:
        """The session's summary, and its messages after the summary boundary, newest first.

        Like ``walk_back`` after the summary boundary, but the summary and the first batch are
        read in one statement: one round trip. A caller that holds the session's messages up
        to ``held`` (a cache) gets only those after it, if the session still holds ``held``
        under its id; if not (the session was erased since, and perhaps started again), the
        messages are read afresh and ``WindowRead.floor`` is 0.

        Raises:
            InvalidInputError: An id is not usable, or ``batch`` is below 1.
        """
        _check_session(user_id, session_id)
        if batch < 1:
            raise InvalidInputError("batch must be at least 1")
        with driver_autocommit(self._database) as connection:
            rows = run_window_statement(
                connection, WINDOW, user_id, session_id, {**floor_parameters(held), "batch": batch}
            )
        return window_read(self._database, rows, [], user_id, session_id, batch)

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
            last = last_seq_of(connection, user_id, session_id)
            upto = last if upto_seq is None else min(upto_seq, last)
            return messages_after(connection, user_id, session_id, after_seq, upto_seq=upto)

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
                TOKENS_AFTER_SUMMARY,
                {"user_id": user_id, "session_id": session_id, "queued_kind": unless_queued},
            ).scalar_one()
        return None if total is None else int(total)

    def turn_start(self, user_id: str, session_id: str) -> int:
        """The seq of the session's last user message, where its current turn starts (0: none).

        Read backwards on the session's key: the cost is the length of the current turn.

        Raises:
            InvalidInputError: An id is not usable.
        """
        _check_session(user_id, session_id)
        with self._database.reading() as connection:
            return turn_start_of(connection, user_id, session_id)

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
        with self._database.reading() as connection:
            return increment_after(
                connection,
                user_id,
                session_id,
                after_seq,
                max_tokens=max_tokens,
                max_messages=max_messages,
                batch=batch,
            )


def _check_session(user_id: str, session_id: str) -> None:
    """Raise ``InvalidInputError`` unless both ids are usable."""
    check_id("user_id", user_id)
    check_id("session_id", session_id)

"""Appending to a session: a batch is stored whole or recognised as a replay, never in part.

Also where a new user input closes the session's open tool calls (see
``memory.session.open_calls``), and where a late result for such a call is explained.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from memory.context.messages import Message
from memory.context.report import InterruptedCall
from memory.context.tokens import REPLY_PRIMING_TOKENS, TokenCounter
from memory.context.units import find_problems
from memory.errors import (
    ContextOverflowError,
    InvalidHistoryError,
    Problem,
    RecordConflictError,
    ToolCallInterruptedError,
)
from memory.session.incoming import check_replay, name_stored, refuse_repeated_ids
from memory.session.open_calls import (
    OpenCall,
    interrupted_results,
    is_interrupted,
    open_calls,
    open_tail,
)
from storage import MessageAt, MessageStore, NewMessage, StoredMessage

__all__ = ["SessionWriter"]

#: How often storing is retried when the session's open calls changed meanwhile.
_TAIL_ATTEMPTS = 3
#: How far back (in messages) a late tool result is looked for among interrupted calls.
_INTERRUPTED_LOOKBACK = 512


class SessionWriter:
    """Appends messages to sessions, all of a batch or none of it.

    Args:
        messages: the message store.
        counter: counts the tokens of new messages and of the results that close
            interrupted calls.
        history_budget: the tokens a request's history may take: a message that could never
            fit is refused (``new_message``).
    """

    def __init__(
        self, messages: MessageStore, counter: TokenCounter, *, history_budget: int
    ) -> None:
        self._messages = messages
        self._counter = counter
        self._history_budget = history_budget

    def new_message(
        self,
        index: int,
        message: Message,
        client_id: str | None,
        metadata: dict[str, Any],
        timestamp: datetime | None,
        *,
        reserved: int = 0,
    ) -> NewMessage:
        """The message to store, refused when it could never fit a request."""
        tokens = self._counter.count_message(message)
        required = reserved + tokens + REPLY_PRIMING_TOKENS
        if message.role != "tool" and required > self._history_budget:
            # A tool result can be cut to fit; any other message would never fit a request.
            detail = f"message {index}" + (" with the system message" if reserved else " alone")
            raise ContextOverflowError(required, self._history_budget, detail)
        return NewMessage(
            payload=message.to_openai(),
            role=message.role,
            tokens=tokens,
            client_id=client_id,
            metadata=metadata,
            created_at=timestamp,
        )

    def record(
        self,
        user_id: str,
        session_id: str,
        batch: list[NewMessage],
        *,
        after: MessageAt | None = None,
    ) -> list[StoredMessage]:
        """Store ``batch`` whole, or return the stored messages when it is an exact replay.

        With ``after`` (the newest message of the context a reply answers), only while the
        session still holds that message.

        Raises:
            InvalidHistoryError: a client id twice in the batch, or the batch breaks the
                session's structure (``ToolCallInterruptedError`` for a result that came after
                its call was closed as interrupted).
            RecordConflictError: the batch is partly stored, or an id is stored with other
                content.
            SessionErasedError: with ``after``, the session was erased since.
        """
        refuse_repeated_ids(batch)
        valid_alone = batch[0].role != "tool" and not find_problems(
            [message.payload for message in batch], allow_pending_calls=True
        )
        if valid_alone:
            # Not answering a stored call: after a closed tail it is valid, and one statement
            # stores it when the session's tail is closed.
            stored = self._messages.append_after_closed_tail(
                user_id, session_id, batch, after=after
            )
            if stored is not None:
                return stored
        try:
            return self._append(user_id, session_id, batch, valid_alone=valid_alone, after=after)
        except InvalidHistoryError as error:
            self._explain_late_results(user_id, session_id, batch, error)
            raise

    def store_input(
        self, user_id: str, session_id: str, new: NewMessage
    ) -> tuple[InterruptedCall, ...]:
        """Store a user input, first closing the session's open calls (returned).

        Raises:
            RecordConflictError: the input's client id is stored with other content.
        """
        refuse_repeated_ids([new])
        # Optimistic: most inputs find no open call, and the check under the session lock says
        # which calls are open when some are, at no extra round trip.
        calls: list[OpenCall] = []
        for _ in range(_TAIL_ATTEMPTS):
            closing = interrupted_results(calls, self._counter.count_message)
            try:
                stored = self._append(user_id, session_id, [*closing, new], expected_open=calls)
            except _InputReplayed:
                self._append(user_id, session_id, [new])
                return ()
            except _TailChanged as changed:
                calls = changed.calls
                continue
            return tuple(
                InterruptedCall(call.call_id, call.name, call.seq, result.seq)
                for call, result in zip(calls, stored, strict=False)
            )
        raise InvalidHistoryError(  # pragma: no cover - needs results racing every attempt
            [f"message 0: the session's open tool calls kept changing ({_TAIL_ATTEMPTS} tries)"]
        )

    def open_calls(self, user_id: str, session_id: str) -> list[OpenCall]:
        """The session's tool calls still waiting for their results (reads only its tail)."""
        return open_calls(open_tail(self._messages.walk_back(user_id, session_id, batch=16)))

    def close_open_calls(self, user_id: str, session_id: str) -> list[StoredMessage]:
        """Close the session's open calls with stored "interrupted: no result" results."""
        calls = self.open_calls(user_id, session_id)
        for _ in range(_TAIL_ATTEMPTS):
            if not calls:
                return []
            closing = interrupted_results(calls, self._counter.count_message)
            try:
                return self._append(user_id, session_id, closing, expected_open=calls)
            except _TailChanged as changed:
                calls = changed.calls
        return []  # pragma: no cover - needs results racing every attempt

    def _append(
        self,
        user_id: str,
        session_id: str,
        batch: list[NewMessage],
        *,
        expected_open: list[OpenCall] | None = None,
        valid_alone: bool = False,
        after: MessageAt | None = None,
    ) -> list[StoredMessage]:
        """Store a batch whole, or recognise it as a replay of stored messages; nothing else.

        ``valid_alone`` says the batch was checked on its own already: against an empty tail
        (a new session) it is not checked again.

        Raises:
            RecordConflictError: some messages are stored and others not, or stored with
                other content.
            InvalidHistoryError: the batch breaks the session's structure.
            _TailChanged: ``expected_open`` is not what the session has open.
            _InputReplayed: the batch's last message (an input) is stored but not the others.
        """
        validated = False

        def validate(tail: list[StoredMessage], fresh: list[NewMessage]) -> None:
            nonlocal validated
            validated = True
            _check_whole(batch, fresh, closing=expected_open is not None)
            if expected_open is not None:
                now_open = open_calls(tail)
                if now_open != expected_open:
                    raise _TailChanged(now_open)
            if not (valid_alone and not tail and len(fresh) == len(batch)):
                _check_structure(tail, fresh)

        stored = self._messages.append(user_id, session_id, batch, validate=validate, after=after)
        if not validated:  # every message was found stored under its client id
            check_replay(batch, stored)
        return stored

    def _explain_late_results(
        self, user_id: str, session_id: str, batch: list[NewMessage], error: InvalidHistoryError
    ) -> None:
        """Raise ``ToolCallInterruptedError`` if ``error`` is about results of closed calls."""
        wanted = {
            str(message.payload.get("tool_call_id"))
            for message in batch
            if message.role == "tool"
            and any(repr(message.payload.get("tool_call_id")) in str(p) for p in error.problems)
        }
        if not wanted:
            return
        closed: dict[str, StoredMessage] = {}
        walked = self._messages.walk_back(user_id, session_id, batch=64)
        for _, record in zip(range(_INTERRUPTED_LOOKBACK), walked, strict=False):
            call_id = record.payload.get("tool_call_id")
            if call_id in wanted and call_id not in closed and is_interrupted(record):
                closed[call_id] = record
        if closed:
            problems = [
                f"tool call {call_id!r} was closed as interrupted (no result) by "
                f"{name_stored(record)} when the conversation went on; its result can no "
                "longer be recorded"
                for call_id, record in closed.items()
            ]
            raise ToolCallInterruptedError(problems, list(closed)) from error


class _TailChanged(Exception):
    """The session's open calls are not the ones a batch expected (private signal).

    Attributes:
        calls: the calls open now.
    """

    def __init__(self, calls: list[OpenCall]) -> None:
        super().__init__(calls)
        self.calls = calls


class _InputReplayed(Exception):
    """An input's client id is stored already, but the calls it would close are not (signal)."""


def _check_whole(batch: list[NewMessage], fresh: list[NewMessage], *, closing: bool) -> None:
    """Refuse a batch of which only some messages are new (the rest stored under their ids)."""
    if len(fresh) == len(batch):
        return
    if closing and all(message is not batch[-1] for message in fresh):
        raise _InputReplayed
    fresh_ids = {id(message) for message in fresh}
    raise RecordConflictError(
        [
            f"message {index}: id {message.client_id!r} is already stored, but other messages "
            "of the batch are not (a batch is stored whole or recognised as a whole replay)"
            for index, message in enumerate(batch)
            if id(message) not in fresh_ids
        ]
    )


def _check_structure(tail: list[StoredMessage], batch: list[NewMessage]) -> None:
    """Check a batch against the session's open tail; raise ``InvalidHistoryError``.

    Problems name a batch message by its index in the batch and a stored one by its seq.
    """
    messages = [message.payload for message in tail] + [message.payload for message in batch]
    found = find_problems(messages, allow_pending_calls=True)
    if not found:
        return

    def name(index: int) -> str:
        if index < len(tail):
            return f"stored message {name_stored(tail[index])}"
        return f"message {index - len(tail)}"

    problems = [Problem(None, problem.describe(name)) for problem in found]
    if any(message.role == "user" for message in batch) and tail and open_calls(tail):
        problems.append(
            Problem(
                None,
                "a new user input closes open calls only through prepare(input=...); "
                "or close them with close_open_calls",
            )
        )
    raise InvalidHistoryError(problems)

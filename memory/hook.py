"""The agent-loop hook: stratamem before every model call of a loop that keeps its own messages.

An agent loop (or an OpenAI-compatible client behind ``stratamem serve``) keeps its own list of
OpenAI-format messages and sends all of it, or a trimmed part of it, on every call. Two
functions put memory in front of such a loop without changing how it keeps its list::

    ctx = context_for(mem, messages, user_id="u1", session_id="s1")
    reply = client.chat.completions.create(model=MODEL, messages=ctx.messages).choices[0].message
    record_reply(mem, reply, user_id="u1", session_id="s1")
    messages.append(reply)

``context_for`` stores the messages of the list that are not stored yet and returns the
assembled context (summary, memories, window) to send instead of the list; ``record_reply``
stores what the model returned. The loop's messages carry no ids, so what is already stored is
recognised by content (see ``count_stored``): sending the whole list again every time stores
each message once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, overload

from pydantic import BaseModel

from memory.context.assembler import AssembledContext
from memory.context.messages import Message, message_dict
from memory.context.units import validate_history
from memory.facade import Memory
from memory.session.incoming import CLIENT_KEYS
from storage import StoredMessage

__all__ = [
    "DEFAULT_SESSION",
    "LOOKBACK",
    "Request",
    "context_for",
    "count_stored",
    "fingerprint",
    "record_reply",
    "split_request",
]

#: How many of the session's newest stored messages a request is compared with, at most (a
#: request that holds fewer messages reads only as many: it cannot resend more).
LOOKBACK = 32

#: The session of a user who names none (the proxy's default for ``X-Stratamem-Session``).
DEFAULT_SESSION = "default"


@dataclass(frozen=True, slots=True)
class Request:
    """A loop's messages split the way ``Memory`` takes them.

    Attributes:
        system: the leading system (or developer) messages' text, joined; never stored, given
            to ``prepare`` on each call as the chat API itself takes it.
        conversation: every message after them, as OpenAI-format dicts.
    """

    system: str | None
    conversation: list[dict[str, Any]]


def context_for(
    memory: Memory,
    messages: Sequence[Mapping[str, Any] | BaseModel],
    *,
    user_id: str,
    session_id: str,
    lookback: int = LOOKBACK,
) -> AssembledContext:
    """Store the messages not stored yet and return the context to send instead of them.

    Compares ``messages`` with the session's ``lookback`` newest stored messages (see
    ``count_stored``), records the new ones, and prepares: a trailing user message is the
    input of ``Memory.prepare`` (which closes tool calls left open by an interrupted loop);
    anything else (tool results, say) is recorded and the current turn goes on.

    Raises:
        InvalidHistoryError: a message is malformed, or the new ones break the session's
            structure (a tool result for a call the session does not have open).
        RecordConflictError: a message's client ``id`` is stored with other content.
        ContextOverflowError: the system message and the current turn cannot fit.
        storage.StorageError: the database failed.
    """
    request = split_request(messages)
    new = _new_messages(memory, request.conversation, user_id, session_id, lookback)
    last = new[-1] if new else None
    if last is not None and last.get("role") == "user":
        memory.record(user_id=user_id, session_id=session_id, messages=new[:-1])
        context = memory.prepare(
            user_id=user_id, session_id=session_id, input=last, system=request.system
        )
        return _own_input_last(context, last)
    memory.record(user_id=user_id, session_id=session_id, messages=new)
    return memory.prepare(user_id=user_id, session_id=session_id, system=request.system)


def record_reply(
    memory: Memory,
    reply: Mapping[str, Any] | BaseModel,
    *,
    user_id: str,
    session_id: str,
    context: AssembledContext | None = None,
) -> list[StoredMessage]:
    """Store what the model returned: an assistant message (tool calls included).

    ``reply`` is ``response.choices[0].message`` or its dict; response-only fields are left
    out. The next ``context_for`` recognises it when the loop sends it back. ``context`` is
    the context the model answered (``context_for``'s): the reply is stored only if the
    session was not erased since (``Memory.record``'s ``reply_to``).

    Raises:
        InvalidHistoryError: the reply is not a message the chat API would accept back.
        storage.SessionErasedError: with ``context``, the session was erased since.
        storage.StorageError: the database failed.
    """
    return memory.record(user_id=user_id, session_id=session_id, messages=[reply], reply_to=context)


def split_request(messages: Sequence[Mapping[str, Any] | BaseModel]) -> Request:
    """Separate the leading system (or developer) messages from the conversation.

    Several leading system messages become one text, joined by blank lines.
    """
    data = [message_dict(message) for message in messages]
    leading = 0
    while leading < len(data) and data[leading].get("role") in ("system", "developer"):
        leading += 1
    texts = [Message.from_openai(_without_client_keys(m)).text for m in data[:leading]]
    system = "\n\n".join(text for text in texts if text) or None
    return Request(system, data[leading:])


def fingerprint(message: Mapping[str, Any]) -> str:
    """A message's content as one canonical string, to compare a resent message with a stored one.

    The message as it would be stored (response-only keys, ``None`` values and stratamem's own
    keys left out), as JSON with sorted keys; a message that does not parse is compared as is.
    """
    data = _without_client_keys(message_dict(message))
    try:
        normal = Message.from_openai(data).to_openai()
    except ValueError:
        normal = data
    return _canonical(normal)


def _canonical(payload: Mapping[str, Any]) -> str:
    return json.dumps(payload, sort_keys=True, ensure_ascii=False, default=str)


def count_stored(request: Sequence[str], tail: Sequence[str]) -> int:
    """How many leading messages of a request are stored already, by their fingerprints.

    ``tail`` is the session's newest stored messages, oldest first. The answer is the largest
    ``j`` for which the request's messages just before ``j`` are the stored tail itself (its
    newest ``min(j, len(tail))`` messages, in order): the request resends what is stored and
    adds ``request[j:]``. Requiring the *newest* stored messages keeps a repeated "ok" new: a
    request ``["ok"]`` is a resend only when the session ends with that "ok" unanswered (a
    retry), not when an earlier "ok" was answered. A client that trimmed its own history
    matches with what it kept; one that sends only its new messages matches nothing.
    """
    for end in range(len(request), 0, -1):
        span = min(end, len(tail))
        # Newest first, one at a time: most candidates fail on their first message.
        if span and all(request[end - 1 - i] == tail[-1 - i] for i in range(span)):
            return end
    return 0


def _own_input_last(context: AssembledContext, input: Mapping[str, Any]) -> AssembledContext:
    """The context with this request's input last, when another client's input came after it.

    Two clients writing to one session at once: the window holds both inputs in the order they
    were stored, and the model must answer the one this request asks. A user message is a unit
    of its own, so it moves to the end; if the result were not a valid history (another
    client's tool calls still open there), the context stays as assembled.
    """
    messages = context.messages
    wanted = fingerprint(input)
    if not messages or fingerprint(messages[-1]) == wanted:
        return context
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "user" and fingerprint(messages[index]) == wanted:
            moved = [*messages[:index], *messages[index + 1 :], messages[index]]
            if validate_history(moved):
                return context
            return AssembledContext(moved, context.report)
    return context


def _new_messages(
    memory: Memory, conversation: list[dict[str, Any]], user_id: str, session_id: str, lookback: int
) -> list[Any]:
    """The messages of ``conversation`` not stored yet, read against the session's newest ones.

    A request can resend at most as many stored messages as it holds, so at first only that
    many are read (one row for a client that sends just its new input, none for an empty
    request); ``count_stored`` gives the same answer on them as on ``lookback`` rows. Only when
    nothing matched and the client's history has turns of its own (another client wrote in
    between) is the whole ``lookback`` read, to find them.
    """
    limit = min(lookback, len(conversation))
    tail = _stored_tail(memory, user_id, session_id, limit)
    theirs = _Fingerprints(conversation)
    start = count_stored(theirs, tail)
    answered = any(message.get("role") == "assistant" for message in conversation)
    if start > 0 or not tail or not answered:
        return conversation[start:]
    if limit < lookback and len(tail) == limit:
        tail = _stored_tail(memory, user_id, session_id, lookback)
    return _unstored(conversation, theirs, tail)


def _stored_tail(memory: Memory, user_id: str, session_id: str, limit: int) -> list[str]:
    """The fingerprints of the session's ``limit`` newest stored messages, oldest first."""
    newest = memory.recent_history(user_id=user_id, session_id=session_id, limit=limit)
    # Stored payloads are already in the form ``fingerprint`` parses a message into.
    return [_canonical(record.payload) for record in newest]


def _unstored(
    conversation: list[dict[str, Any]], theirs: Sequence[str], stored: list[str]
) -> list[Any]:
    """The new messages of a ``conversation`` whose end matched none of the ``stored`` tail.

    The stored tail does not end with what the client resends: another client wrote to the
    session in between. The client's messages up to its last assistant message that are found
    in the tail, in order, are taken as stored, and so are those too old for the tail to show;
    the trailing turn after it (the user's input, the tool results) is new.
    """
    assistants = [i for i, m in enumerate(conversation) if m.get("role") == "assistant"]
    turn = assistants[-1] + 1 if assistants else 0
    new: list[Any] = []
    position = 0
    for index in range(max(0, turn - len(stored)), turn):
        found = _find(stored, theirs[index], position)
        if found is None:
            new.append(conversation[index])
        else:
            position = found + 1
    return new + conversation[turn:]


class _Fingerprints(Sequence[str]):
    """The fingerprints of a request's messages, computed when first asked for.

    A long resent history is matched from its newest end: the old messages are never parsed.
    """

    def __init__(self, messages: list[dict[str, Any]]) -> None:
        self._messages = messages
        self._known: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self._messages)

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...
    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if index not in self._known:
            self._known[index] = fingerprint(self._messages[index])
        return self._known[index]


def _find(values: list[str], wanted: str, start: int) -> int | None:
    """The first index of ``wanted`` in ``values`` from ``start``, or ``None``."""
    try:
        return values.index(wanted, start)
    except ValueError:
        return None


def _without_client_keys(message: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in message.items() if key not in CLIENT_KEYS}

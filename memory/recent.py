"""The recent messages of each session (those after its summary boundary), cached in-process.

Stored messages never change and a session's seqs are contiguous and committed in order, so a
cached run of messages stays true forever: each request reads only the rows added since the last
one, and drops what the summary boundary or the token budget has left behind.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from memory.context.messages import Message
from memory.context.units import Unit, fit_newest, make_unit, turn_start, unit_spans
from storage import MessageStore, StoredMessage

__all__ = ["RecentMessages", "RecentWindow"]


@dataclass(frozen=True, slots=True)
class RecentWindow:
    """A session's newest messages after its boundary, enough to fill a budget.

    Attributes:
        stored: the stored records, oldest first.
        messages: the same messages parsed, oldest first.
        tokens: their stored token counts, summed.
        last_seq: the seq of the newest message read (the window may be empty).
        budget: the budget the window was loaded for.
    """

    stored: tuple[StoredMessage, ...]
    messages: tuple[Message, ...]
    tokens: int
    last_seq: int
    budget: int


class RecentMessages:
    """Loads the recent window of a session, reading only what changed since the last load.

    Args:
        store: where the messages are.
        max_tokens: the most tokens of messages the cache holds over all sessions (the default
            is about 8 MB of text); the least recently used sessions are forgotten first.
    """

    def __init__(self, store: MessageStore, *, max_tokens: int = 2_000_000) -> None:
        self._store = store
        self._max_tokens = max_tokens
        self._cached_tokens = 0
        self._cache: OrderedDict[tuple[str, str], RecentWindow] = OrderedDict()
        self._lock = threading.Lock()

    def load(self, user_id: str, session_id: str, *, after_seq: int, budget: int) -> RecentWindow:
        """The newest messages after ``after_seq`` until their tokens exceed ``budget``.

        The window reaches back at least to the last user message (the current turn is whole)
        and starts at a unit start (never on a tool result). The cost follows the number of
        new messages, not the length of the session.
        """
        key = (user_id, session_id)
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None and cached.budget < budget:
            cached = None  # it may have dropped messages that a larger budget needs
        start = after_seq if cached is None else max(after_seq, cached.last_seq)
        stored: list[StoredMessage] = []
        messages: list[Message] = []
        tokens, seen_user = 0, False
        for record in self._store.walk_back(user_id, session_id, after_seq=start, batch=128):
            stored.append(record)
            messages.append(Message.from_openai(record.payload))
            tokens += record.tokens
            seen_user = seen_user or record.role == "user"
            if cached is None and _is_unit_start_past(record, tokens, budget, seen_user):
                break
        stored.reverse()
        messages.reverse()
        if cached is not None:
            keep = [index for index, record in enumerate(cached.stored) if record.seq > after_seq]
            first = keep[0] if keep else len(cached.stored)
            stored = [*cached.stored[first:], *stored]
            messages = [*cached.messages[first:], *messages]
        window = _fit(stored, messages, budget, max(start, stored[-1].seq if stored else 0))
        with self._lock:
            current = self._cache.get(key)
            if current is None or current.last_seq <= window.last_seq:
                self._cached_tokens += window.tokens - (current.tokens if current else 0)
                self._cache[key] = window
            self._cache.move_to_end(key)
            while self._cached_tokens > self._max_tokens:
                _, forgotten = self._cache.popitem(last=False)
                self._cached_tokens -= forgotten.tokens
        return window


def _is_unit_start_past(record: StoredMessage, tokens: int, budget: int, seen_user: bool) -> bool:
    """Whether a walk back that reached ``record`` has read enough (see ``load``)."""
    return tokens > budget and seen_user and record.role != "tool"


def _fit(
    stored: list[StoredMessage], messages: list[Message], budget: int, last_seq: int
) -> RecentWindow:
    """The window the assembler may need: the current turn, the newest units that fit, and one
    unit more (the assembler may still keep it once its tool results are cut).

    Units are costed with their stored token counts, by the same rule every window follows
    (``fit_newest``).
    """
    roles = [record.role for record in stored]
    turn = turn_start(roles)

    def cost(unit: Unit) -> int:
        return sum(record.tokens for record in stored[unit.start : unit.stop])

    older = (make_unit(start, messages[start:stop]) for start, stop in unit_spans(roles, turn))
    turn_tokens = sum(record.tokens for record in stored[turn:])
    first = turn
    if turn_tokens <= budget:
        kept = fit_newest(older, budget - turn_tokens, cost)
        first = kept[0].start if kept else turn
        first = next(unit_spans(roles, first), (first, first))[0]
    window = stored[first:]
    return RecentWindow(
        tuple(window),
        tuple(messages[first:]),
        sum(record.tokens for record in window),
        last_seq,
        budget,
    )

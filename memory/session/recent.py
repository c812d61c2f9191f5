"""The recent messages of each session (those after its summary boundary), cached in-process.

Stored messages never change and a session's seqs are contiguous and committed in order, so a
cached run of messages stays true until the session is erased: each request reads only the rows
added since the last one, and drops what the summary boundary or the token budget has left
behind. Erasure (``forget``, in this process or any other) is seen by the request's own
statement: it reads after the cached run only while the session still holds the run's newest
message under its id (ids are never reused), and otherwise reads afresh and the cache is
replaced.
"""

from __future__ import annotations

import sys
import threading
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from pydantic import BaseModel

from memory.context.counted import CountedMessages
from memory.context.messages import Message
from memory.context.tokens import TokenCounter
from memory.context.units import fit_newest_start, turn_start, unit_spans
from retrieval.held_texts import hold_texts
from storage import MessageStore, NewMessage, StoredMessage, SummaryRecord
from storage.messages.store import WindowRead

__all__ = ["RecentMessages", "RecentWindow", "WindowCounter"]


@dataclass(frozen=True, slots=True)
class RecentWindow:
    """A session's newest messages after its boundary, enough to fill a budget.

    Attributes:
        stored: the stored records, oldest first.
        messages: the same messages parsed, oldest first.
        tokens: their stored token counts, summed.
        last_seq: the seq of the newest message read (the window may be empty).
        budget: the budget the window was loaded for.
        counts: each message's tokens by this process's counter, counted once as it entered
            the cache (the stored counts are the storing process's, maybe for another model;
            the hard cap needs this one's). ``WindowCounter`` hands them out.
        rendered: each message as ``Message.to_openai`` renders it, made once as it entered
            the cache: the stored payload itself when it is exactly that (every message
            ``record`` and ``prepare`` store), else the rendering. ``WindowCounter.render``
            hands out copies.
    """

    stored: tuple[StoredMessage, ...]
    messages: tuple[Message, ...]
    tokens: int
    last_seq: int
    budget: int
    counts: tuple[int, ...]
    rendered: tuple[dict[str, Any], ...]


class RecentMessages:
    """Loads the recent window of a session, reading only what changed since the last load.

    Args:
        store: where the messages are.
        counter: counts each message once, as it enters the cache (``RecentWindow.counts``).
        max_bytes: the most memory the cached windows may hold over all sessions: each
            message's stored record, parsed message and rendering, measured with
            ``sys.getsizeof`` over every object they hold (each object once), plus its place
            in the cache; the least recently used sessions are forgotten first. Bytes, not
            tokens: a 1 MB image is a few hundred tokens. Measured against tracemalloc
            (``benchmarks/recent_memory.py``), what the cache holds stays within 1.1x of this.
    """

    def __init__(
        self, store: MessageStore, counter: TokenCounter, *, max_bytes: int = 64_000_000
    ) -> None:
        self._store = store
        self._counter = counter
        self._max_bytes = max_bytes
        self._cached_bytes = 0
        self._cache: OrderedDict[tuple[str, str], RecentWindow] = OrderedDict()
        #: The size of each cached record, by session and seq.
        self._sizes: dict[tuple[str, str], dict[int, int]] = {}
        self._lock = threading.Lock()
        hold_texts(self.forget)  # a forget of the user, in this process, drops their windows

    @property
    def cached_sessions(self) -> int:
        """How many sessions have a window in the cache."""
        with self._lock:
            return len(self._cache)

    @property
    def cached_bytes(self) -> int:
        """The memory the cached windows hold, as the bound measures it."""
        with self._lock:
            return self._cached_bytes

    def load_with_summary(
        self, user_id: str, session_id: str, *, budget: int
    ) -> tuple[SummaryRecord | None, RecentWindow]:
        """The session's summary and its newest messages after the boundary until their tokens
        exceed ``budget``, read in one statement.

        The window reaches back at least to the last user message (the current turn is whole)
        and starts at a unit start (never on a tool result). The cost follows the number of
        new messages, not the length of the session.
        """
        cached = self._cached(user_id, session_id, budget)
        read = self._store.walk_back_after_summary(
            user_id, session_id, held=_newest(cached), batch=_BATCH
        )
        return read.summary, self._build_read((user_id, session_id), cached, read, budget)

    def append_and_load(
        self, user_id: str, session_id: str, new: NewMessage, *, budget: int
    ) -> tuple[StoredMessage, SummaryRecord | None, RecentWindow] | None:
        """Store a user input, then ``load_with_summary``: one round trip in the common case.

        Returns:
            The stored input, the summary and the window (the input its newest message); or
            None, with nothing stored, when the session needs the general path of storing
            (``MessageStore.append_input`` says when: a new session, open tool calls, a known
            client id, a concurrent append).
        """
        cached = self._cached(user_id, session_id, budget)
        appended = self._store.append_input(
            user_id, session_id, new, held=_newest(cached), batch=_BATCH
        )
        if appended is None:
            return None
        stored, read = appended
        return stored, read.summary, self._build_read((user_id, session_id), cached, read, budget)

    def _build_read(
        self, key: tuple[str, str], cached: RecentWindow | None, read: WindowRead, budget: int
    ) -> RecentWindow:
        """The window from the cached one and what the window statement read after it."""
        if cached is not None and read.floor != cached.last_seq:
            cached = None  # the session no longer holds the cached messages: erased
        after_seq = read.summary.boundary_seq if read.summary else 0
        start = max(after_seq, read.floor)
        return self._build(key, cached, after_seq, start, read.messages, budget)

    def _cached(self, user_id: str, session_id: str, budget: int) -> RecentWindow | None:
        """The session's cached window, unless it was cut to a smaller budget than ``budget``."""
        with self._lock:
            cached = self._cache.get((user_id, session_id))
        if cached is not None and cached.budget < budget:
            return None  # it may have dropped messages that a larger budget needs
        return cached

    def _build(
        self,
        key: tuple[str, str],
        cached: RecentWindow | None,
        after_seq: int,
        start: int,
        records: Iterator[StoredMessage],
        budget: int,
    ) -> RecentWindow:
        """The window from the cached one and the ``records`` walked back after ``start``."""
        stored: list[StoredMessage] = []
        messages: list[Message] = []
        tokens, seen_user = 0, False
        for record in records:
            stored.append(record)
            messages.append(Message.from_openai(record.payload))
            tokens += record.tokens
            seen_user = seen_user or record.role == "user"
            if cached is None and _is_unit_start_past(record, tokens, budget, seen_user):
                break
        stored.reverse()
        messages.reverse()
        counts = [self._counter.count_message(message) for message in messages]
        rendered = [_rendering(r.payload, m) for r, m in zip(stored, messages, strict=True)]
        if cached is not None:
            # Seqs ascend: the first message kept is the first after the boundary.
            first = bisect_right(cached.stored, after_seq, key=_seq)
            stored = [*cached.stored[first:], *stored]
            messages = [*cached.messages[first:], *messages]
            counts = [*cached.counts[first:], *counts]
            rendered = [*cached.rendered[first:], *rendered]
        last_seq = max(start, stored[-1].seq if stored else 0)
        window = _fit(stored, messages, counts, rendered, budget, last_seq)
        self._remember(key, window)
        return window

    def forget(self, user_id: str, session_id: str | None = None) -> None:
        """Drop the cached window of one session, or (``None``) of every session of the user.

        For erasure (``retrieval.held_texts`` calls it with the user of every forget): a
        deleted session that starts again must not be served its old messages, and the
        process keeps none of them.
        """
        with self._lock:
            keys = [
                key
                for key in self._cache
                if key[0] == user_id and (session_id is None or key[1] == session_id)
            ]
            for key in keys:
                self._cache.pop(key)
                self._cached_bytes -= sum(self._sizes.pop(key, {}).values())

    def _remember(self, key: tuple[str, str], window: RecentWindow) -> None:
        """Cache ``window`` unless a newer one is cached; forget empty windows and the oldest.

        An empty window saves no read (the next load walks the same empty range), so it is not
        kept: a stream of requests on unknown or fully summarised sessions leaves nothing. The
        size of each record is measured once, when it enters the cache.
        """
        with self._lock:
            current = self._cache.get(key)
            if current is not None and current.last_seq > window.last_seq:
                self._cache.move_to_end(key)
                return
            known = self._sizes.pop(key, {})
            self._cached_bytes -= sum(known.values())
            self._cache.pop(key, None)
            if not window.stored:
                return
            sizes = {
                r.seq: known.get(r.seq) or _held_bytes(r, message, rendering)
                for r, message, rendering in zip(
                    window.stored, window.messages, window.rendered, strict=True
                )
            }
            self._cache[key] = window
            self._sizes[key] = sizes
            self._cached_bytes += sum(sizes.values())
            while self._cached_bytes > self._max_bytes and self._cache:
                forgotten, _ = self._cache.popitem(last=False)
                self._cached_bytes -= sum(self._sizes.pop(forgotten).values())


#: Messages each query of a walk back reads: a window of a few thousand tokens in one read.
_BATCH = 128

#: What the cache keeps for a message beside its objects: its slots in the window's tuples,
#: its token count, its entry in the table of sizes (measured with tracemalloc by
#: ``benchmarks/recent_memory.py``).
SLOT_BYTES = 100


def _held_bytes(record: StoredMessage, message: Message, rendering: dict[str, Any]) -> int:
    """The memory a cached message holds: ``sys.getsizeof`` of every object reachable from its
    record, parsed message and rendering, each counted once (they share their strings), and
    ``SLOT_BYTES``. Field names of the models are the classes' own, not counted."""
    seen: set[int] = set()
    total = SLOT_BYTES
    stack: list[object] = [record, message, rendering]
    while stack:
        value = stack.pop()
        if value is None or isinstance(value, bool) or id(value) in seen:
            continue
        seen.add(id(value))
        total += sys.getsizeof(value)
        if isinstance(value, dict):
            stack += value
            stack += value.values()
        elif isinstance(value, list | tuple):
            stack += value
        elif isinstance(value, BaseModel):
            # Its attributes' dict and its set of given fields: their keys are field names.
            total += sys.getsizeof(value.__dict__) + sys.getsizeof(value.__pydantic_fields_set__)
            stack += value.__dict__.values()
            if value.__pydantic_extra__ is not None:
                stack.append(value.__pydantic_extra__)
    return total


def _seq(record: StoredMessage) -> int:
    return record.seq


def _newest(window: RecentWindow | None) -> StoredMessage | None:
    """The newest message of a cached window (at its ``last_seq``: empty windows are not
    cached), which the session must still hold for the window to be its own."""
    return window.stored[-1] if window is not None else None


def _rendering(payload: dict[str, Any], message: Message) -> dict[str, Any]:
    """How ``message`` (parsed from ``payload``) renders: ``payload`` itself when it is exactly
    that, down to the order of keys and the types of values."""
    rendering = message.to_openai()
    return payload if _identical(rendering, payload) else rendering


def _identical(one: object, other: object) -> bool:
    """Whether two JSON-like values are equal, with the same types and the same key order."""
    if type(one) is not type(other):
        return False
    if isinstance(one, dict) and isinstance(other, dict):
        return list(one) == list(other) and all(_identical(one[k], other[k]) for k in one)
    if isinstance(one, list) and isinstance(other, list):
        return len(one) == len(other) and all(map(_identical, one, other))
    return one == other


def _is_unit_start_past(record: StoredMessage, tokens: int, budget: int, seen_user: bool) -> bool:
    """Whether a walk back that reached ``record`` has read enough (see ``load``)."""
    return tokens > budget and seen_user and record.role != "tool"


def _fit(
    stored: list[StoredMessage],
    messages: list[Message],
    counts: list[int],
    rendered: list[dict[str, Any]],
    budget: int,
    last_seq: int,
) -> RecentWindow:
    """The window the assembler may need: the current turn, the newest units that fit, and one
    unit more (the assembler may still keep it once its tool results are cut).

    Units are costed with their stored token counts, by the same rule every window follows
    (``fit_newest``, found by ``fit_newest_start`` on running totals).
    """
    roles = [record.role for record in stored]
    turn = turn_start(roles)
    # Running totals: the cost of messages [start, stop) is before[stop] - before[start].
    before = [0, *accumulate(record.tokens for record in stored)]
    turn_tokens = before[-1] - before[turn]
    first = turn
    if turn_tokens <= budget:
        first = fit_newest_start(roles, before, turn, budget - turn_tokens)
        first = next(unit_spans(roles, first), (first, first))[0]
    return RecentWindow(
        tuple(stored[first:]),
        tuple(messages[first:]),
        before[-1] - before[first],
        last_seq,
        budget,
        tuple(counts[first:]),
        tuple(rendered[first:]),
    )


class WindowCounter(CountedMessages):
    """A token counter that knows a window's messages (``memory.context.counted``): the hard
    cap and the report get the counts the window holds (``RecentWindow.counts``, by the same
    counter) and the assembler copies of its renderings (``RecentWindow.rendered``), not a
    recount and a pydantic dump per message and request.

    The window's data is handed to the core's own counter: the core never calls back into
    the session.

    Args:
        counter: the counter the window's counts were made with, for every other message.
        window: the window whose counts and renderings to hand out.
    """

    def __init__(self, counter: TokenCounter, window: RecentWindow) -> None:
        super().__init__(counter, window.messages, window.counts, window.rendered)

"""A recall's reads started before the input is stored: the pins and the first card search.

Why: ``prepare`` stored the input and read the window (one round trip), then read the pins,
then ran the card search: three waits on the server in a row, while the query's embedding ran
on a thread of its own. The pins and the search do not depend on the input being stored, and
most inputs are searched as written (the rewrite resolves a reference only now and then), so
both start on another thread when ``prepare`` starts and run while the input is stored. Recall
takes the search only if it would have asked for exactly it (the same query, time window and
number of cards): a rewritten query, or a time resolved to another day, is searched again, so
the memories are the same as when the search came after the input.

As soon as the search has its cards, the keyed cards made from its turn cards' messages (what
``memory.longterm.validity`` looks up to mark a stale memory) are read too, on another of these
threads, while recall takes the search's cards, gates them and resolves the query's time: that
lookup's round trip left the request's path. Recall uses it only when the cards it weighs are
among the search's (their messages among those looked up): each turn card takes the keyed
cards made from its own messages, so the others read do not change what it finds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime

from memory.cards import time_range_of_query
from retrieval import CardIndex, CardQuery, ScoredCard
from storage import Card

__all__ = ["RecallAhead", "RecallReads"]


@dataclass(frozen=True, slots=True)
class _Searched:
    pins: list[Card]
    query: str
    during: tuple[datetime, datetime] | None
    k: int
    hits: list[ScoredCard]
    #: The messages of the search's turn cards, and the keyed cards made from them (read
    #: on another thread; None when the search found no turn card).
    sources: frozenset[int] = frozenset()
    keyed: Future[list[Card]] | None = None


class RecallAhead:
    """The pins and the first search of one recall, running or done on another thread."""

    def __init__(self, future: Future[_Searched]) -> None:
        self._future = future

    def pins(self) -> list[Card]:
        """The user's pins, oldest first.

        Raises:
            Whatever reading them (or the search after them) raised.
        """
        return self._future.result().pins

    def hits(
        self, query: str, during: tuple[datetime, datetime] | None, k: int
    ) -> list[ScoredCard] | None:
        """The search's cards if it searched ``query`` in ``during`` for ``k`` cards (what
        recall asks for first), else None: recall searches itself."""
        searched = self._future.result()
        if searched.k == 0 or (searched.query, searched.during, searched.k) != (query, during, k):
            return None
        return searched.hits

    def keyed_from_messages(self, message_ids: Sequence[int]) -> list[Card] | None:
        """The keyed cards made from any of ``message_ids``, superseded ones included, and
        maybe from other messages of the search's turn cards (``CardIndex.keyed_from_messages``
        read for all of them), oldest first; None when the search did not look them all up.

        Raises:
            Whatever reading them raised.
        """
        searched = self._future.result()
        if searched.keyed is None or not searched.sources.issuperset(message_ids):
            return None
        return searched.keyed.result()


class RecallReads:
    """Starts recalls' reads on this object's threads (as many as the executor's default)."""

    def __init__(self) -> None:
        self._threads = ThreadPoolExecutor(thread_name_prefix="stratamem-recall")

    def start(
        self,
        index: CardIndex,
        pins: Callable[[], list[Card]],
        user_id: str,
        text: str,
        wanted: int,
    ) -> RecallAhead:
        """Read ``pins()``, then search ``text`` for ``wanted`` cards and one per pin, with
        the time the text names resolved against now, as recall's first search does (no
        search when ``wanted`` is 0), then start reading the keyed cards made from the
        found turn cards' messages."""

        def read() -> _Searched:
            found = pins()
            if wanted <= 0:
                return _Searched(found, text, None, 0, [])
            during = time_range_of_query(text, datetime.now(UTC))
            k = wanted + len(found)
            query = CardQuery(k=k, during=during, diversify=False)
            hits = index.search(user_id, text, query)
            sources = frozenset(
                i for hit in hits if hit.card.type == "turn" for i in hit.card.source_message_ids
            )
            keyed = (
                self._threads.submit(index.keyed_from_messages, user_id, sorted(sources))
                if sources
                else None
            )
            return _Searched(found, text, during, k, hits, sources, keyed)

        return RecallAhead(self._threads.submit(read))

"""How many cards one ``prepare`` searches for: what recall weighs, not more with a long window.

Real embedded Postgres, the hashing embedder (named as MiniLM, as the shared test database
records). The search is observed, not replaced: the real ``CardIndex.search`` runs and the
size of each request it gets is written down.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from memory import Memory, Settings
from retrieval import MINILM_NAME, CardQuery, HashingEmbedder
from storage import Database


@pytest.fixture(scope="module")
def size_database(database_url: str) -> Iterator[Database]:
    with Database.open(database_url) as opened:
        yield opened


def make_memory(database: Database) -> Memory:
    settings = Settings(summary={"mode": "inline", "debounce_seconds": 0}, cards={"k": 4})
    return Memory(database, settings, embedder=HashingEmbedder(name=MINILM_NAME))


def pairs(session_id: str, count: int, topic: str) -> list[dict[str, Any]]:
    """``count`` exchanges about ``topic``, each message with its own client id."""
    messages: list[dict[str, Any]] = []
    for index in range(count):
        messages.append({"role": "user", "content": f"Note {index} about {topic}."})
        messages.append({"role": "assistant", "content": f"Noted {index} on {topic}."})
    return [{**m, "id": f"{session_id}-{n}"} for n, m in enumerate(messages)]


def searched_sizes(mem: Memory, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every ``k`` the long-term memory's card index is asked for from now on."""
    longterm = mem._parts.longterm
    assert longterm is not None
    index = longterm.index
    real = index.search
    sizes: list[int] = []

    def observed(user_id: str, query: str, request: CardQuery) -> Any:
        sizes.append(request.k)
        return real(user_id, query, request)

    monkeypatch.setattr(index, "search", observed)
    return sizes


def test_a_long_window_does_not_widen_the_search(
    size_database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    mem = make_memory(size_database)
    user = "search-size-long-window"
    mem.record(user_id=user, session_id="earlier", messages=pairs("earlier", 30, "the garden"))
    mem.end_session(user_id=user, session_id="earlier")
    # A long session whose messages have no cards yet: nothing in the window is a card.
    mem.record(user_id=user, session_id="now", messages=pairs("now", 60, "the kitchen"))
    sizes = searched_sizes(mem, monkeypatch)
    context = mem.prepare(user_id=user, session_id="now", input="What about the garden?")
    assert context.report.recall is not None and context.report.recall.cards
    # Recall weighs 4 k = 16 cards (no token budget) and two spare: 18, as in a new session;
    # it asked for 16 + 2 per window message (about 260) before.
    assert sizes == [18]


def test_cards_of_the_window_are_searched_past(
    size_database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session ended and resumed has cards of its own messages in the window: recall asks
    again, for more, until it has as many cards from outside the window as it weighs."""
    mem = make_memory(size_database)
    user = "search-size-resumed"
    mem.record(user_id=user, session_id="old", messages=pairs("old", 20, "the garden"))
    mem.end_session(user_id=user, session_id="old")
    mem.record(user_id=user, session_id="resumed", messages=pairs("resumed", 20, "the kitchen"))
    mem.end_session(user_id=user, session_id="resumed")
    sizes = searched_sizes(mem, monkeypatch)
    context = mem.prepare(user_id=user, session_id="resumed", input="Any note about the kitchen?")
    recall = context.report.recall
    assert recall is not None
    resumed = {m.id for m in mem.history(user_id=user, session_id="resumed")}
    for card in recall.cards:
        assert not set(card.message_ids) <= resumed  # never a card the window holds whole
    # The 40 cards of the resumed session rank first: 18, then 36, then 72 reach past them.
    assert sizes == [18, 36, 72]

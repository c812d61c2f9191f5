"""``prepare`` reads the pins and searches the cards while its input is stored.

Neither waits for the other: the search runs while the input's statement waits on a locked
session row, a search that fails leaves the stored input and the request whole, and an input
that is refused leaves nothing stored and the next request served.
"""

import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest
from sqlalchemy import text

from memory import Memory, Settings
from memory.context.assembler import AssembledContext
from memory.errors import InvalidHistoryError
from memory.longterm.recall_ahead import RecallAhead, _Searched
from retrieval import MINILM_NAME, CardIndex, HashingEmbedder
from storage import Card, Database, DatabaseUnavailableError


@pytest.fixture(scope="module")
def own_database(database_url: str) -> Iterator[Database]:
    with Database.open(database_url) as opened:
        yield opened


def memory(database: Database, embedder: HashingEmbedder | None = None) -> Memory:
    return Memory(
        database,
        Settings(summary={"mode": "inline"}, cards={"min_score": -1.0}, reports={"enabled": False}),
        embedder=embedder or HashingEmbedder(name=MINILM_NAME),
    )


def remember(mem: Memory, user_id: str) -> None:
    mem.record(
        user_id=user_id,
        session_id="s0",
        messages=[{"role": "user", "content": "Our VPN gateway moved to vpn-2 last month."}],
    )
    mem.end_session(user_id=user_id, session_id="s0")


def test_the_cards_are_searched_while_the_input_is_stored(
    own_database: Database, user_id: str
) -> None:
    mem = memory(own_database)
    remember(mem, user_id)
    mem.prepare(user_id=user_id, session_id="s1", input="hello")  # the session exists
    longterm = mem._parts.longterm
    assert longterm is not None
    searched = longterm._queries.handed_over  # each search takes its prefetched vector
    prepared: list[AssembledContext] = []

    with own_database.transaction() as blocker:
        # Storing the input updates the session's row: it waits until this transaction ends.
        blocker.execute(
            text("SELECT 1 FROM sessions WHERE user_id = :u AND session_id = 's1' FOR UPDATE"),
            {"u": user_id},
        )
        request = threading.Thread(
            target=lambda: prepared.append(
                mem.prepare(user_id=user_id, session_id="s1", input="which VPN gateway?")
            )
        )
        request.start()
        # Waits for an event, not a duration: the search (or, on failure, a minute) passes.
        deadline = time.monotonic() + 60
        while longterm._queries.handed_over == searched and time.monotonic() < deadline:
            time.sleep(0.01)
        searched_while_storing = longterm._queries.handed_over - searched
        stored_while_searching = len(mem.history(user_id=user_id, session_id="s1"))
    request.join()

    assert searched_while_storing == 1
    assert stored_while_searching == 1  # "hello" only: the input was still waiting
    [context] = prepared
    assert context.messages[-1]["content"] == "which VPN gateway?"
    recall = context.report.recall
    assert recall is not None and not recall.failed and recall.cards
    assert longterm._queries.handed_over - searched == 1  # searched once, not again


class _BrokenEmbedder(HashingEmbedder):
    def embed(self, texts: Any) -> list[list[float]]:
        raise OSError("the model is gone")


def test_a_search_that_fails_leaves_the_input_stored(own_database: Database, user_id: str) -> None:
    remember(memory(own_database), user_id)
    mem = memory(own_database, _BrokenEmbedder(name=MINILM_NAME))

    context = mem.prepare(user_id=user_id, session_id="s1", input="which VPN gateway?")

    assert context.messages[-1]["content"] == "which VPN gateway?"
    assert context.report.recall is not None and context.report.recall.failed
    assert mem.recall_failures == 1
    stored = mem.history(user_id=user_id, session_id="s1")
    assert [m.payload["content"] for m in stored] == ["which VPN gateway?"]


def test_a_refused_input_stores_nothing_and_the_next_request_is_served(
    own_database: Database, user_id: str
) -> None:
    mem = memory(own_database)
    remember(mem, user_id)

    with pytest.raises(InvalidHistoryError):
        mem.prepare(
            user_id=user_id,
            session_id="s1",
            input={"role": "assistant", "content": "which VPN gateway?"},
        )
    assert mem.history(user_id=user_id, session_id="s1") == []

    context = mem.prepare(user_id=user_id, session_id="s1", input="which VPN gateway?")
    recall = context.report.recall
    assert recall is not None and not recall.failed and recall.cards


def test_the_keyed_cards_read_ahead_are_given_only_for_messages_all_looked_up() -> None:
    keyed: Future[list[Card]] = Future()
    keyed.set_result([])
    searched: Future[_Searched] = Future()
    searched.set_result(_Searched([], "q", None, 3, [], frozenset({1, 2, 3}), keyed))
    ahead = RecallAhead(searched)

    assert ahead.keyed_from_messages([1, 3]) == []  # read: none was made from them
    assert ahead.keyed_from_messages([3, 4]) is None  # 4 was not looked up: recall reads it
    nothing: Future[_Searched] = Future()
    nothing.set_result(_Searched([], "q", None, 3, []))  # no turn card found
    assert RecallAhead(nothing).keyed_from_messages([1]) is None


def test_a_keyed_lookup_read_ahead_that_fails_fails_the_recall_not_the_request(
    own_database: Database, user_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    mem = memory(own_database)
    remember(mem, user_id)
    kept = _cards(own_database, user_id)

    def unavailable(*args: Any, **kwargs: Any) -> list[Card]:
        raise DatabaseUnavailableError("the server restarted")

    with monkeypatch.context() as patched:
        patched.setattr(CardIndex, "keyed_from_messages", unavailable)
        context = mem.prepare(user_id=user_id, session_id="s1", input="which VPN gateway?")

    assert context.messages[-1]["content"] == "which VPN gateway?"
    assert context.report.recall is not None and context.report.recall.failed
    stored = mem.history(user_id=user_id, session_id="s1")
    assert [m.payload["content"] for m in stored] == ["which VPN gateway?"]
    assert _cards(own_database, user_id) == kept != []  # every card kept

    again = mem.prepare(user_id=user_id, session_id="s1", input="which VPN gateway, again?")
    recall = again.report.recall
    assert recall is not None and not recall.failed and recall.cards


def _cards(database: Database, user_id: str) -> list[str]:
    with database.engine.connect() as connection:
        query = text("SELECT text FROM cards WHERE user_id = :user_id ORDER BY id")
        return list(connection.execute(query, {"user_id": user_id}).scalars())

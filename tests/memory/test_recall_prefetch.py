"""``prepare`` starts embedding its input before storing it; recall uses that embedding."""

from collections.abc import Iterator

import pytest

from memory import Memory, Settings
from retrieval import MINILM_NAME, HashingEmbedder
from storage import Database


@pytest.fixture(scope="module")
def own_database(database_url: str) -> Iterator[Database]:
    with Database.open(database_url) as opened:
        yield opened


def memory(database: Database, **cards: object) -> Memory:
    return Memory(
        database,
        Settings(summary={"mode": "inline"}, cards=cards),  # type: ignore[arg-type]
        embedder=HashingEmbedder(name=MINILM_NAME),
    )


def test_prepare_hands_its_prefetched_input_to_recall(own_database: Database, user_id: str) -> None:
    mem = memory(own_database)
    mem.pin(user_id=user_id, text="The VPN gateway is vpn-2.")
    mem.record(
        user_id=user_id,
        session_id="s0",
        messages=[{"role": "user", "content": "Our VPN gateway moved to vpn-2 last month."}],
    )
    mem.end_session(user_id=user_id, session_id="s0")
    longterm = mem._parts.longterm
    assert longterm is not None

    context = mem.prepare(user_id=user_id, session_id="s1", input="which VPN gateway?")

    assert longterm._queries.pending == 0
    assert longterm._queries.handed_over == 1  # the prefetched vector was the one searched
    assert context.report.recall is not None and not context.report.recall.failed
    assert context.report.recall.query == "which VPN gateway?"
    searched = mem.search(user_id=user_id, query="which VPN gateway?", k=5)
    recalled = [card.card_id for card in context.report.recall.cards if not card.pinned]
    assert recalled and recalled[0] in {hit.card.id for hit in searched}


def test_a_message_input_is_prefetched_too(own_database: Database, user_id: str) -> None:
    mem = memory(own_database)
    longterm = mem._parts.longterm
    assert longterm is not None

    context = mem.prepare(
        user_id=user_id,
        session_id="s1",
        input={"role": "user", "content": "which VPN gateway?", "id": "m1"},
    )

    assert (longterm._queries.pending, longterm._queries.handed_over) == (0, 1)
    assert context.report.recall is not None and not context.report.recall.failed


def test_no_prefetch_when_recall_searches_nothing(own_database: Database, user_id: str) -> None:
    mem = memory(own_database, k=0)
    longterm = mem._parts.longterm
    assert longterm is not None

    mem.prepare(user_id=user_id, session_id="s1", input="which VPN gateway?")

    assert (longterm._queries.pending, longterm._queries.handed_over) == (0, 0)

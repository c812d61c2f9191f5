"""Archiving is bounded and idempotent: one turn card per message whatever happened in between,
long sessions archived step by step, and no card over the store's bounds.

On the real embedded Postgres, offline (the rules extract), with the hashing fake embedder
(named as MiniLM, the model the shared test database records).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import memory.longterm.archiving
from memory import Memory, Settings
from memory.longterm.archiving import TURN_MESSAGE_CHARS, TURN_NEIGHBOUR_CHARS
from memory.longterm.long_term_memory import LongTermMemory
from retrieval import MINILM_NAME, HashingEmbedder
from storage import MAX_CARD_TEXT_CHARS, ArchiveMarks, Card, CardFilter, Database, StoredMessage


@pytest.fixture(scope="module")
def archiving_database(database_url: str) -> Iterator[Database]:
    """This module's own handle on the shared database."""
    with Database.open(database_url) as opened:
        yield opened


@pytest.fixture
def mem(archiving_database: Database) -> Memory:
    return Memory(
        archiving_database,
        Settings(summary={"mode": "inline", "debounce_seconds": 0}),
        embedder=HashingEmbedder(name=MINILM_NAME),
    )


def longterm_of(mem: Memory) -> LongTermMemory:
    longterm = mem._parts.longterm
    assert longterm is not None
    return longterm


def talk(mem: Memory, user_id: str, pairs: range, session_id: str = "s1") -> None:
    mem.record(
        user_id=user_id,
        session_id=session_id,
        messages=[
            message
            for index in pairs
            for message in (
                {"role": "user", "content": f"Point {index}: the code is zebra{index}."},
                {"role": "assistant", "content": f"Noted zebra{index}."},
            )
        ],
    )


def turn_cards(mem: Memory, user_id: str) -> list[Card]:
    everything = CardFilter(types=("turn",), include_superseded=True)
    return longterm_of(mem).store.list_cards(user_id, everything)


def test_a_message_archived_again_with_new_neighbours_keeps_its_one_turn_card(
    mem: Memory, user_id: str
) -> None:
    talk(mem, user_id, range(3))
    # A process that stored the cards and died before moving the archive mark:
    longterm_of(mem).archiver.archive(user_id, "s1", 0, None)
    assert ArchiveMarks(mem._database).get(user_id, "s1") == 0
    before = {card.turn_message_id: card for card in turn_cards(mem, user_id)}
    talk(mem, user_id, range(3, 5))  # the last archived message has a neighbour now

    mem.end_session(user_id=user_id, session_id="s1")  # the retry, with more messages

    stored = mem.history(user_id=user_id, session_id="s1")
    cards = turn_cards(mem, user_id)
    assert len(cards) == len(stored) == 10  # one per message, none twice
    assert sorted(card.turn_message_id for card in cards) == [m.id for m in stored]
    for card in cards:
        if card.turn_message_id in before:  # archived before: kept as it was
            assert card == before[card.turn_message_id]
    assert ArchiveMarks(mem._database).get(user_id, "s1") == 10


def test_a_long_session_is_archived_in_bounded_steps_each_moving_the_mark(
    mem: Memory, user_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memory.longterm.archiving, "ARCHIVE_BATCH_MESSAGES", 20)
    talk(mem, user_id, range(25))  # 50 messages
    longterm = longterm_of(mem)
    reads: list[int] = []
    marks: list[int] = []
    read, advance = longterm.archiver._messages.between, longterm.archiver._marks.advance

    def between(*args: Any) -> list[StoredMessage]:
        reads.append(len(loaded := read(*args)))
        return loaded

    def advanced(user: str, session: str, through: StoredMessage) -> int:
        marks.append(through.seq)
        return advance(user, session, through)

    monkeypatch.setattr(longterm.archiver._messages, "between", between)
    monkeypatch.setattr(longterm.archiver._marks, "advance", advanced)

    mem.end_session(user_id=user_id, session_id="s1")

    assert marks == [20, 40, 50]
    assert max(reads) <= 20 + 2 * 4  # a step and the neighbours either side
    assert len(turn_cards(mem, user_id)) == 50


def test_a_failure_midway_loses_only_its_step_and_the_retry_doubles_nothing(
    mem: Memory, user_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memory.longterm.archiving, "ARCHIVE_BATCH_MESSAGES", 20)
    talk(mem, user_id, range(25))
    longterm = longterm_of(mem)
    write = longterm.archiver._writer.write
    calls = 0

    def failing(*args: Any) -> list[Card]:
        nonlocal calls
        calls += 1
        if calls == 3:  # the second step's turn cards, after its first write
            raise RuntimeError("the database went away")
        return write(*args)

    monkeypatch.setattr(longterm.archiver._writer, "write", failing)
    with pytest.raises(RuntimeError):
        mem.end_session(user_id=user_id, session_id="s1")
    assert ArchiveMarks(mem._database).get(user_id, "s1") == 20  # the first step is kept

    monkeypatch.setattr(longterm.archiver._writer, "write", write)
    mem.end_session(user_id=user_id, session_id="s1")

    cards = turn_cards(mem, user_id)
    assert len(cards) == len({card.turn_message_id for card in cards}) == 50
    assert ArchiveMarks(mem._database).get(user_id, "s1") == 50


def test_a_huge_message_makes_a_turn_card_within_the_stores_bound(
    mem: Memory, user_id: str
) -> None:
    pasted = "The log says: " + "timeout after 30 s; " * 10_000  # 200,000 characters
    mem.record(
        user_id=user_id,
        session_id="s1",
        messages=[
            {"role": "user", "content": "Here is the log."},
            {"role": "user", "content": pasted},
            {"role": "assistant", "content": "The upstream " + "times out " * 2_000},
        ],
    )

    mem.end_session(user_id=user_id, session_id="s1")

    cards = {card.turn_message_id: card for card in turn_cards(mem, user_id)}
    stored = mem.history(user_id=user_id, session_id="s1")
    assert len(cards) == 3
    assert all(len(card.text) <= MAX_CARD_TEXT_CHARS for card in cards.values())
    own = cards[stored[1].id].text
    assert "The log says: timeout after 30 s;" in own
    assert "characters cut by stratamem" in own
    assert len(own) < TURN_MESSAGE_CHARS + 2 * TURN_NEIGHBOUR_CHARS + 200
    # Its neighbour's card holds a shorter cut of it.
    assert len(cards[stored[0].id].text) < TURN_NEIGHBOUR_CHARS + 200

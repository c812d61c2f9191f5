"""When cards are made without being asked: ``record`` past the fold trigger, and idle sessions.

On the real embedded Postgres, with the hashing fake embedder (named as MiniLM, the model the
shared test database records). Nothing here waits on a clock: idle sessions are made by moving
their last activity (``sessions.last_active_at``, when their last message was stored) into the
past, as if nobody had written to them since.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from databases import own_database
from sqlalchemy import text

from memory import Memory, Settings
from retrieval import MINILM_NAME, HashingEmbedder
from storage import ArchiveMarks, Card, CardFilter, Database, JobQueue

#: A small budget, so that a few dozen messages pass the fold trigger.
SMALL = {"context_window": 1_500, "max_output": 300}
BACKGROUND = {"summary": {"mode": "background", "debounce_seconds": 0}}
INLINE = {"summary": {"mode": "inline", "debounce_seconds": 0}}
LONG_AGO = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


@pytest.fixture(scope="module")
def triggers_database(database: Database) -> Iterator[Database]:
    """A database of this module's own on the shared server: the worker and the idle sweep
    here take every job and session of their database, not those other modules left."""
    with own_database(database, "triggers") as own:
        yield own


@pytest.fixture
def make_memory(triggers_database: Database) -> Callable[..., Memory]:
    def make(**settings: Any) -> Memory:
        # What the fold and the idle sweep archive, alone: cards soon after a record (on by
        # default in background mode) are tests/memory/test_archive_soon.py's.
        settings["cards"] = {"archive_promptly": False, **settings.get("cards", {})}
        return Memory(
            triggers_database, Settings(**settings), embedder=HashingEmbedder(name=MINILM_NAME)
        )

    return make


def chat(
    mem: Memory,
    user_id: str,
    session_id: str,
    count: int,
    *,
    start: int = 0,
    at: datetime | None = None,
) -> None:
    """Record ``count`` exchanges, one ``record`` call each (never ``prepare``)."""
    for index in range(start, start + count):
        stamp = {} if at is None else {"timestamp": at + timedelta(minutes=index)}
        mem.record(
            user_id=user_id,
            session_id=session_id,
            messages=[
                {
                    "role": "user",
                    "content": f"Note {index}: the code word is zebra{index}.",
                    "id": f"u{index}",
                    **stamp,
                },
                {
                    "role": "assistant",
                    "content": f"Noted zebra{index}.",
                    "id": f"a{index}",
                    **stamp,
                },
            ],
        )


def went_quiet(mem: Memory, user_id: str, session_id: str, at: datetime) -> None:
    """Make the session's last activity ``at``: nobody wrote to it since."""
    with mem._database.transaction() as session:
        session.execute(
            text(
                "UPDATE sessions SET last_active_at = :at "
                "WHERE user_id = :user_id AND session_id = :session_id"
            ),
            {"at": at, "user_id": user_id, "session_id": session_id},
        )


def turn_cards(mem: Memory, user_id: str, session_id: str) -> list[Card]:
    """The session's turn cards, oldest first."""
    store = mem._parts.longterm.store  # type: ignore[union-attr]
    return store.list_cards(user_id, CardFilter(types=("turn",), session_id=session_id))


# --- record triggers the fold --------------------------------------------------------------


@pytest.mark.slow
def test_record_alone_queues_the_fold_and_the_worker_archives_it(
    make_memory: Callable[..., Memory], user_id: str
) -> None:
    mem = make_memory(**SMALL, **BACKGROUND)
    chat(mem, user_id, "s1", 30)
    assert mem.summary(user_id=user_id, session_id="s1") is None  # queued, not run
    assert mem.search(user_id=user_id, query="zebra0", k=3) == []

    mem.run_worker(until_idle=True)

    summary = mem.summary(user_id=user_id, session_id="s1")
    assert summary is not None and summary.boundary_seq > 2
    hits = mem.search(user_id=user_id, query="zebra0", k=3, types=["turn"])
    assert any("zebra0." in hit.card.text for hit in hits)
    # What is still in the window is not archived (it has not left it).
    last = mem.history(user_id=user_id, session_id="s1")[-1]
    assert ArchiveMarks(mem._database).get(user_id, "s1") == summary.boundary_seq < last.seq


def test_record_alone_folds_and_archives_inline(
    make_memory: Callable[..., Memory], user_id: str
) -> None:
    mem = make_memory(**SMALL, **INLINE)
    chat(mem, user_id, "s1", 30)

    summary = mem.summary(user_id=user_id, session_id="s1")
    assert summary is not None and summary.boundary_seq > 2
    hits = mem.search(user_id=user_id, query="zebra0", k=3, types=["turn"])
    assert any("zebra0." in hit.card.text for hit in hits)


def test_record_below_the_trigger_folds_nothing(
    make_memory: Callable[..., Memory], user_id: str
) -> None:
    mem = make_memory(**SMALL, **INLINE)
    chat(mem, user_id, "s1", 2)

    assert mem.summary(user_id=user_id, session_id="s1") is None
    assert mem.search(user_id=user_id, query="zebra0", k=3) == []


def test_the_trigger_counts_only_what_follows_the_summary(
    make_memory: Callable[..., Memory], user_id: str
) -> None:
    mem = make_memory(**SMALL, **INLINE)
    chat(mem, user_id, "s1", 30)
    first = mem.summary(user_id=user_id, session_id="s1")
    assert first is not None
    messages = mem._parts.messages
    after = messages.tokens_after_summary(user_id, "s1")
    stored = mem.history(user_id=user_id, session_id="s1")
    assert after == sum(m.tokens for m in stored if m.seq > first.boundary_seq)
    assert after <= mem._parts.fold_policy.trigger_tokens
    assert messages.tokens_after_summary(user_id, "no-such-session") == 0

    # With a fold already queued the sum is skipped: the queue debounces, the answer is moot.
    # (A kind of this test's own: no worker of another test waits for the job.)
    kind = f"fold-{uuid.uuid4()}"
    JobQueue(mem._database).enqueue(kind, user_id, "s1", delay_seconds=3_600)
    assert messages.tokens_after_summary(user_id, "s1", unless_queued=kind) is None
    assert messages.tokens_after_summary(user_id, "s1", unless_queued="cards") == after


# --- idle sessions -------------------------------------------------------------------------


def test_an_idle_session_is_archived_by_the_worker_like_an_ended_one(
    make_memory: Callable[..., Memory], user_id: str
) -> None:
    mem = make_memory(**BACKGROUND)
    chat(mem, user_id, "old", 3, at=LONG_AGO)
    went_quiet(mem, user_id, "old", LONG_AGO)
    chat(mem, user_id, "live", 3, at=LONG_AGO)  # stored now: not idle, whatever it is dated

    mem.run_worker(until_idle=True)

    cards = turn_cards(mem, user_id, "old")
    assert len(cards) == 6  # every message, the window included, as after end_session
    assert ArchiveMarks(mem._database).get(user_id, "old") == 6
    assert turn_cards(mem, user_id, "live") == []
    assert ArchiveMarks(mem._database).get(user_id, "live") == 0


def test_a_session_that_goes_on_after_idling_is_archived_again_from_its_mark(
    make_memory: Callable[..., Memory], user_id: str
) -> None:
    mem = make_memory(**BACKGROUND)
    chat(mem, user_id, "s1", 3, at=LONG_AGO)
    went_quiet(mem, user_id, "s1", LONG_AGO)
    mem.run_worker(until_idle=True)
    first = turn_cards(mem, user_id, "s1")

    chat(mem, user_id, "s1", 2, start=3, at=LONG_AGO + timedelta(days=1))
    went_quiet(mem, user_id, "s1", LONG_AGO + timedelta(days=1))
    mem.run_worker(until_idle=True)

    cards = turn_cards(mem, user_id, "s1")
    assert len(cards) == 10  # one per message: none archived twice
    assert [card.id for card in cards[: len(first)]] == [card.id for card in first]
    assert ArchiveMarks(mem._database).get(user_id, "s1") == 10
    # The first new turn has the last archived one as its neighbour, read across the mark.
    assert cards[len(first)].source_client_ids == ["a2", "u3", "a3"]


def test_idle_seconds_is_the_setting(make_memory: Callable[..., Memory], user_id: str) -> None:
    an_hour_ago = datetime.now(UTC) - timedelta(hours=1)
    patient = make_memory(**BACKGROUND, cards={"idle_seconds": 7_200})
    chat(patient, user_id, "s1", 2, at=an_hour_ago)
    went_quiet(patient, user_id, "s1", an_hour_ago)

    patient.run_worker(until_idle=True)
    assert turn_cards(patient, user_id, "s1") == []

    make_memory(**BACKGROUND).run_worker(until_idle=True)  # the default: half an hour
    assert len(turn_cards(patient, user_id, "s1")) == 4


def test_the_idle_sweep_finds_only_unarchived_sessions(
    make_memory: Callable[..., Memory], user_id: str
) -> None:
    mem = make_memory(**INLINE)
    chat(mem, user_id, "done", 1)
    chat(mem, user_id, "open", 1)
    chat(mem, user_id, "recent", 1, at=LONG_AGO)  # dated long ago, stored now
    went_quiet(mem, user_id, "done", LONG_AGO)
    went_quiet(mem, user_id, "open", LONG_AGO)
    mem.end_session(user_id=user_id, session_id="done")

    idle = ArchiveMarks(mem._database).idle_sessions(1_800, limit=100_000)

    mine = {(s.session_id, s.last_seq) for s in idle.sessions if s.user_id == user_id}
    assert mine == {("open", 2)}

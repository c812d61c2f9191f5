"""Cards within seconds of ``record`` (background mode): another session recalls them unended.

On the real embedded Postgres, with the hashing fake embedder (named as MiniLM, the model the
shared test database records), offline. The job's timing is read from its row (its due time,
whether it was queued again), never waited for: tests that run the worker use no debounce.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from databases import own_database
from sqlalchemy import text
from wire_trace import wire_trace

from memory import Memory, Settings
from memory.session.queued_jobs import QueuedArchiving
from retrieval import MINILM_NAME, HashingEmbedder
from storage import ArchiveMarks, Database

BACKGROUND = {"mode": "background", "debounce_seconds": 0}
#: A debounce no test waits for: the job stays pending while the test looks at it.
AN_HOUR = 3_600.0


@pytest.fixture(scope="module")
def soon_database(database: Database) -> Iterator[Database]:
    """A database of this module's own on the shared server: its tests run the worker, which
    on the shared database would also take every job other modules left (63 s for one test)."""
    with own_database(database, "soon") as opened:
        yield opened


@pytest.fixture
def make_memory(soon_database: Database, user_id: str) -> Iterator[Callable[..., Memory]]:
    def make(summary: dict[str, Any] | None = None, **cards: Any) -> Memory:
        # No kept reports: their writer thread's statements would land in a trace by chance.
        settings = Settings(summary=summary or BACKGROUND, cards=cards, reports={"enabled": False})
        return Memory(soon_database, settings, embedder=HashingEmbedder(name=MINILM_NAME))

    yield make
    # A job left pending for an hour would hold every later ``run_worker(until_idle=True)``.
    make().forget(user_id=user_id)


def say(mem: Memory, user_id: str, session_id: str, said: str, answer: str = "Noted.") -> None:
    """One turn as an application plays it: ``prepare`` stores the input, ``record`` the reply."""
    mem.prepare(user_id=user_id, session_id=session_id, input=said)
    mem.record(
        user_id=user_id, session_id=session_id, messages=[{"role": "assistant", "content": answer}]
    )


def memories(mem: Memory, user_id: str, session_id: str, question: str) -> str:
    """The memories ``prepare`` puts in the prompt for ``question``."""
    context = mem.prepare(user_id=user_id, session_id=session_id, input=question)
    first = context.messages[0]
    return str(first["content"]) if first["role"] == "system" else ""


def pending_cards_job(mem: Memory, user_id: str, session_id: str) -> dict[str, Any] | None:
    """The session's pending ``cards`` job: its params, debounce, and whether it was queued
    again after it was created."""
    with mem.database.reading() as connection:
        row = connection.execute(
            text(
                "SELECT params, run_after - created_at AS delay, updated_at > created_at "
                "AS queued_again FROM jobs WHERE user_id = :u AND session_id = :s "
                "AND kind = 'cards' AND status = 'pending'"
            ),
            {"u": user_id, "s": session_id},
        ).one_or_none()
    return None if row is None else dict(row._mapping)


@pytest.mark.slow
def test_a_fact_said_in_one_session_is_recalled_in_another_without_ending_it(
    make_memory: Callable[..., Memory], user_id: str
) -> None:
    mem = make_memory()
    say(mem, user_id, "monday", "My sister Ana lives in Lisbon.", "Lovely city.")

    mem.run_worker(until_idle=True)  # the cards job; idle_seconds (half an hour) is far off

    recalled = memories(mem, user_id, "friday", "Where does my sister Ana live?")
    assert "Lisbon" in recalled
    # Monday was not ended: both of its messages (the input prepare stored too) are cards.
    assert ArchiveMarks(mem.database).get(user_id, "monday") == 2
    hits = mem.search(user_id=user_id, query="sister Ana Lisbon", session_id="monday")
    assert hits and "Lisbon" in hits[0].card.text


def test_the_job_is_due_after_the_debounce_and_a_burst_of_records_queues_it_once(
    make_memory: Callable[..., Memory], user_id: str
) -> None:
    mem = make_memory(debounce_seconds=AN_HOUR)
    say(mem, user_id, "s1", "I bake bread on Sundays.")
    first = pending_cards_job(mem, user_id, "s1")
    say(mem, user_id, "s1", "And cakes on Saturdays.")
    mem.record(user_id=user_id, session_id="s1", messages=[{"role": "user", "content": "Yes."}])

    assert first is not None
    assert first["delay"] == timedelta(seconds=AN_HOUR)
    assert first["params"] == {"end": True}  # every message not archived yet
    # The records after the first queued nothing: the job they join was surely pending.
    assert pending_cards_job(mem, user_id, "s1") == first
    assert ArchiveMarks(mem.database).get(user_id, "s1") == 0


def test_the_records_that_join_a_surely_pending_job_cost_no_round_trip_for_it(
    make_memory: Callable[..., Memory], user_id: str, tmp_path: Path
) -> None:
    soon = make_memory(debounce_seconds=AN_HOUR)
    off = make_memory(debounce_seconds=AN_HOUR, archive_promptly=False)
    trips: dict[str, list[int]] = {}
    for mem, session in ((soon, "soon"), (off, "off")):
        mem.prepare(user_id=user_id, session_id=session, input="I bake bread on Sundays.")
        for turn in range(2):
            with wire_trace(mem.database.engine, tmp_path / f"{session}{turn}") as trace:
                mem.record(
                    user_id=user_id,
                    session_id=session,
                    messages=[{"role": "assistant", "content": f"Good bread {turn}."}],
                )
            trips.setdefault(session, []).append(trace.round_trips)

    assert trips["soon"][0] > trips["off"][0]  # the first record queues the job
    assert trips["soon"][1] == trips["off"][1]  # the next one joins it for nothing
    assert pending_cards_job(soon, user_id, "soon") is not None
    assert pending_cards_job(off, user_id, "off") is None


def test_turned_off_a_record_queues_no_cards_job(
    make_memory: Callable[..., Memory], user_id: str
) -> None:
    mem = make_memory(archive_promptly=False)
    say(mem, user_id, "s1", "I bake bread on Sundays.")

    assert pending_cards_job(mem, user_id, "s1") is None


def test_inline_mode_archives_at_the_session_end_as_before(
    make_memory: Callable[..., Memory], user_id: str
) -> None:
    mem = make_memory({"mode": "inline", "debounce_seconds": 0})
    say(mem, user_id, "monday", "My sister Ana lives in Lisbon.")

    assert pending_cards_job(mem, user_id, "monday") is None
    assert ArchiveMarks(mem.database).get(user_id, "monday") == 0
    mem.end_session(user_id=user_id, session_id="monday")
    assert "Lisbon" in memories(mem, user_id, "friday", "Where does my sister Ana live?")


def test_after_the_session_end_ran_the_job_a_record_queues_a_new_one(
    make_memory: Callable[..., Memory], user_id: str
) -> None:
    mem = make_memory(debounce_seconds=AN_HOUR)
    say(mem, user_id, "s1", "I bake bread on Sundays.")
    mem.end_session(user_id=user_id, session_id="s1")  # the pending job is due now
    mem.run_worker(until_idle=True)
    assert ArchiveMarks(mem.database).get(user_id, "s1") == 2
    assert pending_cards_job(mem, user_id, "s1") is None

    say(mem, user_id, "s1", "My sister Ana lives in Lisbon.")

    # The job this process created an hour ahead ran early: the new messages queue their own.
    job = pending_cards_job(mem, user_id, "s1")
    assert job is not None and job["delay"] == timedelta(seconds=AN_HOUR)


def test_after_forget_a_record_queues_a_new_job(
    make_memory: Callable[..., Memory], user_id: str
) -> None:
    mem = make_memory(debounce_seconds=AN_HOUR)
    say(mem, user_id, "s1", "I bake bread on Sundays.")
    mem.forget(user_id=user_id, session_id="s1")  # its job goes with it
    assert pending_cards_job(mem, user_id, "s1") is None

    say(mem, user_id, "s1", "My sister Ana lives in Lisbon.")

    assert pending_cards_job(mem, user_id, "s1") is not None


# --- QueuedArchiving, on a clock of the test's own -------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_created_job_is_pending_until_a_margin_before_it_is_due() -> None:
    clock = Clock()
    queued = QueuedArchiving(margin_seconds=1.0, clock=clock)
    queued.created("u", "s", queued.now(), 5.0)

    assert queued.pending("u", "s") and not queued.pending("u", "other")
    clock.now += 3.9
    assert queued.pending("u", "s")
    clock.now += 0.1  # one second before the job is due: a worker may claim it soon
    assert not queued.pending("u", "s")


def test_a_short_debounce_keeps_half_of_it_and_none_keeps_nothing() -> None:
    clock = Clock()
    queued = QueuedArchiving(margin_seconds=1.0, clock=clock)
    queued.created("u", "short", queued.now(), 1.0)
    queued.created("u", "none", queued.now(), 0.0)

    assert queued.pending("u", "short") and not queued.pending("u", "none")
    clock.now += 0.5
    assert not queued.pending("u", "short")


def test_forgetting_a_session_or_a_user_and_the_bound() -> None:
    queued = QueuedArchiving(max_sessions=2, clock=Clock())
    for session in ("a", "b", "c"):
        queued.created("u", session, queued.now(), 60.0)
    queued.created("v", "a", queued.now(), 60.0)

    assert [queued.pending("u", s) for s in ("a", "b", "c")] == [False, False, True]
    queued.forget("u", "c")
    assert not queued.pending("u", "c") and queued.pending("v", "a")
    queued.forget("v")
    assert not queued.pending("v", "a")

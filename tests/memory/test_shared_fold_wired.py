"""The shared fold call wired into consolidation, on the real Postgres with the fake server.

Every user and assistant message is extracted exactly once, whether a fold, the end of the
session, or both reach it first; a fold makes one call and ``archive`` no second one; a process
killed between storing the fold's cards and storing its summary leaves both consistent, and the
retry extracts nothing twice.
"""

from __future__ import annotations

import json
import re
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from child_process import Spawn
from fake_openai import FakeOpenAI, Reply
from sqlalchemy import text

from memory import Memory, Settings
from memory.cards.prompts import EXTRACTION_INSTRUCTIONS
from memory.llm import OpenAIChatModel
from memory.longterm.summary_and_cards import FOLD_INSTRUCTIONS
from memory.summary.transcript import INSTRUCTIONS
from retrieval import MINILM_NAME, HashingEmbedder
from storage import ArchiveMarks, Card, CardFilter, Database

CHILD = Path(__file__).with_name("fold_child.py")
#: The most seconds to wait for the child to reach the summary write (a bound, not a timing).
WAIT_S = 120
#: A small window: a fold is due every few turns.
SMALL = {"context_window": 1_500, "max_output": 300}
INLINE = {"mode": "inline", "debounce_seconds": 0, "backoff_seconds": 0}
NUMBERED = re.compile(r"^\[(\d+)\] (?:user|assistant): (.*)$", re.M)


def kind(body: dict[str, Any]) -> str:
    system = str(body["messages"][0]["content"])
    if system.startswith(FOLD_INSTRUCTIONS[:40]):
        return "fold"
    if system == EXTRACTION_INSTRUCTIONS:
        return "extraction"
    if system.startswith(INSTRUCTIONS[:40]):
        return "summary"
    return "other"


def respond(body: dict[str, Any]) -> Reply:
    """A fold: a summary and one card per cited line; extraction: the same cards alone."""
    material = str(body["messages"][1]["content"])
    cards = [
        {"type": "fact", "text": f"Said: {said}", "source": [int(number)]}
        for number, said in NUMBERED.findall(material)
    ]
    if kind(body) == "fold":
        return Reply(json.dumps({"summary": "Notes with code words.", "cards": cards}))
    if kind(body) == "extraction":
        return Reply(json.dumps({"cards": cards}))
    return Reply("Notes with code words.")


@pytest.fixture(scope="module")
def wired_database(database_url: str) -> Iterator[Database]:
    with Database.open(database_url) as opened:
        yield opened


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(responder=respond) as fake:
        yield fake


@pytest.fixture
def make_memory(wired_database: Database, server: FakeOpenAI) -> Callable[..., Memory]:
    def make(summary: dict[str, Any] | None = None, **settings: Any) -> Memory:
        # The fold's own extraction: cards soon after a record (background mode) are off
        # unless a test turns them on.
        settings["cards"] = {"archive_promptly": False, **settings.get("cards", {})}
        return Memory(
            wired_database,
            Settings(**settings, summary=summary or INLINE),
            chat=OpenAIChatModel(base_url=server.base_url, api_key="test"),
            embedder=HashingEmbedder(name=MINILM_NAME),
        )

    return make


def said_by(user_id: str, index: int) -> tuple[str, str]:
    """Turn ``index`` of the user: words no other test's session holds."""
    tag = user_id[-8:]
    return f"Note {index} of {tag}: the code word is zebra{index}.", f"Noted {tag} zebra{index}."


def talk(mem: Memory, user_id: str, first: int, last: int) -> None:
    for index in range(first, last):
        user, assistant = said_by(user_id, index)
        mem.record(
            user_id=user_id,
            session_id="s1",
            messages=[
                {"role": "user", "content": user},
                {"role": "assistant", "content": assistant},
            ],
        )


def extracted(mem: Memory, user_id: str) -> list[Card]:
    longterm = mem._parts.longterm
    assert longterm is not None
    cards = longterm.store.list_cards(user_id, CardFilter(include_superseded=True))
    return [card for card in cards if card.type != "turn"]


def mine(server: FakeOpenAI, user_id: str) -> list[dict[str, Any]]:
    """The requests about this test's session.

    The database is shared by the whole run, and a worker's idle sweep also archives the idle
    sessions other tests left: their requests reach this test's server too.
    """
    tag = user_id[-8:]
    return [body for body in server.requests if tag in str(body["messages"][1]["content"])]


def cited(requests: list[dict[str, Any]]) -> Counter[str]:
    """How many times each message was sent on a numbered line (offered for extraction)."""
    return Counter(
        said
        for body in requests
        for _, said in NUMBERED.findall(str(body["messages"][1]["content"]))
    )


def test_folds_then_the_end_of_the_session_extract_every_message_exactly_once(
    make_memory: Callable[..., Memory], server: FakeOpenAI, user_id: str
) -> None:
    mem = make_memory(**SMALL)
    talk(mem, user_id, 0, 4)
    mem.end_session(user_id=user_id, session_id="s1")  # before any fold: 8 messages archived
    talk(mem, user_id, 4, 30)  # the session goes on and folds
    mem.end_session(user_id=user_id, session_id="s1")  # the messages never folded

    kinds = [kind(body) for body in mine(server, user_id)]
    assert kinds[0] == "extraction" and "fold" in kinds
    assert kinds[-1] == "extraction"
    assert kinds.count("extraction") == 2  # the two session ends; a fold never extracts apart
    said = [text for index in range(30) for text in said_by(user_id, index)]
    offered = cited(mine(server, user_id))
    assert sorted(offered) == sorted(said)  # none skipped
    assert set(offered.values()) == {1}  # none twice
    # The first fold read the messages archived at the first end as context, unnumbered.
    first_fold = next(body for body in mine(server, user_id) if kind(body) == "fold")
    assert f"\nuser: {said[0]}" in first_fold["messages"][1]["content"]
    # Every message became one card, and the archive mark is at the last message.
    assert sorted(card.text for card in extracted(mem, user_id)) == sorted(
        f"Said: {text}" for text in said
    )
    marks = ArchiveMarks(mem._database)
    assert marks.get(user_id, "s1") == 60


def test_a_background_fold_job_makes_one_call_and_archiving_none(
    make_memory: Callable[..., Memory], server: FakeOpenAI, user_id: str
) -> None:
    mem = make_memory({**INLINE, "mode": "background"}, **SMALL)
    talk(mem, user_id, 0, 30)

    run = mem.run_worker(until_idle=True)

    summary = mem.summary(user_id=user_id, session_id="s1")
    assert summary is not None and summary.kind == "llm"
    kinds = [kind(body) for body in mine(server, user_id)]
    assert kinds and set(kinds) == {"fold"}  # no extraction-only call after the fold
    assert run.failures == 0
    assert ArchiveMarks(mem._database).get(user_id, "s1") == summary.boundary_seq
    assert len(extracted(mem, user_id)) == summary.boundary_seq
    mem.end_session(user_id=user_id, session_id="s1")
    mem.run_worker(until_idle=True)
    assert sum(cited(mine(server, user_id)).values()) == 60  # once each, the rest at the end


@pytest.mark.slow
def test_a_crash_between_the_cards_and_the_summary_is_retried_without_duplicates(
    make_memory: Callable[..., Memory],
    server: FakeOpenAI,
    spawn: Spawn,
    database_url: str,
    wired_database: Database,
    user_id: str,
) -> None:
    writer = make_memory(context_window=100_000)  # records without folding
    folder = make_memory(**SMALL)  # the fold settings of the child (``fold_child.SETTINGS``)
    talk(writer, user_id, 0, 30)
    first = folder.consolidate(user_id=user_id, session_id="s1")
    assert first is not None
    talk(writer, user_id, 30, 60)
    marks = ArchiveMarks(wired_database)
    assert marks.get(user_id, "s1") == first.boundary_seq

    with wired_database.engine.connect() as locker:
        locker.execute(
            text(
                "SELECT 1 FROM session_summaries WHERE user_id = :u AND session_id = 's1' "
                "FOR UPDATE"
            ),
            {"u": user_id},
        )
        child = spawn(CHILD, database_url, server.base_url, user_id, "s1")
        _wait_for_a_blocked_summary_write(wired_database)
        assert child.kill() == -signal.SIGKILL
        locker.rollback()

    # What the crash left: the fold's cards and the archive mark, the old summary.
    summary = folder.summary(user_id=user_id, session_id="s1")
    assert summary == first
    crashed_at = marks.get(user_id, "s1")
    assert crashed_at > first.boundary_seq
    cards = {card.id: card.text for card in extracted(folder, user_id)}
    assert len(cards) == crashed_at  # one card per message, every one through the mark
    calls = len(mine(server, user_id))

    retried = folder.consolidate(user_id=user_id, session_id="s1")  # the retry

    assert retried is not None and retried.boundary_seq == crashed_at
    assert retried.kind == "llm"
    # One call, for the summary alone: every message it folds was extracted already.
    assert [kind(body) for body in mine(server, user_id)[calls:]] == ["summary"]
    assert {card.id: card.text for card in extracted(folder, user_id)} == cards
    assert marks.get(user_id, "s1") == retried.boundary_seq


def _wait_for_a_blocked_summary_write(database: Database) -> None:
    """Until a backend waits for a lock in the statement that stores a summary (bounded)."""
    deadline = time.monotonic() + WAIT_S
    query = text(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE wait_event_type = 'Lock' AND query ILIKE 'UPDATE session_summaries%'"
    )
    while time.monotonic() < deadline:
        with database.engine.connect() as connection:
            if connection.execute(query).scalar_one():
                return
        time.sleep(0.05)
    raise AssertionError("the child never reached the summary write")


def test_an_archive_written_by_prepare_is_upgraded_and_extracted_in_the_same_call(
    make_memory: Callable[..., Memory], server: FakeOpenAI, user_id: str
) -> None:
    mem = make_memory({**INLINE, "mode": "background"}, **SMALL)
    talk(mem, user_id, 0, 60)  # past the whole budget, and no worker has folded yet

    context = mem.prepare(user_id=user_id, session_id="s1", input="Next?")

    assert context.report.archived > 0  # the cap would have dropped them: archived raw now
    raw = mem.summary(user_id=user_id, session_id="s1")
    assert raw is not None and raw.kind == "raw"
    assert mine(server, user_id) == []

    mem.run_worker(until_idle=True)

    summary = mem.summary(user_id=user_id, session_id="s1")
    assert summary is not None and summary.kind == "llm"
    assert summary.boundary_seq >= raw.boundary_seq
    kinds = [kind(body) for body in mine(server, user_id)]
    assert kinds and set(kinds) == {"fold"}  # the upgrade extracted: no separate call
    offered = cited(mine(server, user_id))
    assert set(offered.values()) == {1} and sum(offered.values()) == summary.boundary_seq
    assert ArchiveMarks(mem._database).get(user_id, "s1") == summary.boundary_seq


@pytest.mark.slow
def test_messages_folded_before_long_term_memory_was_on_are_extracted_before_the_next_fold(
    make_memory: Callable[..., Memory], server: FakeOpenAI, user_id: str
) -> None:
    without_cards = make_memory(**SMALL, cards={"enabled": False})
    talk(without_cards, user_id, 0, 30)  # folded, never archived as cards
    first = without_cards.summary(user_id=user_id, session_id="s1")
    assert first is not None
    assert ArchiveMarks(without_cards._database).get(user_id, "s1") == 0
    before = len(mine(server, user_id))

    mem = make_memory(**SMALL)
    talk(mem, user_id, 30, 60)

    summary = mem.summary(user_id=user_id, session_id="s1")
    assert summary is not None and summary.boundary_seq > first.boundary_seq
    kinds = [kind(body) for body in mine(server, user_id)[before:]]
    assert kinds[0] == "extraction" and set(kinds[1:]) == {"fold"}
    offered = cited(mine(server, user_id)[before:])
    assert set(offered.values()) == {1}  # none twice
    assert sum(offered.values()) == summary.boundary_seq  # none skipped
    assert ArchiveMarks(mem._database).get(user_id, "s1") == summary.boundary_seq


def test_a_model_that_answers_json_prompts_in_prose_still_summarises_and_the_rules_extract(
    make_memory: Callable[..., Memory], server: FakeOpenAI, user_id: str
) -> None:
    # A model that ignores JSON mode and the prompt: it answers every request with notes.
    server.responder = lambda body: Reply("Notes with code words.")
    mem = make_memory(**SMALL)
    mem.record(
        user_id=user_id,
        session_id="s1",
        messages=[
            {"role": "user", "content": "My name is Ana and I live in Porto."},
            {"role": "assistant", "content": "Nice to meet you, Ana."},
        ],
    )
    talk(mem, user_id, 1, 30)

    summary = mem.summary(user_id=user_id, session_id="s1")
    assert summary is not None
    assert (summary.kind, summary.content) == ("llm", "Notes with code words.")
    kinds = [kind(body) for body in mine(server, user_id)]
    # The first fold: the JSON request once (prose is not asked again), then the summary
    # alone; the next folds ask for the summary alone.
    assert kinds == ["fold"] + ["summary"] * (len(kinds) - 1) and len(kinds) > 2
    assert set(cited(mine(server, user_id)).values()) == {1}  # nothing offered twice
    assert "User lives in Porto" in {card.text for card in extracted(mem, user_id)}
    assert ArchiveMarks(mem._database).get(user_id, "s1") == summary.boundary_seq


def test_messages_archived_soon_after_record_are_the_folds_context_never_extracted_twice(
    make_memory: Callable[..., Memory], server: FakeOpenAI, user_id: str
) -> None:
    mem = make_memory(
        {**INLINE, "mode": "background"},
        **SMALL,
        cards={"archive_promptly": True, "debounce_seconds": 0},
    )
    talk(mem, user_id, 0, 10)
    mem.run_worker(until_idle=True)
    talk(mem, user_id, 10, 30)
    mem.run_worker(until_idle=True)
    mem.end_session(user_id=user_id, session_id="s1")
    mem.run_worker(until_idle=True)

    summary = mem.summary(user_id=user_id, session_id="s1")
    assert summary is not None and summary.kind == "llm"
    kinds = [kind(body) for body in mine(server, user_id)]
    # The cards jobs extracted every message before its fold: each fold asked for the
    # summary alone, and read those messages unnumbered, as context.
    assert "summary" in kinds and "fold" not in kinds
    said = [text for index in range(30) for text in said_by(user_id, index)]
    offered = cited(mine(server, user_id))
    assert sorted(offered) == sorted(said)  # none skipped
    assert set(offered.values()) == {1}  # none twice
    assert sorted(card.text for card in extracted(mem, user_id)) == sorted(
        f"Said: {text}" for text in said
    )
    assert ArchiveMarks(mem._database).get(user_id, "s1") == 60

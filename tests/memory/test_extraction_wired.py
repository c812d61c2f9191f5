"""Card extraction wired into archiving: the real ``openai`` client against the local fake server.

One extraction call per archived range; a malformed reply is retried; when every attempt fails
or the model is down the rules extract instead, with an event; a Chinese conversation gives
Chinese cards as the model wrote them. Cards are embedded with the hashing fake (named as
MiniLM, the model the shared test database records).
"""

# ruff: noqa: RUF001
# (Chinese text is written with its own full-width punctuation, as users type it.)

from __future__ import annotations

import json
import logging
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from child_process import Spawn
from databases import own_database
from fake_openai import Behaviour, FakeOpenAI, Hang, Reply, Status

from memory import Memory, Settings
from memory.cards.prompts import EXTRACTION_INSTRUCTIONS
from memory.llm import OpenAIChatModel
from memory.longterm.summary_and_cards import FOLD_INSTRUCTIONS
from retrieval import MINILM_NAME, HashingEmbedder
from storage import (
    MAX_CARD_TAGS,
    MAX_CARD_TOPIC_CHARS,
    ArchiveMarks,
    Card,
    CardFilter,
    Database,
)

#: Attempts with the model before the rules take over (the first call and one retry).
RETRIES = 2
CHILD = Path(__file__).with_name("archive_child.py")
#: The most seconds to wait for the child's request (a bound, not a timing assumption).
WAIT_S = 120


def cards_json(*cards: dict[str, Any]) -> str:
    return json.dumps({"cards": list(cards)})


GOOD = cards_json(
    {"type": "profile", "text": "User's first name is Ana", "subject": "user",
     "attribute": "name", "source": [1]},
    {"type": "profile", "text": "User lives in Porto, Portugal", "subject": "user",
     "attribute": "city", "source": [1, 2]},
)  # fmt: skip


@pytest.fixture(scope="module")
def wired_database(database: Database) -> Iterator[Database]:
    with own_database(database, "wired") as opened:
        yield opened


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
def make_memory(wired_database: Database, server: FakeOpenAI) -> Callable[..., Memory]:
    def make(**summary: Any) -> Memory:
        settings = Settings(
            summary={
                "mode": "inline",
                "debounce_seconds": 0,
                "backoff_seconds": 0,
                "retries": RETRIES,
                "timeout": 10,
                **summary,
            }
        )
        return Memory(
            wired_database,
            settings,
            chat=OpenAIChatModel(base_url=server.base_url, api_key="test"),
            embedder=HashingEmbedder(name=MINILM_NAME),
        )

    return make


def talk(mem: Memory, user_id: str, user: str, assistant: str, session_id: str = "s1") -> None:
    mem.record(
        user_id=user_id,
        session_id=session_id,
        messages=[
            {"role": "user", "content": user, "id": f"{session_id}-u"},
            {"role": "assistant", "content": assistant, "id": f"{session_id}-a"},
        ],
    )


def extracted(mem: Memory, user_id: str) -> list[Card]:
    longterm = mem._parts.longterm
    assert longterm is not None
    cards = longterm.store.list_cards(user_id, CardFilter(include_superseded=True))
    return [card for card in cards if card.type != "turn"]


def test_the_models_cards_are_stored_with_their_sources_in_one_call(
    make_memory: Callable[..., Memory], server: FakeOpenAI, user_id: str
) -> None:
    mem = make_memory()
    server.script(Reply(GOOD))
    talk(mem, user_id, "My name is Ana and I live in Porto.", "Porto in Portugal? Lovely.")

    mem.end_session(user_id=user_id, session_id="s1")

    assert len(server.requests) == 1
    cards = {card.text: card for card in extracted(mem, user_id)}
    assert set(cards) == {"User's first name is Ana", "User lives in Porto, Portugal"}
    stored = mem.history(user_id=user_id, session_id="s1")
    porto = cards["User lives in Porto, Portugal"]
    assert porto.source_client_ids == ["s1-u", "s1-a"]
    assert porto.source_message_ids == [stored[0].id, stored[1].id]
    assert (porto.subject, porto.attribute) == ("user", "city")
    # The turns are archived too, and a second end of session calls nothing.
    assert mem.search(user_id=user_id, query="Porto", types=["turn"])
    mem.end_session(user_id=user_id, session_id="s1")
    assert len(server.requests) == 1


def test_a_malformed_reply_is_retried(
    make_memory: Callable[..., Memory], server: FakeOpenAI, user_id: str
) -> None:
    mem = make_memory()
    # JSON, but not the JSON asked for (prose is not asked again: tests/memory/test_json_mode.py).
    server.script(Reply('{"cards": [{"type": "name", "text": "Ana"}]}'), Reply(GOOD))
    talk(mem, user_id, "My name is Ana and I live in Porto.", "Hi Ana.")

    mem.end_session(user_id=user_id, session_id="s1")

    assert len(server.requests) == 2
    assert {c.text for c in extracted(mem, user_id)} == {
        "User's first name is Ana",
        "User lives in Porto, Portugal",
    }


def test_when_every_reply_is_malformed_the_rules_extract_with_an_event(
    make_memory: Callable[..., Memory],
    server: FakeOpenAI,
    user_id: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    mem = make_memory()
    server.responder = lambda body: Reply('{"cards": [{"type": "opinion"}]}')
    talk(mem, user_id, "My name is Ana and I live in Porto.", "Hi Ana.")

    with caplog.at_level(logging.INFO):
        mem.end_session(user_id=user_id, session_id="s1")

    assert len(server.requests) == RETRIES
    assert {c.text for c in extracted(mem, user_id)} == {
        "User's name is Ana",
        "User lives in Porto",
    }
    assert "card extraction by rules (llm_failed)" in caplog.text
    assert "card extraction retry" in caplog.text
    assert "malformed cards reply" in caplog.text


def test_when_the_model_is_down_the_rules_extract(
    make_memory: Callable[..., Memory],
    server: FakeOpenAI,
    user_id: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    mem = make_memory()
    server.responder = lambda body: Status(503, "overloaded")
    talk(mem, user_id, "Remind me to call the bank.", "Will do.")

    with caplog.at_level(logging.WARNING):
        mem.end_session(user_id=user_id, session_id="s1")

    assert [c.text for c in extracted(mem, user_id)] == ["To do: call the bank"]
    assert "llm_failed" in caplog.text
    # Nothing said was lost: the turns are stored and the archive mark moved.
    longterm = mem._parts.longterm
    assert longterm is not None
    turns = longterm.store.list_cards(user_id, CardFilter(types=("turn",)))
    assert {i for card in turns for i in card.source_client_ids} == {"s1-u", "s1-a"}
    mem.end_session(user_id=user_id, session_id="s1")
    assert len(server.requests) == RETRIES


def test_a_chinese_conversation_gives_chinese_cards_as_written(
    make_memory: Callable[..., Memory], server: FakeOpenAI, user_id: str
) -> None:
    mem = make_memory()
    server.script(
        Reply(
            cards_json(
                {
                    "type": "profile",
                    "text": "用户叫王芳",
                    "subject": "user",
                    "attribute": "name",
                    "source": [1],
                },
                {
                    "type": "profile",
                    "text": "用户住在上海",
                    "subject": "user",
                    "attribute": "city",
                    "source": [1],
                },
            )
        )
    )
    talk(mem, user_id, "你好，我叫王芳，我住在上海。", "你好王芳！")

    mem.end_session(user_id=user_id, session_id="s1")

    [request] = server.requests
    system, user = request["messages"]
    assert system["content"] == EXTRACTION_INSTRUCTIONS
    assert "Never translate names" in system["content"]
    assert "你好，我叫王芳，我住在上海。" in user["content"]
    assert {c.text for c in extracted(mem, user_id)} == {"用户叫王芳", "用户住在上海"}
    hits = mem.search(user_id=user_id, query="王芳", k=5, types=["profile"])
    assert hits and hits[0].card.text == "用户叫王芳"


def test_a_model_city_update_supersedes_the_old_city(
    make_memory: Callable[..., Memory], server: FakeOpenAI, user_id: str
) -> None:
    mem = make_memory()
    server.script(Reply(GOOD))
    talk(mem, user_id, "My name is Ana and I live in Porto.", "Hi Ana.", "s1")
    mem.end_session(user_id=user_id, session_id="s1")
    server.script(
        Reply(
            cards_json(
                {
                    "type": "profile",
                    "text": "User lives in Lisbon",
                    "subject": "User",
                    "attribute": "City",
                    "source": [1],
                },
            )
        )
    )
    talk(mem, user_id, "We moved to Lisbon last month.", "Nice!", "s2")
    mem.end_session(user_id=user_id, session_id="s2")

    cards = {card.text: card for card in extracted(mem, user_id)}
    assert cards["User lives in Porto, Portugal"].superseded_by == cards["User lives in Lisbon"].id
    assert cards["User lives in Lisbon"].valid_to is None
    assert cards["User's first name is Ana"].valid_to is None


def test_a_long_range_is_extracted_in_bounded_batches(
    make_memory: Callable[..., Memory], server: FakeOpenAI, user_id: str
) -> None:
    from memory.longterm.archiving import EXTRACTION_BATCH_MESSAGES

    mem = make_memory()
    server.responder = lambda body: Reply(cards_json())
    pairs = EXTRACTION_BATCH_MESSAGES  # twice as many messages as one batch holds
    for index in range(pairs):
        mem.record(
            user_id=user_id,
            session_id="s1",
            messages=[
                {"role": "user", "content": f"Point {index}."},
                {"role": "assistant", "content": "Ok."},
            ],
        )

    mem.end_session(user_id=user_id, session_id="s1")

    assert len(server.requests) == 2
    sizes = [r["messages"][1]["content"].count("\n[") for r in server.requests]
    assert sizes == [EXTRACTION_BATCH_MESSAGES, EXTRACTION_BATCH_MESSAGES]


def test_a_job_that_stored_cards_but_died_before_its_mark_adds_nothing_when_retried(
    make_memory: Callable[..., Memory], server: FakeOpenAI, user_id: str
) -> None:
    mem = make_memory(mode="background")
    server.responder = lambda body: Reply(GOOD)
    talk(mem, user_id, "My name is Ana and I live in Porto.", "Hi Ana.")
    longterm = mem._parts.longterm
    assert longterm is not None
    # What a worker killed between storing the cards and moving the archive mark had done:
    longterm.archiver.archive(user_id, "s1", 0, None)
    before = longterm.store.list_cards(user_id, CardFilter(include_superseded=True))

    mem.end_session(user_id=user_id, session_id="s1")  # queued again: the job's retry
    mem.run_worker(until_idle=True)

    after = longterm.store.list_cards(user_id, CardFilter(include_superseded=True))
    assert [(c.id, c.text, c.valid_to) for c in after] == [
        (c.id, c.text, c.valid_to) for c in before
    ]
    assert len([c for c in after if c.type != "turn"]) == 2
    assert len(server.requests) == 2  # extracted twice, stored once


@pytest.mark.slow
def test_a_process_killed_mid_extraction_is_retried_without_duplicates(
    make_memory: Callable[..., Memory],
    server: FakeOpenAI,
    spawn: Spawn,
    wired_database: Database,
    user_id: str,
) -> None:
    from memory.longterm.archiving import EXTRACTION_BATCH_MESSAGES

    marks = ArchiveMarks(wired_database)
    mem = make_memory()
    for index in range(EXTRACTION_BATCH_MESSAGES):  # two extraction batches
        mem.record(
            user_id=user_id,
            session_id="s1",
            messages=[
                {"role": "user", "content": f"Point {index}.", "id": f"u{index}"},
                {"role": "assistant", "content": "Ok.", "id": f"a{index}"},
            ],
        )

    def batch_reply(body: dict[str, Any]) -> Reply:
        first = "[1] " in body["messages"][1]["content"] and "Point 0." in str(body)
        text = "User made point zero first" if first else "User made point thirty last"
        return Reply(cards_json({"type": "fact", "text": text, "source": [1]}))

    arrived = threading.Event()

    def first_then_hang(body: dict[str, Any]) -> Behaviour:
        if "Point 0." in str(body):
            return batch_reply(body)
        arrived.set()
        return Hang()

    server.responder = first_then_hang
    child = spawn(CHILD, wired_database.url, server.base_url, user_id, "s1")
    assert arrived.wait(WAIT_S), "the child's second extraction request never arrived"
    assert child.kill() == -signal.SIGKILL
    server.release()

    longterm = mem._parts.longterm
    assert longterm is not None
    everything = CardFilter(include_superseded=True)
    partial = longterm.store.list_cards(user_id, everything)
    assert "User made point zero first" in {card.text for card in partial}
    assert "User made point thirty last" not in {card.text for card in partial}
    turns = [card.id for card in partial if card.type == "turn"]
    assert turns
    assert marks.get(user_id, "s1") == 0  # killed before the mark moved

    server.responder = batch_reply
    mem.end_session(user_id=user_id, session_id="s1")  # the retry

    after = longterm.store.list_cards(user_id, everything)
    texts = [card.text for card in after if card.type != "turn"]
    assert sorted(texts) == ["User made point thirty last", "User made point zero first"]
    assert [card.id for card in after if card.type == "turn"] == turns
    assert {card.id for card in partial} <= {card.id for card in after}
    assert marks.get(user_id, "s1") == 2 * EXTRACTION_BATCH_MESSAGES
    mem.end_session(user_id=user_id, session_id="s1")  # archived now: nothing more to do
    assert len(longterm.store.list_cards(user_id, everything)) == len(after)


@pytest.mark.slow
def test_a_process_killed_mid_archive_then_the_session_goes_on_gets_no_second_turn_card(
    make_memory: Callable[..., Memory],
    server: FakeOpenAI,
    spawn: Spawn,
    wired_database: Database,
    user_id: str,
) -> None:
    from memory.longterm.archiving import EXTRACTION_BATCH_MESSAGES

    mem = make_memory()
    for index in range(EXTRACTION_BATCH_MESSAGES):  # two extraction batches
        talk_pair = [
            {"role": "user", "content": f"Point {index}."},
            {"role": "assistant", "content": "Ok."},
        ]
        mem.record(user_id=user_id, session_id="s1", messages=talk_pair)
    arrived = threading.Event()

    def first_then_hang(body: dict[str, Any]) -> Behaviour:
        if "Point 0." in str(body):
            return Reply(cards_json())
        arrived.set()
        return Hang()

    server.responder = first_then_hang
    child = spawn(CHILD, wired_database.url, server.base_url, user_id, "s1")
    assert arrived.wait(WAIT_S), "the child's second extraction request never arrived"
    assert child.kill() == -signal.SIGKILL  # every turn card stored, the mark not moved
    server.release()
    longterm = mem._parts.longterm
    assert longterm is not None
    turns = CardFilter(types=("turn",), include_superseded=True)
    assert len(longterm.store.list_cards(user_id, turns)) == 2 * EXTRACTION_BATCH_MESSAGES
    # The conversation goes on: the last archived message has a neighbour now.
    talk(mem, user_id, "One more point.", "Noted.")

    server.responder = lambda body: Reply(cards_json())
    mem.end_session(user_id=user_id, session_id="s1")  # the retry

    stored = mem.history(user_id=user_id, session_id="s1")
    cards = longterm.store.list_cards(user_id, turns)
    assert len(cards) == len(stored) == 2 * EXTRACTION_BATCH_MESSAGES + 2
    assert sorted(card.turn_message_id for card in cards) == [m.id for m in stored]


@pytest.mark.slow
def test_a_runaway_reply_stores_at_most_its_cap_of_bounded_cards(
    make_memory: Callable[..., Memory], server: FakeOpenAI, user_id: str
) -> None:
    from memory.cards.caps import MAX_CARDS_PER_REPLY

    runaway = [
        {"type": "fact", "text": f"User keeps fact number {index}", "topic": "t" * 1_000_000,
         "tags": ["x" * 1_000] * 100, "source": [1]}
        for index in range(300)
    ]  # fmt: skip
    server.script(Reply(cards_json(*runaway)))
    # A 300 MB reply: sending and parsing it takes seconds, more on a loaded machine; the cap,
    # not the client's patience, is under test.
    mem = make_memory(timeout=600)
    talk(mem, user_id, "Here are my facts.", "Noted.")

    mem.end_session(user_id=user_id, session_id="s1")

    cards = extracted(mem, user_id)
    assert len(cards) == MAX_CARDS_PER_REPLY
    assert {card.topic for card in cards} == {"t" * MAX_CARD_TOPIC_CHARS}
    assert all(len(card.tags) == MAX_CARD_TAGS for card in cards)
    assert len(server.requests) == 1  # the reply was used, not retried


def test_each_fold_summarises_and_extracts_in_one_call_never_per_message(
    wired_database: Database, server: FakeOpenAI, user_id: str
) -> None:
    def respond(body: dict[str, Any]) -> Reply:
        assert body["messages"][0]["content"].startswith(FOLD_INSTRUCTIONS[:40])
        return Reply(json.dumps({"summary": "Notes with code words.", "cards": []}))

    server.responder = respond
    mem = Memory(
        wired_database,
        Settings(
            context_window=1_500,
            max_output=300,
            summary={"mode": "inline", "debounce_seconds": 0, "backoff_seconds": 0},
        ),
        chat=OpenAIChatModel(base_url=server.base_url, api_key="test"),
        embedder=HashingEmbedder(name=MINILM_NAME),
    )
    for index in range(30):
        mem.record(
            user_id=user_id,
            session_id="s1",
            messages=[
                {"role": "user", "content": f"Note {index}: the code word is zebra{index}."},
                {"role": "assistant", "content": f"Noted zebra{index}."},
            ],
        )
        mem.prepare(user_id=user_id, session_id="s1", input="Next?")

    summary = mem.summary(user_id=user_id, session_id="s1")
    assert summary is not None and summary.kind == "llm"
    # One call per fold for the summary and the cards: no extraction-only call at all.
    assert 1 <= len(server.requests) < 60 // 10
    numbered = sum(r["messages"][1]["content"].count("\n[") for r in server.requests)
    assert numbered == summary.boundary_seq  # every folded message once, in one call per fold
    marks = ArchiveMarks(wired_database)
    assert marks.get(user_id, "s1") == summary.boundary_seq

"""``prepare``'s recall: the chat model rewrites what the rules cannot, only within a deadline that
is off by default (``prepare`` never waits for an LLM), and names of times boost.

Real embedded Postgres, the real ``openai`` client against the local fake server; cards are
embedded with the hashing fake (named as MiniLM, the model the shared test database records),
so the keyword ranking decides and the tests stay fast.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from fake_openai import FakeOpenAI, Hang, Malformed, Reply, Status

from memory import Memory, Settings
from memory.llm import OpenAIChatModel
from retrieval import MINILM_NAME, HashingEmbedder
from storage import Database


@pytest.fixture(scope="module")
def recall_database(database_url: str) -> Iterator[Database]:
    """This module's own handle on the shared database."""
    with Database.open(database_url) as opened:
        yield opened


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
def make_memory(recall_database: Database) -> Callable[..., Memory]:
    """A ``Memory`` in inline mode with the hashing embedder, with the chat model given."""

    def make(base_url: str | None = None, **settings: Any) -> Memory:
        # No relevance gate: these tests are about which query is searched, and the hashing
        # fake's cosine is no measure of relevance (the gate has tests of its own).
        cards = {"min_score": -1.0, **settings.pop("cards", {})}
        values = {"summary": {"mode": "inline", "debounce_seconds": 0}, "cards": cards, **settings}
        chat = OpenAIChatModel(base_url=base_url, api_key="test") if base_url else None
        return Memory(
            recall_database,
            Settings(**values),
            chat=chat,
            embedder=HashingEmbedder(name=MINILM_NAME),
        )

    return make


OLD_SESSION = [
    ("Our MySQL replica lags behind at night.", "Noted, I will keep it in mind."),
    ("I bake bread on Sundays.", "Sounds delicious."),
    ("My sister lives in Lisbon.", "Lovely city."),
    ("The cat is called Miso.", "Cute name."),
    ("We water the garden every evening.", "Good habit."),
]
COMPARED = [("We compared PostgreSQL and MySQL today.", "Both work for us.")]


def record(mem: Memory, user_id: str, session_id: str, pairs: list[tuple[str, str]]) -> None:
    mem.record(
        user_id=user_id,
        session_id=session_id,
        messages=[
            message
            for index, (question, answer) in enumerate(pairs)
            for message in (
                {"role": "user", "content": question, "id": f"{session_id}-u{index}"},
                {"role": "assistant", "content": answer, "id": f"{session_id}-a{index}"},
            )
        ],
    )


@pytest.fixture
def remembered(make_memory: Callable[..., Memory], user_id: str) -> str:
    """A user with an archived old session (stored offline: no model call) and a new one."""
    offline = make_memory()
    record(offline, user_id, "old", OLD_SESSION)
    offline.end_session(user_id=user_id, session_id="old")
    record(offline, user_id, "new", COMPARED)
    return user_id


def memories(context: Any) -> str:
    first = context.messages[0]
    return str(first["content"]) if first["role"] == "system" else ""


def test_rules_that_decide_ask_no_model(
    make_memory: Callable[..., Memory], remembered: str, server: FakeOpenAI
) -> None:
    mem = make_memory(server.base_url)

    context = mem.prepare(user_id=remembered, session_id="new", input="Is MySQL fast?")

    assert server.requests == []
    recall = context.report.recall
    assert recall is not None and (recall.query, recall.method) == ("Is MySQL fast?", "rules")


#: A deadline no answer of the local fake server comes close to, for tests of what the model's
#: rewrite does (not of the deadline).
GENEROUS_MS = 20_000


def test_by_default_prepare_never_asks_the_model_to_rewrite(
    make_memory: Callable[..., Memory], remembered: str, server: FakeOpenAI
) -> None:
    # A model that would sleep until released (30 s at most): prepare must not wait for it.
    server.script(Hang('{"query": "Is MySQL faster than PostgreSQL?"}'))
    mem = make_memory(server.base_url)
    try:
        context = mem.prepare(user_id=remembered, session_id="new", input="is it faster?")
        asked = server.requests
    finally:
        server.release()

    recall = context.report.recall
    assert recall is not None and (recall.query, recall.method) == ("is it faster?", "original")
    assert asked == []
    assert recall.cards  # recall itself went on, with the input as written


def test_with_the_default_settings_prepare_asks_no_model_at_all(
    recall_database: Database, remembered: str, server: FakeOpenAI
) -> None:
    # Background mode (the default), a window past the fold trigger and past the budget, an
    # input the rules cannot resolve, a model that would sleep: nothing asks it.
    server.script(*[Hang('{"query": "never asked"}')] * 3)
    mem = Memory(
        recall_database,
        Settings(context_window=1_500, max_output=300),
        chat=OpenAIChatModel(base_url=server.base_url, api_key="test"),
        embedder=HashingEmbedder(name=MINILM_NAME),
    )
    record(mem, remembered, "long", OLD_SESSION * 20 + COMPARED)
    try:
        context = mem.prepare(user_id=remembered, session_id="long", input="is it faster?")
        asked = server.requests
    finally:
        server.release()

    assert asked == []
    assert context.report.archived > 0  # the cap's raw archive: written without a model
    recall = context.report.recall
    assert recall is not None and recall.method == "original"


def test_with_a_deadline_prepare_abandons_a_model_that_sleeps(
    make_memory: Callable[..., Memory], remembered: str, server: FakeOpenAI
) -> None:
    server.script(Hang('{"query": "Is MySQL faster than PostgreSQL?"}'))
    mem = make_memory(server.base_url, cards={"rewrite_deadline_ms": 200})
    try:
        # Returns while the model would still hold the request (released only below): the
        # wait is the deadline's (the call's own client timeout is the same 200 ms; that the
        # call is abandoned at the deadline whatever the client does is test_rewrite.py's).
        context = mem.prepare(user_id=remembered, session_id="new", input="is it faster?")
    finally:
        server.release()

    recall = context.report.recall
    assert recall is not None and (recall.query, recall.method) == ("is it faster?", "original")
    assert context.messages[-1] == {"role": "user", "content": "is it faster?"}
    # The late answer is dropped; the next request asks again and uses a timely answer.
    server.script(Reply('{"query": "Is MySQL faster than PostgreSQL?"}'))
    mem = make_memory(server.base_url, cards={"rewrite_deadline_ms": GENEROUS_MS})
    again = mem.prepare(user_id=remembered, session_id="new", input="is it faster?")
    assert again.report.recall is not None and again.report.recall.method == "llm"


def test_the_model_rewrites_what_the_rules_cannot_for_retrieval_only(
    make_memory: Callable[..., Memory], remembered: str, server: FakeOpenAI
) -> None:
    server.script(Reply('{"query": "Is MySQL faster than PostgreSQL?"}'))
    mem = make_memory(server.base_url, cards={"k": 1, "rewrite_deadline_ms": GENEROUS_MS})

    context = mem.prepare(user_id=remembered, session_id="new", input="is it faster?")

    recall = context.report.recall
    assert recall is not None
    assert (recall.query, recall.method) == ("Is MySQL faster than PostgreSQL?", "llm")
    # The rewrite found the old MySQL turn; the user's message is sent as written.
    assert "MySQL replica" in memories(context)
    assert context.messages[-1] == {"role": "user", "content": "is it faster?"}
    [request] = server.requests
    assert "We compared PostgreSQL and MySQL today." in request["messages"][1]["content"]
    assert request["temperature"] == 0.0


@pytest.mark.parametrize(
    "failure",
    [Reply("MySQL is faster, obviously."), Reply('{"q": 1}'), Malformed(), Status(503)],
)
def test_a_bad_rewrite_keeps_the_input_after_one_attempt(
    make_memory: Callable[..., Memory],
    remembered: str,
    server: FakeOpenAI,
    failure: Reply | Malformed | Status,
) -> None:
    server.script(failure, Reply('{"query": "never asked twice"}'))
    mem = make_memory(
        server.base_url,
        summary={"mode": "inline", "retries": 3},
        cards={"rewrite_deadline_ms": GENEROUS_MS},
    )

    context = mem.prepare(user_id=remembered, session_id="new", input="is it faster?")

    recall = context.report.recall
    assert recall is not None and not recall.failed
    assert (recall.query, recall.method) == ("is it faster?", "original")
    assert len(server.requests) == 1
    assert context.messages[-1] == {"role": "user", "content": "is it faster?"}
    # Nothing stored is lost: the input is kept and the old cards are still recalled.
    stored = mem.history(user_id=remembered, session_id="new")
    assert stored[-1].payload["content"] == "is it faster?"
    assert recall.cards


def test_a_model_that_is_down_keeps_the_input(
    make_memory: Callable[..., Memory], remembered: str
) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    mem = make_memory(f"http://127.0.0.1:{port}/v1", cards={"rewrite_deadline_ms": GENEROUS_MS})

    context = mem.prepare(user_id=remembered, session_id="new", input="is it faster?")

    recall = context.report.recall
    assert recall is not None and not recall.failed
    assert (recall.query, recall.method) == ("is it faster?", "original")
    assert context.messages[-1] == {"role": "user", "content": "is it faster?"}


def test_a_time_in_the_input_boosts_the_cards_of_that_time(
    make_memory: Callable[..., Memory], user_id: str
) -> None:
    mem = make_memory(cards={"k": 1})
    paintings = [
        (datetime(2023, 5, 8, tzinfo=UTC), "I painted the lake at sunrise."),
        (datetime(2023, 8, 14, tzinfo=UTC), "I painted the lake at sunset."),
    ]
    for day, text in paintings:
        session = f"s{day.month}"
        mem.record(
            user_id=user_id,
            session_id=session,
            messages=[{"role": "user", "content": text, "timestamp": day.isoformat()}],
        )
        mem.end_session(user_id=user_id, session_id=session)

    def recalled(question: str, asked: datetime) -> str:
        message = {"role": "user", "content": question, "timestamp": asked.isoformat()}
        session = f"asked-{asked.month}"
        return memories(mem.prepare(user_id=user_id, session_id=session, input=message))

    # "yesterday" counts from when it was asked; no word of the question is in either card.
    assert "sunrise" in recalled("What did I paint yesterday?", datetime(2023, 5, 9, tzinfo=UTC))
    assert "sunset" in recalled("What did I paint yesterday?", datetime(2023, 8, 15, tzinfo=UTC))
    found = mem.search(user_id=user_id, query="What did I paint in August 2023?", k=2)
    assert "sunset" in found[0].card.text and len(found) == 2

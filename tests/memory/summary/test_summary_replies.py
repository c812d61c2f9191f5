"""Bad summariser replies never replace a summary, and nothing a model says crashes ``prepare``.

Through the real ``openai`` client at the local fake server; ``prepare`` on the real Postgres.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fake_openai import FakeOpenAI, Reply
from summary_child import settings

from memory import Memory
from memory.context.messages import parse_messages
from memory.context.tokens import TiktokenCounter
from memory.llm import OpenAIChatModel
from memory.settings import SummarySettings
from memory.summary.summarizer import PreviousSummary, Summarizer
from storage import Database

COUNTER = TiktokenCounter("gpt-4o-mini")
REFUSAL = "I'm sorry, but I can't help with that."
PREVIOUS = PreviousSummary("Order #4471 for Anna: 2 chairs, 240 EUR, to Porto on 2025-06-01.")
FOLD = parse_messages(
    [
        {"role": "user", "content": "Please add a lamp to the order."},
        {"role": "assistant", "content": "Added a lamp, 35 EUR."},
    ]
)
GOOD = "Order #4471 for Anna: 2 chairs and a lamp, 275 EUR, to Porto on 2025-06-01."


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


def summariser(server: FakeOpenAI, **overrides: Any) -> Summarizer:
    values: dict[str, Any] = {"model": "primary", "timeout": 5.0, "backoff_seconds": 0.0}
    return Summarizer(
        OpenAIChatModel(base_url=server.base_url, api_key="test"),
        COUNTER,
        SummarySettings(**(values | overrides)),
        sleep=lambda seconds: None,
    )


def test_a_refusal_is_retried_and_never_stored(server: FakeOpenAI) -> None:
    server.script(Reply(REFUSAL), Reply(GOOD))

    result = summariser(server).summarise(PREVIOUS, FOLD)

    assert (result.text, result.kind, result.attempts) == (GOOD, "llm", 2)


def test_refusals_from_every_model_keep_the_old_summary_and_archive_the_increment(
    server: FakeOpenAI,
) -> None:
    server.script(*[Reply(REFUSAL)] * 4)

    result = summariser(server, retries=2, fallback_model="backup", fallback_retries=2).summarise(
        PREVIOUS, FOLD
    )

    assert [body["model"] for body in server.requests] == ["primary"] * 2 + ["backup"] * 2
    assert (result.kind, result.degraded) == ("raw", True)
    assert result.text == (
        f"{PREVIOUS.text}\n\n[raw archive; summariser tries: 1]\n"
        "user: Please add a lamp to the order.\nassistant: Added a lamp, 35 EUR."
    )


def test_a_reply_that_forgets_the_order_number_is_a_failed_attempt(server: FakeOpenAI) -> None:
    server.script(Reply("The user wants a lamp added to some chairs."), Reply(GOOD))

    result = summariser(server).summarise(PREVIOUS, FOLD)

    assert (result.text, result.attempts) == (GOOD, 2)
    assert "#4471" in result.text


def test_a_reply_that_is_a_copy_of_the_transcript_is_a_failed_attempt(server: FakeOpenAI) -> None:
    server.script(Reply("user: Please add a lamp.\nassistant: Added a lamp."), Reply(GOOD))

    assert summariser(server).summarise(PREVIOUS, FOLD).attempts == 2


@pytest.mark.parametrize(
    ("reply", "stored"),
    [
        ("Order #4471\x00 for Anna, to Porto.", "Order #4471\u2400 for Anna, to Porto."),
        ("Order #4471 for Anna \ud800, to Porto.", "Order #4471 for Anna \ufffd, to Porto."),
    ],
)
def test_nul_and_lone_surrogates_in_a_reply_are_made_storable(
    server: FakeOpenAI, reply: str, stored: str
) -> None:
    server.script(Reply(reply))

    result = summariser(server).summarise(None, FOLD)

    assert result.text == stored
    result.text.encode("utf-8")


# --- through prepare, on Postgres ----------------------------------------------------------


def fill(memory: Memory, user_id: str, session_id: str, turns: int) -> None:
    for turn in range(turns):
        memory.record(
            user_id=user_id,
            session_id=session_id,
            messages=[
                {"role": "user", "content": f"turn {turn}: the order #4471 for Anna, more notes."},
                {"role": "assistant", "content": f"answer {turn}: noted, shipping to Porto."},
            ],
        )


@pytest.mark.parametrize(
    "reply",
    [
        "Order #4471 for Anna\x00, shipping to Porto.",
        "Order #4471 for Anna \udc80, shipping to Porto.",
        REFUSAL,
    ],
)
@pytest.mark.slow
def test_prepare_inline_survives_any_reply_and_keeps_the_order_number(
    database: Database, server: FakeOpenAI, user_id: str, session_id: str, reply: str
) -> None:
    server.responder = lambda body: Reply(reply)
    memory = Memory(
        database,
        settings(server.base_url, summary_mode="inline", summary_retries=1),
        chat=OpenAIChatModel(base_url=server.base_url, api_key="test"),
    )
    fill(memory, user_id, session_id, 60)

    context = memory.prepare(user_id=user_id, session_id=session_id, input="where is my order?")

    summary = memory.summary(user_id=user_id, session_id=session_id)
    assert summary is not None and server.requests
    assert "\x00" not in summary.content
    summary.content.encode("utf-8")
    assert "#4471" in summary.content
    assert summary.kind == ("raw" if reply == REFUSAL else "llm")
    assert REFUSAL not in summary.content
    assert context.messages[-1]["content"] == "where is my order?"

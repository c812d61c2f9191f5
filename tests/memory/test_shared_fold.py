"""The fold's shared call: one request for the summary and the cards, each part checked alone.

The real ``openai`` client against the local fake server: scripted replies, malformed replies,
errors. What happens when only one part of a reply is good is decided here: the good part of
any attempt is kept, the chain retries for the other, and when it gives up only the other part
degrades (summary: previous summary plus the raw archive; cards: the rules, with an event).
"""

# ruff: noqa: RUF001
# (Chinese text is written with its own full-width punctuation, as users type it.)

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from fake_openai import FakeOpenAI, Malformed, Reply, Status

from memory.cards import CardExtractor, ExtractionEvent, RulesFallback, SourceMessage
from memory.cards.prompts import CARD_JSON_SCHEMA
from memory.context.messages import Message, parse_messages
from memory.context.tokens import TiktokenCounter
from memory.llm import OpenAIChatModel
from memory.longterm.summary_and_cards import (
    FOLD_FORMAT,
    FOLD_INSTRUCTIONS,
    PROSE_PAUSE_FOLDS,
    FoldLine,
    SharedFold,
)
from memory.settings import SummarySettings
from memory.summary.summarizer import PreviousSummary, Summarizer, SummaryEvent
from memory.summary.transcript import INSTRUCTIONS

COUNTER = TiktokenCounter("gpt-4o-mini")
MONDAY = datetime(2023, 5, 8, 9, tzinfo=UTC)
TUESDAY = datetime(2023, 5, 9, 9, tzinfo=UTC)
RETRIES = 2

MESSAGES = parse_messages(
    [
        {"role": "user", "content": "My name is Ana. I live in Porto and I hate cilantro."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "search_flights", "arguments": '{"to": "LIS"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "TP1234 departs 08:10, 240 EUR"},
        {"role": "assistant", "content": "TP1234 leaves at 08:10 for 240 EUR."},
        {"role": "user", "content": "Remind me to book it tomorrow."},
    ]
)
#: Which lines a card may cite: the user's and the assistant's words, not the call or result.
TIMES = [MONDAY, MONDAY, MONDAY, MONDAY, TUESDAY]


def lines(messages: list[Message] = MESSAGES, cite: bool = True) -> list[FoldLine]:
    out = []
    for index, (message, time) in enumerate(zip(messages, TIMES, strict=True)):
        source = None
        if cite and message.role in ("user", "assistant") and message.text:
            source = SourceMessage(message.role, message.text, time, 100 + index, f"id-{index}")
        out.append(FoldLine(message, source, time.date()))
    return out


SUMMARY = "Ana, Porto, hates cilantro. Flight TP1234 08:10, 240 EUR. To book tomorrow."
CARDS = [
    {"type": "profile", "text": "User's name is Ana", "subject": "user", "attribute": "name",
     "source": [1]},
    {"type": "task", "text": "To do: book flight TP1234", "occurred_at": "2023-05-10",
     "subject": "user", "attribute": "task", "source": [2, 3]},
]  # fmt: skip


def reply(summary: object = SUMMARY, cards: object = CARDS) -> Reply:
    return Reply(json.dumps({"summary": summary, "cards": cards}))


class Events:
    def __init__(self) -> None:
        self.summary: list[SummaryEvent] = []
        self.cards: list[ExtractionEvent | RulesFallback] = []


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
def events() -> Events:
    return Events()


def shared(server: FakeOpenAI | None, events: Events, **settings: Any) -> SharedFold:
    chat = None if server is None else OpenAIChatModel(base_url=server.base_url, api_key="test")
    chosen = SummarySettings(
        **({"model": "primary", "timeout": 5.0, "retries": RETRIES} | settings)
    )
    summarizer = Summarizer(chat, COUNTER, chosen, sleep=lambda _: None)
    extractor = CardExtractor(chat, chosen, sleep=lambda _: None, on_event=events.cards.append)
    return SharedFold(summarizer, extractor, sleep=lambda _: None, on_event=events.summary.append)


def test_one_call_writes_the_summary_and_extracts_the_cards(
    server: FakeOpenAI, events: Events
) -> None:
    server.script(reply())

    result = shared(server, events).fold(None, lines())

    assert len(server.requests) == 1
    assert (result.summary.text, result.summary.kind, result.summary.degraded) == (
        SUMMARY,
        "llm",
        False,
    )
    assert result.summary.attempts == 1 and result.summary.tokens_in > 0
    assert result.extraction.method == "llm" and result.extraction.calls == 0  # counted once
    name, task = result.extraction.cards
    assert (name.text, name.source_indices, name.source_ids) == (
        "User's name is Ana",
        (100,),
        ("id-0",),
    )
    # [2] and [3] are the assistant's answer and the user's reminder: positions 3 and 4.
    assert task.source_indices == (103, 104)
    assert task.occurred_at == datetime(2023, 5, 10, tzinfo=UTC)
    assert [event.kind for event in events.summary] == ["attempt", "success"]


def test_the_request_numbers_only_the_lines_a_card_may_cite_and_dates_them_once(
    server: FakeOpenAI, events: Events
) -> None:
    server.script(reply())

    shared(server, events).fold(PreviousSummary("Earlier: Ana asked about Lisbon."), lines())

    system, user = server.requests[0]["messages"]
    assert system["content"] == FOLD_INSTRUCTIONS.replace("{limit}", str(_limit()))
    for asked in ("preferences", "decisions", "Never translate names", "absolute", "JSON"):
        assert asked in system["content"]
    assert user["content"].splitlines() == [
        "Current summary:",
        "Earlier: Ana asked about Lisbon.",
        "",
        "New messages:",
        "-- 2023-05-08",
        "[1] user: My name is Ana. I live in Porto and I hate cilantro.",
        'assistant: [calls search_flights({"to":"LIS"})]',  # JSON sent compact
        "tool search_flights: TP1234 departs 08:10, 240 EUR",
        "[2] assistant: TP1234 leaves at 08:10 for 240 EUR.",
        "-- 2023-05-09",
        "[3] user: Remind me to book it tomorrow.",
    ]


def _limit() -> int:
    summarizer = Summarizer(None, COUNTER, SummarySettings())
    return summarizer.token_limit(PreviousSummary("Earlier: Ana asked about Lisbon."), MESSAGES)


def test_a_broken_json_reply_is_retried(server: FakeOpenAI, events: Events) -> None:
    server.script(Reply('{"summary": "Ana lives in Por'), reply())

    result = shared(server, events).fold(None, lines())

    assert len(server.requests) == 2
    assert result.summary.kind == "llm" and result.summary.attempts == 2
    assert len(result.extraction.cards) == 2
    assert [event.kind for event in events.summary] == ["attempt", "retry", "attempt", "success"]


def test_the_request_asks_for_the_fold_schema_in_json_mode(
    server: FakeOpenAI, events: Events
) -> None:
    server.script(reply())

    shared(server, events).fold(None, lines())

    response_format = server.requests[0]["response_format"]
    assert response_format == {
        "type": "json_schema",
        "json_schema": {"name": "fold", "schema": FOLD_FORMAT.schema, "strict": True},
    }
    schema = response_format["json_schema"]["schema"]
    assert schema["required"] == ["summary", "cards"]
    assert schema["properties"]["cards"]["items"] == CARD_JSON_SCHEMA


def test_a_model_answering_in_prose_gets_the_summary_request_and_the_rules_extract(
    server: FakeOpenAI, events: Events
) -> None:
    # A model that ignores JSON mode and the prompt: every reply is plain notes.
    server.responder = lambda body: Reply(SUMMARY)
    previous = PreviousSummary("Earlier: Ana asked about Lisbon.")

    result = shared(server, events).fold(previous, lines())

    fold, alone = server.requests
    assert fold["messages"][0]["content"].startswith(FOLD_INSTRUCTIONS[:40])  # not asked again
    assert alone["messages"][0]["content"].startswith(INSTRUCTIONS[:40])
    assert "response_format" not in alone
    # The summary is the model's, not a raw archive: it was fine on its own.
    assert (result.summary.text, result.summary.kind, result.summary.degraded) == (
        SUMMARY,
        "llm",
        False,
    )
    assert result.summary.attempts == 2
    assert result.extraction.method == "rules" and result.extraction.degraded
    assert {"User's name is Ana", "User lives in Porto"} <= {
        card.text for card in result.extraction.cards
    }
    [fallback] = [e for e in events.cards if isinstance(e, RulesFallback)]
    assert fallback.reason == "llm_failed" and "not JSON" in str(fallback.error)
    assert [event.kind for event in events.summary] == ["attempt", "degrade"]


def test_the_next_folds_ask_a_model_that_answered_in_prose_for_the_summary_alone(
    server: FakeOpenAI, events: Events
) -> None:
    server.responder = lambda body: Reply(SUMMARY)
    fold = shared(server, events)

    results = [fold.fold(None, lines()) for _ in range(PROSE_PAUSE_FOLDS + 2)]

    kinds = [
        "fold" if body["messages"][0]["content"].startswith(FOLD_INSTRUCTIONS[:40]) else "alone"
        for body in server.requests
    ]
    # Then JSON is tried again: the model (or the endpoint) may have changed.
    assert kinds == ["fold"] + ["alone"] * (PROSE_PAUSE_FOLDS + 1) + ["fold", "alone"]
    assert {(r.summary.kind, r.extraction.method) for r in results} == {("llm", "rules")}
    fallbacks = [e for e in events.cards if isinstance(e, RulesFallback)]
    assert len(fallbacks) == len(results) and "in prose" in str(fallbacks[1].error)


def test_a_prose_reply_whose_summary_request_fails_too_archives_the_increment(
    server: FakeOpenAI, events: Events
) -> None:
    server.responder = lambda body: Reply("I'm sorry, but I can't help with that.")

    result = shared(server, events).fold(None, lines())

    assert len(server.requests) == 1 + RETRIES  # the fold once, the summary request retried
    assert result.summary.kind == "raw" and result.summary.degraded
    assert "user: Remind me to book it tomorrow." in result.summary.text
    assert result.extraction.method == "rules"


def test_a_good_summary_with_malformed_cards_keeps_the_summary_and_the_rules_extract(
    server: FakeOpenAI, events: Events
) -> None:
    # Every attempt: a good summary, cards of a type that does not exist.
    server.responder = lambda body: reply(cards=[{"type": "opinion", "text": "x", "source": [1]}])

    result = shared(server, events).fold(None, lines())

    assert len(server.requests) == RETRIES  # the chain retried for the cards
    assert (result.summary.text, result.summary.kind, result.summary.degraded) == (
        SUMMARY,
        "llm",
        False,
    )
    assert result.extraction.method == "rules" and result.extraction.degraded
    texts = {card.text for card in result.extraction.cards}
    assert {"User's name is Ana", "User lives in Porto"} <= texts
    [fallback] = [e for e in events.cards if isinstance(e, RulesFallback)]
    assert fallback.reason == "llm_failed" and "malformed cards reply" in str(fallback.error)


def test_good_cards_with_a_refused_summary_keep_the_cards_and_archive_the_increment(
    server: FakeOpenAI, events: Events
) -> None:
    server.responder = lambda body: reply(summary="I'm sorry, but I can't help with that.")
    previous = PreviousSummary("Earlier: Ana asked about Lisbon.")

    result = shared(server, events).fold(previous, lines())

    assert len(server.requests) == RETRIES
    assert result.summary.kind == "raw" and result.summary.degraded
    # Nothing lost: the previous summary is kept whole, the increment archived after it.
    assert result.summary.text.startswith("Earlier: Ana asked about Lisbon.\n")
    assert "tool search_flights: TP1234 departs 08:10, 240 EUR" in result.summary.text
    assert result.extraction.method == "llm" and not result.extraction.degraded
    assert {card.text for card in result.extraction.cards} == {
        "User's name is Ana",
        "To do: book flight TP1234",
    }
    assert not [e for e in events.cards if isinstance(e, RulesFallback)]


def test_good_parts_of_different_attempts_are_put_together(
    server: FakeOpenAI, events: Events
) -> None:
    server.script(reply(cards="none"), reply(summary={"notes": SUMMARY}))

    result = shared(server, events).fold(None, lines())

    assert len(server.requests) == RETRIES
    assert result.summary.text == SUMMARY and result.summary.kind == "llm"
    assert len(result.extraction.cards) == 2 and result.extraction.method == "llm"


def test_a_card_citing_a_line_that_is_not_numbered_is_a_failed_attempt(
    server: FakeOpenAI, events: Events
) -> None:
    bad = [{"type": "fact", "text": "Flight TP1234 costs 240 EUR", "source": [5]}]
    server.script(reply(cards=bad), reply())

    result = shared(server, events).fold(None, lines())

    assert len(server.requests) == 2
    assert len(result.extraction.cards) == 2


def test_when_the_model_is_down_the_summary_is_archived_and_the_rules_extract(
    server: FakeOpenAI, events: Events
) -> None:
    server.responder = lambda body: Status(503, "overloaded")

    result = shared(server, events).fold(None, lines())

    assert len(server.requests) == RETRIES
    assert result.summary.kind == "raw" and result.summary.degraded
    assert "user: Remind me to book it tomorrow." in result.summary.text
    assert result.extraction.method == "rules" and result.extraction.degraded
    assert "To do: book it on 2023-05-10" in {card.text for card in result.extraction.cards}


def test_the_fallback_model_answers_when_the_first_fails(
    server: FakeOpenAI, events: Events
) -> None:
    server.script(Malformed(), Status(500), reply())

    result = shared(server, events, fallback_model="backup", fallback_retries=1).fold(None, lines())

    assert [body["model"] for body in server.requests] == ["primary", "primary", "backup"]
    assert result.summary.model == "backup" and result.extraction.model == "backup"


def test_a_fold_with_no_line_to_cite_asks_for_the_summary_alone(
    server: FakeOpenAI, events: Events
) -> None:
    server.script(Reply(SUMMARY))

    result = shared(server, events).fold(None, lines(cite=False))

    [request] = server.requests
    assert request["messages"][0]["content"] == INSTRUCTIONS.format(
        limit=request["messages"][0]["content"].split("at most ")[1].split(" ")[0]
    )
    assert result.summary.text == SUMMARY and result.extraction.cards == ()


def test_offline_the_summary_is_an_archive_and_the_rules_extract(events: Events) -> None:
    result = shared(None, events).fold(None, lines())

    assert result.summary.kind == "raw" and not result.summary.degraded
    assert result.extraction.method == "rules" and not result.extraction.degraded
    assert "User's name is Ana" in {card.text for card in result.extraction.cards}


def test_chinese_lines_are_sent_as_written(server: FakeOpenAI, events: Events) -> None:
    chinese = parse_messages([{"role": "user", "content": "你好，我叫王芳，我住在上海。"}])
    line = FoldLine(chinese[0], SourceMessage("user", chinese[0].text, MONDAY, 7), MONDAY.date())
    cards = [{"type": "profile", "text": "用户叫王芳", "subject": "user", "attribute": "name",
              "source": [1]}]  # fmt: skip
    server.script(reply(summary="王芳住在上海。", cards=cards))

    result = shared(server, events).fold(None, [line])

    assert "[1] user: 你好，我叫王芳，我住在上海。" in server.requests[0]["messages"][1]["content"]
    assert [card.text for card in result.extraction.cards] == ["用户叫王芳"]
    assert result.summary.text == "王芳住在上海。"


def test_an_empty_fold_is_refused(events: Events) -> None:
    with pytest.raises(ValueError, match="at least one message"):
        shared(None, events).fold(None, [])

"""Card extraction through the real ``openai`` client against the local fake server.

One call per batch; malformed replies are failed attempts, retried, then the fallback model,
then the rules with an event; never an exception.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, date, datetime
from typing import Any, get_args

import pytest
from fake_openai import FakeOpenAI, Malformed, Reply, Status

from memory.cards.caps import MAX_CARDS_PER_REPLY
from memory.cards.extract import (
    CardExtractor,
    ExtractionEvent,
    ReplyCard,
    RulesFallback,
    drafts_from_reply,
    parse_reply,
)
from memory.cards.model import SourceMessage
from memory.cards.prompts import EXTRACTION_FORMAT
from memory.llm import OpenAIChatModel
from memory.settings import SummarySettings
from storage import MAX_CARD_KEY_CHARS, MAX_CARD_TAGS, MAX_CARD_TOPIC_CHARS

MONDAY = datetime(2023, 5, 8, 9, tzinfo=UTC)
WEDNESDAY = datetime(2023, 5, 10, 18, tzinfo=UTC)
BATCH = [
    SourceMessage("user", "Hi! My name is Ana and I live in Porto.", MONDAY, 10, "c-10"),
    SourceMessage("assistant", "Nice to meet you, Ana. You probably like port wine?", MONDAY, 11),
    SourceMessage("user", "Yesterday I finished the Q2 report.", WEDNESDAY, 12, "c-12"),
    SourceMessage("assistant", "Well done!", WEDNESDAY, 13),
]


def cards_json(*cards: dict[str, Any]) -> str:
    return json.dumps({"cards": list(cards)})


GOOD = cards_json(
    {"type": "profile", "text": "User's name is Ana", "topic": "identity", "tags": ["name"],
     "subject": "User", "attribute": "Name", "source": [1]},
    {"type": "profile", "text": "User lives in Porto", "subject": "user", "attribute": "city",
     "source": [1]},
    {"type": "preference", "text": "User likes port wine", "subject": "user",
     "attribute": "preference:port wine", "source": [2]},
    {"type": "task", "text": "Done: Q2 report", "occurred_at": "2023-05-09", "subject": "user",
     "attribute": "whatever", "source": [3, 4]},
)  # fmt: skip


class Recorder:
    def __init__(self) -> None:
        self.events: list[ExtractionEvent | RulesFallback] = []
        self.sleeps: list[float] = []

    def kinds(self) -> list[str]:
        return [
            event.kind if isinstance(event, ExtractionEvent) else f"rules:{event.reason}"
            for event in self.events
        ]


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


def extractor(server: FakeOpenAI | None, recorder: Recorder, **settings: Any) -> CardExtractor:
    chat = None if server is None else OpenAIChatModel(base_url=server.base_url, api_key="test")
    defaults: dict[str, Any] = {"model": "primary", "timeout": 5.0}
    return CardExtractor(
        chat,
        SummarySettings(**(defaults | settings)),
        sleep=recorder.sleeps.append,
        clock=lambda: 0.0,
        on_event=recorder.events.append,
    )


def test_one_call_extracts_the_whole_batch(server: FakeOpenAI, recorder: Recorder) -> None:
    server.script(Reply(GOOD))

    result = extractor(server, recorder).extract(BATCH)

    assert (result.method, result.degraded, result.model, result.calls) == (
        "llm", False, "primary", 1,
    )  # fmt: skip
    assert result.tokens_in > 0 and result.tokens_out > 0
    name, city, done = result.cards  # the assistant's guess about port wine is dropped
    assert (name.text, name.subject, name.attribute, name.tags) == (
        "User's name is Ana", "user", "name", ("name",),
    )  # fmt: skip
    assert (name.observed_at, name.source_indices, name.source_ids) == (MONDAY, (10,), ("c-10",))
    assert city.key == ("user", "city")
    assert done.attribute == "task:q2 report"  # from the task's words, not the model's
    assert done.occurred_at is not None
    assert (done.occurred_at.date(), done.precision) == (date(2023, 5, 9), "day")
    assert (done.observed_at, done.source_indices, done.source_ids) == (
        WEDNESDAY, (12, 13), ("c-12",),
    )  # fmt: skip
    assert recorder.kinds() == ["attempt", "success"]
    assert all(isinstance(e, ExtractionEvent) and e.messages == 4 for e in recorder.events)


def test_the_prompt_numbers_and_dates_the_messages_and_says_what_to_keep(
    server: FakeOpenAI, recorder: Recorder
) -> None:
    server.script(Reply('{"cards": []}'))

    result = extractor(server, recorder).extract(BATCH)

    assert result.cards == ()
    (body,) = server.requests
    assert body["temperature"] == 0.0
    system, user = body["messages"]
    for asked in ("identity and profile", "preferences", "decisions", "tasks", "absolute dates",
                  "chit-chat", "assistant's own guesses", "Never translate names",
                  "language of the line"):  # fmt: skip
        assert asked in system["content"]
    assert user["content"].splitlines() == [
        "Messages:",
        "-- 2023-05-08",
        "[1] user: Hi! My name is Ana and I live in Porto.",
        "[2] assistant: Nice to meet you, Ana. You probably like port wine?",
        "-- 2023-05-10",  # a date is written once for the lines that share it
        "[3] user: Yesterday I finished the Q2 report.",
        "[4] assistant: Well done!",
    ]


def test_a_fenced_reply_and_coarse_dates_are_accepted(
    server: FakeOpenAI, recorder: Recorder
) -> None:
    reply = cards_json(
        {
            "type": "event",
            "text": "用户2022年5月搬到了深圳",
            "occurred_at": "2022-05",
            "source": [1],
        },
        {"type": "event", "text": "用户2021年结婚", "occurred_at": "2021", "source": [1]},
        {"type": "fact", "text": "用户有一只猫", "occurred_at": "null", "source": [1]},
    )
    server.script(Reply(f"```json\n{reply}\n```"))

    moved, married, cat = extractor(server, recorder).extract(BATCH[:1]).cards

    assert moved.text == "用户2022年5月搬到了深圳"  # kept as the model wrote it: no translation
    assert moved.occurred_at is not None and married.occurred_at is not None
    assert (moved.occurred_at, moved.precision) == (datetime(2022, 5, 1, tzinfo=UTC), "month")
    assert (married.occurred_at, married.precision) == (datetime(2021, 1, 1, tzinfo=UTC), "year")
    assert (cat.occurred_at, cat.precision) == (None, None)


@pytest.mark.parametrize(
    "bad",
    [
        '{"cards": [',
        '{"cards": "none"}',
        '{"cards": [{"type": "opinion", "text": "x", "source": [1]}]}',
        '{"cards": [{"type": "fact", "text": "", "source": [1]}]}',
        '{"cards": [{"type": "fact", "text": "x", "source": []}]}',
        '{"cards": [{"type": "fact", "text": "x", "source": [9]}]}',
        '{"cards": [{"type": "event", "text": "x", "occurred_at": "last May", "source": [1]}]}',
    ],
)
def test_a_malformed_reply_is_a_failed_attempt_that_is_retried(
    server: FakeOpenAI, recorder: Recorder, bad: str
) -> None:
    server.script(Reply(bad), Reply(GOOD))

    result = extractor(server, recorder).extract(BATCH)

    assert (result.method, result.calls, len(result.cards)) == ("llm", 2, 3)
    assert recorder.kinds() == ["attempt", "retry", "attempt", "success"]
    retry = recorder.events[1]
    assert isinstance(retry, ExtractionEvent) and "primary" in str(retry.error)
    assert recorder.sleeps == [0.5]


def test_a_reply_in_prose_is_not_asked_again_of_that_model(
    server: FakeOpenAI, recorder: Recorder
) -> None:
    server.script(Reply("Sure! Here are the cards: none."), Reply(GOOD))

    result = extractor(server, recorder, retries=3, fallback_model="backup").extract(BATCH)

    assert [body["model"] for body in server.requests] == ["primary", "backup"]
    assert (result.method, result.model, result.calls) == ("llm", "backup", 2)
    assert recorder.kinds() == ["attempt", "degrade", "attempt", "success"]


def test_a_model_that_answers_in_prose_leaves_the_cards_to_the_rules(
    server: FakeOpenAI, recorder: Recorder
) -> None:
    server.responder = lambda body: Reply("Ana lives in Porto and finished the Q2 report.")

    result = extractor(server, recorder, retries=3).extract(BATCH)

    assert len(server.requests) == 1
    assert (result.method, result.degraded, result.calls) == ("rules", True, 1)
    assert "User lives in Porto" in {card.text for card in result.cards}
    assert recorder.kinds()[-1] == "rules:llm_failed"


def test_the_request_asks_for_the_cards_schema_in_json_mode(
    server: FakeOpenAI, recorder: Recorder
) -> None:
    server.script(Reply(GOOD))

    extractor(server, recorder).extract(BATCH)

    assert server.requests[0]["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "cards", "schema": EXTRACTION_FORMAT.schema, "strict": True},
    }


def test_the_fallback_model_takes_over(server: FakeOpenAI, recorder: Recorder) -> None:
    server.script(Malformed(), Reply("not json"), Reply(GOOD))

    result = extractor(server, recorder, retries=2, fallback_model="backup").extract(BATCH)

    assert [body["model"] for body in server.requests] == ["primary", "primary", "backup"]
    assert (result.method, result.model, result.calls) == ("llm", "backup", 3)


def test_when_every_model_fails_the_rules_extract_with_an_event(
    server: FakeOpenAI, recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    server.script(Status(500), Reply("{broken"), Status(503), Reply('{"cards": 1}'))
    settings = {"retries": 2, "fallback_model": "backup", "fallback_retries": 2}

    result = extractor(server, recorder, **settings).extract(BATCH)

    assert (result.method, result.degraded, result.model, result.calls) == (
        "rules", True, None, 4,
    )  # fmt: skip
    assert [card.text for card in result.cards] == [
        "User's name is Ana",
        "User lives in Porto",
        "Done: the Q2 report",
    ]
    fallback = recorder.events[-1]
    assert isinstance(fallback, RulesFallback)
    assert (fallback.reason, fallback.messages, fallback.cards) == ("llm_failed", 4, 3)
    assert "every attempt failed (4)" in str(fallback.error)
    assert recorder.kinds()[-3:] == ["attempt", "degrade", "rules:llm_failed"]
    assert "card extraction by rules (llm_failed)" in caplog.text


def test_offline_the_rules_extract_without_a_call(recorder: Recorder) -> None:
    result = extractor(None, recorder).extract(BATCH)

    assert (result.method, result.degraded, result.calls, result.tokens_in) == (
        "rules", False, 0, 0,
    )  # fmt: skip
    assert len(result.cards) == 3
    assert recorder.events == [RulesFallback("no_model", 4, 3)]


def test_an_empty_batch_costs_nothing(server: FakeOpenAI, recorder: Recorder) -> None:
    result = extractor(server, recorder).extract([])

    assert (result.cards, result.calls) == ((), 0)
    assert server.requests == []


def test_long_messages_are_cut_in_the_prompt(server: FakeOpenAI, recorder: Recorder) -> None:
    server.script(Reply('{"cards": []}'))
    long = [SourceMessage("user", "word " * 2_000, MONDAY, 1)]

    extractor(server, recorder, prompt_chars_per_message=300).extract(long)

    line = server.requests[0]["messages"][1]["content"].splitlines()[2]
    assert len(line) <= 300
    assert "cut by stratamem" in line


def test_a_card_given_twice_is_one_card_with_both_sources(
    server: FakeOpenAI, recorder: Recorder
) -> None:
    server.script(
        Reply(
            cards_json(
                {"type": "profile", "text": "User lives in Porto", "source": [1]},
                {"type": "profile", "text": "user lives in Porto.", "source": [3]},
            )
        )
    )

    (card,) = extractor(server, recorder).extract(BATCH).cards

    assert (card.text, card.source_indices, card.source_ids) == (
        "User lives in Porto", (10, 12), ("c-10", "c-12"),
    )  # fmt: skip
    assert card.observed_at == WEDNESDAY


def test_the_json_mode_schema_is_what_the_reply_parser_reads() -> None:
    schema = EXTRACTION_FORMAT.schema["properties"]["cards"]["items"]
    assert set(schema["properties"]) == set(ReplyCard.model_fields)
    assert set(schema["required"]) == set(ReplyCard.model_fields)  # strict: every field
    assert schema["properties"]["type"]["enum"] == list(
        get_args(ReplyCard.model_fields["type"].annotation)
    )
    # A card with every field the schema lets be empty, empty, is a card.
    bare = {"type": "fact", "text": "User lives in Porto", "topic": None, "tags": [],
            "occurred_at": None, "subject": None, "attribute": None, "source": [1]}  # fmt: skip

    [card] = parse_reply(json.dumps({"cards": [bare]}), BATCH)

    assert (card.text, card.topic, card.occurred_at) == ("User lives in Porto", None, None)


def test_a_runaway_reply_is_capped_and_the_rest_of_it_kept(
    server: FakeOpenAI, recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    runaway = [
        {"type": "fact", "text": f"User keeps fact number {index}", "source": [1]}
        for index in range(5_000)
    ]
    runaway[0] |= {
        "topic": "t" * 1_000_000,
        "tags": [f"tag{index}" for index in range(30)] + ["x" * 500],
        "subject": "user",
        "attribute": "a" * 1_000,
    }
    runaway[1]["text"] = "User said " + "blah " * 1_000  # one card of 5,010 characters
    server.script(Reply(cards_json(*runaway)))

    with caplog.at_level("WARNING", logger="memory.cards.extract"):
        result = extractor(server, recorder).extract(BATCH)

    assert result.method == "llm" and not result.degraded  # one call, the reply used
    assert len(result.cards) == MAX_CARDS_PER_REPLY - 1  # the first 50, less the long one
    first = result.cards[0]
    assert first.topic == "t" * MAX_CARD_TOPIC_CHARS
    assert first.tags == tuple(f"tag{index}" for index in range(MAX_CARD_TAGS))
    assert first.attribute == "a" * MAX_CARD_KEY_CHARS
    assert result.cards[1].text == "User keeps fact number 2"
    assert "4950 card(s) over the cap per reply dropped, 1 over 1,000 characters" in caplog.text


def test_the_shared_folds_cards_are_capped_the_same_way() -> None:
    reply = {
        "summary": "Notes.",
        "cards": [
            {"type": "fact", "text": f"Fact {index}", "topic": "x" * 5_000, "source": [1]}
            for index in range(300)
        ],
    }

    cards = drafts_from_reply(reply, BATCH[:1])

    assert len(cards) == MAX_CARDS_PER_REPLY
    assert {card.topic for card in cards} == {"x" * MAX_CARD_TOPIC_CHARS}

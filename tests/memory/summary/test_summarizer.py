"""The summariser: prompt, length limit and every step of the degradation chain.

The LLM paths run through the real ``openai`` client against a local fake server.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from fake_openai import Empty, FakeOpenAI, Hang, Malformed, Reply, Status

from memory.context.messages import Message, parse_messages
from memory.context.tokens import TiktokenCounter
from memory.errors import ConfigurationError
from memory.llm import OpenAIChatModel, ScriptedChatModel
from memory.settings import SummarySettings
from memory.summary.archive import ARCHIVE_OMITTED
from memory.summary.summarizer import PreviousSummary, Summarizer, SummaryEvent

COUNTER = TiktokenCounter("gpt-4o-mini")

FIRST_FOLD = parse_messages(
    [
        {"role": "user", "content": "I am planning a trip to Lisbon in May. Budget 1200 EUR."},
        {"role": "assistant", "content": "Noted: Lisbon, May, 1200 EUR. Any dates yet?"},
        {"role": "user", "content": "May 12 to 19. I do not eat fish."},
        {
            "role": "assistant",
            "content": "Let me check flights.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "search_flights", "arguments": '{"to": "LIS"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "TP1234 departs 08:10, 240 EUR"},
    ]
)
SECOND_FOLD = parse_messages(
    [
        {"role": "user", "content": "Book TP1234 please, marker-second-fold."},
        {"role": "assistant", "content": "Booked TP1234 for May 12, confirmation QX7."},
    ]
)


class Recorder:
    """Collects events and sleeps, so tests assert on them without a clock."""

    def __init__(self) -> None:
        self.events: list[SummaryEvent] = []
        self.sleeps: list[float] = []

    def kinds(self) -> list[tuple[str, str | None]]:
        return [(event.kind, event.model) for event in self.events]


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


def summariser(server: FakeOpenAI | None, recorder: Recorder, **settings: Any) -> Summarizer:
    chat = None if server is None else OpenAIChatModel(base_url=server.base_url, api_key="test")
    defaults: dict[str, Any] = {"model": "primary", "timeout": 5.0}
    return Summarizer(
        chat,
        COUNTER,
        SummarySettings(**(defaults | settings)),
        sleep=recorder.sleeps.append,
        on_event=recorder.events.append,
        clock=lambda: 0.0,
    )


def models(server: FakeOpenAI) -> list[str]:
    return [body["model"] for body in server.requests]


def user_prompt(body: dict[str, Any]) -> str:
    return str(body["messages"][-1]["content"])


def test_a_summary_comes_from_the_model(server: FakeOpenAI, recorder: Recorder) -> None:
    server.script(Reply("Trip to Lisbon May 12-19, 1200 EUR, no fish. Flight TP1234 240 EUR."))

    result = summariser(server, recorder).summarise(None, FIRST_FOLD)

    assert result.text == "Trip to Lisbon May 12-19, 1200 EUR, no fish. Flight TP1234 240 EUR."
    assert (result.kind, result.degraded, result.model, result.attempts) == (
        "llm",
        False,
        "primary",
        1,
    )
    assert result.tokens_in > 0
    assert result.tokens_out == 13  # the fake counts words
    (body,) = server.requests
    assert body["temperature"] == 0.3
    system, user = body["messages"]
    assert system["role"] == "system"
    for asked in ("preferences", "constraints", "decisions", "open tasks", "errors"):
        assert asked in system["content"]
    assert "Current summary: (none yet)" in user["content"]
    assert (
        'assistant: Let me check flights. [calls search_flights({"to": "LIS"})]' in user["content"]
    )
    assert "tool search_flights: TP1234 departs 08:10, 240 EUR" in user["content"]


def test_the_length_limit_is_a_share_of_what_is_replaced_with_a_cap(
    server: FakeOpenAI, recorder: Recorder
) -> None:
    summary = summariser(server, recorder)
    previous = PreviousSummary("word " * 400)
    replaced = COUNTER.count_text(previous.text) + sum(map(COUNTER.count_message, FIRST_FOLD))
    server.script(Reply("short"))

    summary.summarise(previous, FIRST_FOLD)

    limit = math.ceil(0.3 * replaced)
    assert summary.token_limit(previous, FIRST_FOLD) == limit
    assert f"at most {limit} tokens" in server.requests[0]["messages"][0]["content"]
    assert server.requests[0]["max_tokens"] == math.ceil(limit * 1.5)
    capped = summariser(server, recorder, max_tokens=64)
    assert capped.token_limit(PreviousSummary("word " * 5000), FIRST_FOLD) == 64


def test_retries_back_off_then_succeed(server: FakeOpenAI, recorder: Recorder) -> None:
    server.script(Status(500), Status(429), Reply("done"))

    result = summariser(server, recorder).summarise(None, FIRST_FOLD)

    assert (result.text, result.model, result.attempts) == ("done", "primary", 3)
    assert recorder.sleeps == [0.5, 1.0]
    assert recorder.kinds() == [
        ("attempt", "primary"),
        ("retry", "primary"),
        ("attempt", "primary"),
        ("retry", "primary"),
        ("attempt", "primary"),
        ("success", "primary"),
    ]
    assert "InternalServerError" in str(recorder.events[1].error)
    assert all(event.covered == len(FIRST_FOLD) for event in recorder.events)


def test_the_fallback_model_takes_over_when_the_primary_keeps_failing(
    server: FakeOpenAI, recorder: Recorder
) -> None:
    server.script(Status(500), Status(500), Status(500), Reply("from the fallback"))

    result = summariser(server, recorder, fallback_model="backup").summarise(None, FIRST_FOLD)

    assert models(server) == ["primary", "primary", "primary", "backup"]
    assert (result.text, result.kind, result.model, result.degraded) == (
        "from the fallback",
        "llm",
        "backup",
        False,
    )
    assert recorder.sleeps == [0.5, 1.0]  # no wait before switching model
    assert [kind for kind, _ in recorder.kinds()] == [
        "attempt", "retry", "attempt", "retry", "attempt", "degrade", "attempt", "success",
    ]  # fmt: skip


def test_when_every_model_fails_the_summary_is_a_raw_archive(
    server: FakeOpenAI, recorder: Recorder
) -> None:
    server.script(*[Status(500)] * 6)

    result = summariser(server, recorder, fallback_model="backup").summarise(None, FIRST_FOLD)

    assert models(server) == ["primary"] * 3 + ["backup"] * 3
    assert (result.kind, result.degraded, result.model, result.attempts) == ("raw", True, None, 6)
    assert result.text.splitlines() == [
        "user: I am planning a trip to Lisbon in May. Budget 1200 EUR.",
        "assistant: Noted: Lisbon, May, 1200 EUR. Any dates yet?",
        "user: May 12 to 19. I do not eat fish.",
        'assistant: Let me check flights. [calls search_flights({"to": "LIS"})]',
        "tool search_flights: TP1234 departs 08:10, 240 EUR",
    ]
    assert recorder.kinds()[-2:] == [("attempt", "backup"), ("degrade", "backup")]


def test_a_failed_merge_keeps_the_previous_summary_and_appends_the_archive(
    server: FakeOpenAI, recorder: Recorder
) -> None:
    server.script(Status(500), Status(500), Status(500))
    previous = PreviousSummary("Trip to Lisbon, May 12-19; flight TP1234.")

    result = summariser(server, recorder).summarise(previous, SECOND_FOLD)

    assert result.text == (
        "Trip to Lisbon, May 12-19; flight TP1234.\n\n[raw archive; summariser tries: 0]\n"
        "user: Book TP1234 please, marker-second-fold.\n"
        "assistant: Booked TP1234 for May 12, confirmation QX7."
    )
    assert (result.kind, result.degraded) == ("raw", True)


def test_a_raw_previous_summary_is_extended_and_labelled_in_the_prompt(
    server: FakeOpenAI, recorder: Recorder
) -> None:
    previous = PreviousSummary("user: an archived line", kind="raw")
    server.script(Reply("merged"), Status(500))

    merged = summariser(server, recorder).summarise(previous, SECOND_FOLD)
    archived = summariser(server, recorder, retries=1).summarise(previous, SECOND_FOLD)

    assert merged.text == "merged"
    assert "Current summary (a raw archive of earlier messages):\nuser: an archived line" in (
        user_prompt(server.requests[0])
    )
    assert archived.text.startswith("user: an archived line\nuser: Book TP1234")


def test_archive_lines_are_cut_to_the_configured_length(recorder: Recorder) -> None:
    huge = parse_messages([{"role": "user", "content": "x" * 5_000}])

    result = summariser(None, recorder, archive_chars=500).summarise(None, huge)

    assert len(result.text) <= 500
    assert result.text.endswith("characters cut by stratamem …]")


def test_offline_every_summary_is_a_raw_archive_without_events(recorder: Recorder) -> None:
    previous = PreviousSummary("older archive", kind="raw")

    result = summariser(None, recorder).summarise(previous, SECOND_FOLD)

    assert result.text.splitlines()[0] == "older archive"
    assert (result.kind, result.degraded, result.model, result.attempts) == ("raw", False, None, 0)
    assert recorder.events == []


@pytest.mark.parametrize("failure", [Empty(), Reply(None), Malformed()])
def test_an_empty_or_malformed_reply_is_a_failed_attempt(
    server: FakeOpenAI, recorder: Recorder, failure: Empty | Reply | Malformed
) -> None:
    server.script(failure, Reply("second try"))

    result = summariser(server, recorder).summarise(None, FIRST_FOLD)

    assert (result.text, result.attempts) == ("second try", 2)
    assert recorder.events[1].kind == "retry"


def test_a_far_too_long_reply_is_rejected(server: FakeOpenAI, recorder: Recorder) -> None:
    summary = summariser(server, recorder)
    limit = summary.token_limit(None, FIRST_FOLD)
    server.script(Reply("lisbon " * (limit * 3)), Reply("fits"))

    result = summary.summarise(None, FIRST_FOLD)

    assert (result.text, result.attempts) == ("fits", 2)
    assert "over-long reply" in str(recorder.events[1].error)


def test_a_slightly_too_long_reply_is_cut_to_the_limit(
    server: FakeOpenAI, recorder: Recorder
) -> None:
    summary = summariser(server, recorder)
    limit = summary.token_limit(None, FIRST_FOLD)
    lines = [f"Fact {number}: the user likes option {number}." for number in range(200)]
    reply = "\n".join(lines)
    while COUNTER.count_text(reply) > limit * 1.3:
        lines.pop()
        reply = "\n".join(lines)
    server.script(Reply(reply))

    result = summary.summarise(None, FIRST_FOLD)

    assert result.kind == "llm"
    assert COUNTER.count_text(result.text) <= limit
    kept, _, marker = result.text.rpartition("\n")
    assert reply.startswith(kept)
    assert marker.endswith("tokens cut by stratamem …]")
    assert kept.endswith(".")  # cut at a line end, not mid-word
    assert COUNTER.count_text(result.text) > limit * 0.7


def test_a_hanging_model_times_out_and_the_next_attempt_succeeds(
    server: FakeOpenAI, recorder: Recorder
) -> None:
    server.script(Hang(), Reply("after the timeout"))

    # Long enough for the second reply on a loaded machine, short enough for a quick test.
    result = summariser(server, recorder, timeout=1.0).summarise(None, FIRST_FOLD)

    assert (result.text, result.attempts) == ("after the timeout", 2)
    assert "APITimeoutError" in str(recorder.events[1].error)


def test_each_message_is_sent_once_across_consecutive_summaries(
    server: FakeOpenAI, recorder: Recorder
) -> None:
    server.script(
        Reply("S1: Lisbon May 12-19, 1200 EUR, no fish, TP1234 found."),
        Reply("S2: Lisbon May 12-19, 1200 EUR, no fish, TP1234 booked, confirmation QX7."),
    )
    summary = summariser(server, recorder)

    first = summary.summarise(None, FIRST_FOLD)
    summary.summarise(PreviousSummary(first.text, first.kind), SECOND_FOLD)

    first_prompt, second_prompt = map(user_prompt, server.requests)
    assert "marker-second-fold" not in first_prompt
    assert "marker-second-fold" in second_prompt
    assert "S1: Lisbon May 12-19" in second_prompt
    for message in FIRST_FOLD:
        assert message.text not in second_prompt


def test_long_tool_results_are_cut_in_the_prompt(server: FakeOpenAI, recorder: Recorder) -> None:
    fold = [*FIRST_FOLD[:4], FIRST_FOLD[4].model_copy(update={"content": "row " * 5_000})]
    server.script(Reply("ok"))

    summariser(server, recorder, prompt_chars_per_message=2_000).summarise(None, fold)

    lines = user_prompt(server.requests[0]).splitlines()
    (tool_line,) = [line for line in lines if line.startswith("tool search_flights:")]
    assert 1_990 <= len(tool_line) <= 2_000
    assert tool_line.endswith("characters cut by stratamem …]")


def test_a_chat_model_bug_is_not_swallowed(recorder: Recorder) -> None:
    summary = Summarizer(ScriptedChatModel([RuntimeError("bug")]), COUNTER)

    with pytest.raises(RuntimeError, match="bug"):
        summary.summarise(None, FIRST_FOLD)


def test_nothing_to_fold_is_a_caller_error(recorder: Recorder) -> None:
    empty: Sequence[Message] = []

    with pytest.raises(ValueError, match="at least one"):
        summariser(None, recorder).summarise(None, empty)


@pytest.mark.parametrize(
    "settings",
    [{"retries": 0}, {"ratio": 0.0}, {"timeout": 0}, {"max_tokens": 10}],
)
def test_impossible_settings_are_refused(settings: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError, match="summary settings"):
        SummarySettings(**settings)


def test_raw_archive_keeps_the_newest_lines_within_the_hard_cap() -> None:
    counter = TiktokenCounter("gpt-4o-mini")
    summarizer = Summarizer(None, counter, SummarySettings(max_tokens=200))
    previous = None
    folded: list[Message] = []
    for batch in range(10):
        folded = [
            Message(role="user", content=f"batch {batch} line {line}: the deploy log says ok")
            for line in range(10)
        ]
        result = summarizer.summarise(previous, folded)
        previous = PreviousSummary(result.text, result.kind)
    assert counter.count_text(result.text) <= 2 * 200
    assert result.text.startswith(ARCHIVE_OMITTED)
    assert result.text.count(ARCHIVE_OMITTED) == 1
    assert result.text.endswith("batch 9 line 9: the deploy log says ok")


def test_raw_archive_after_an_llm_summary_keeps_that_summary_whole() -> None:
    counter = TiktokenCounter("gpt-4o-mini")
    summarizer = Summarizer(None, counter, SummarySettings(max_tokens=100))
    folded = [Message(role="user", content=f"line {n}: the deploy log says ok") for n in range(60)]

    result = summarizer.summarise(PreviousSummary("Trip to Lisbon in May.", "llm"), folded)

    assert result.text.startswith("Trip to Lisbon in May.\n\n" + ARCHIVE_OMITTED)
    assert result.text.endswith("user: line 59: the deploy log says ok")
    assert counter.count_text(result.text) <= 2 * 100

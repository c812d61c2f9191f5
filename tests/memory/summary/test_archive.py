"""The raw archive's re-send bound: an archived increment goes to a model in a few folds only.

Pure tests of ``memory.summary.archive``, then the summariser folding against the local fake
server while every reply is refused (the model answers, but never usefully), and while it is
down (nobody reads: no try is counted).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fake_openai import FakeOpenAI, Reply, Status

from memory.context.messages import Message
from memory.context.tokens import TiktokenCounter
from memory.llm import OpenAIChatModel
from memory.settings import SummarySettings
from memory.summary.archive import (
    ARCHIVE_MAX_TRIES,
    ARCHIVE_OMITTED,
    extend_archive,
    sendable_archive,
)
from memory.summary.summarizer import PreviousSummary, Summarizer

COUNTER = TiktokenCounter("gpt-4o-mini")
REFUSAL = "I'm sorry, but I can't help with that."


def extend(previous: str | None, increment: list[str], *, read: bool, archive: bool = True) -> str:
    return extend_archive(
        previous, archive, increment, read=read, max_tokens=1_000, counter=COUNTER
    )


def test_an_archive_nobody_read_looks_as_it_always_did() -> None:
    text = extend(None, ["user: a"], read=False)
    text = extend(text, ["user: b"], read=False)

    assert text == "user: a\nuser: b"
    assert sendable_archive(text) == text


def test_each_fold_a_model_read_counts_one_try_per_block() -> None:
    text = extend(None, ["user: a"], read=True)
    assert text == "[raw archive; summariser tries: 1]\nuser: a"
    text = extend(text, ["user: b"], read=True)
    assert text == (
        "[raw archive; summariser tries: 2]\nuser: a\n[raw archive; summariser tries: 1]\nuser: b"
    )


def test_an_increment_is_sent_in_at_most_the_bound_of_folds() -> None:
    text = extend(None, ["user: first"], read=True)  # read once, in its own fold
    sent = 1
    for fold in range(6):
        if "user: first" in sendable_archive(text):
            sent += 1
        text = extend(text, [f"user: fold {fold}"], read=True)

    assert sent == ARCHIVE_MAX_TRIES
    assert "user: first" in text  # still stored, only no longer sent
    assert sendable_archive(text).splitlines() == [
        f"user: fold {fold}" for fold in range(6 - ARCHIVE_MAX_TRIES + 1, 6)
    ]


def test_folds_nobody_read_count_no_try() -> None:
    text = extend(None, ["user: first"], read=True)
    for fold in range(5):
        text = extend(text, [f"user: outage {fold}"], read=False)

    assert text.splitlines()[:2] == ["[raw archive; summariser tries: 1]", "user: first"]
    assert "[raw archive; summariser tries: 0]" in text
    assert "user: first" in sendable_archive(text)


def test_the_model_summary_an_archive_follows_is_always_sent_and_kept_whole() -> None:
    head = "Trip to Lisbon in May.\nBudget 1200 EUR."
    text = extend(head, ["user: a"], read=False, archive=False)
    assert text == f"{head}\n\n[raw archive; summariser tries: 0]\nuser: a"
    for fold in range(2 * ARCHIVE_MAX_TRIES):
        text = extend(text, [f"user: fold {fold}"], read=True)

    assert text.startswith(f"{head}\n\n[raw archive; summariser tries: {ARCHIVE_MAX_TRIES}]")
    assert sendable_archive(text).startswith(f"{head}\n\nuser: fold")
    assert "user: a" not in sendable_archive(text)


def test_an_archive_stored_before_the_headers_counts_as_never_tried() -> None:
    legacy = "Trip to Lisbon.\n\nuser: a\nassistant: b"

    assert sendable_archive(legacy) == legacy
    assert extend(legacy, ["user: c"], read=True) == (
        "[raw archive; summariser tries: 1]\nTrip to Lisbon.\n\nuser: a\nassistant: b\nuser: c"
    )


def test_the_cap_leaves_out_the_oldest_lines_and_keeps_the_headers_right() -> None:
    text = None
    for fold in range(40):
        lines = [f"user: fold {fold} line {n}: the deploy log says ok" for n in range(5)]
        text = extend_archive(
            text, True, lines, read=fold % 2 == 0, max_tokens=100, counter=COUNTER
        )
    assert text is not None

    assert COUNTER.count_text(text) <= 2 * 100
    assert text.startswith(ARCHIVE_OMITTED + "\n[raw archive; summariser tries:")
    assert text.endswith("user: fold 39 line 4: the deploy log says ok")
    assert ARCHIVE_OMITTED not in sendable_archive(text)


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


def summariser(server: FakeOpenAI, **overrides: Any) -> Summarizer:
    values: dict[str, Any] = {"model": "primary", "timeout": 5.0, "retries": 1}
    return Summarizer(
        OpenAIChatModel(base_url=server.base_url, api_key="test"),
        COUNTER,
        SummarySettings(**(values | overrides)),
        sleep=lambda _: None,
    )


def fold_of(number: int) -> list[Message]:
    return [
        Message(role="user", content=f"marker-{number}: what about the staging cluster?"),
        Message(role="assistant", content=f"Noted for marker-{number}: it is still down."),
    ]


def requests_holding(server: FakeOpenAI, marker: str) -> int:
    return sum(marker in body["messages"][1]["content"] for body in server.requests)


def test_a_model_that_refuses_everything_gets_each_increment_a_bounded_number_of_times(
    server: FakeOpenAI,
) -> None:
    server.responder = lambda body: Reply(REFUSAL)
    summarizer = summariser(server)
    previous = None
    for number in range(8):
        result = summarizer.summarise(previous, fold_of(number))
        previous = PreviousSummary(result.text, result.kind)

    # Each increment: in its own fold's request, then in the next folds' up to the bound.
    assert [requests_holding(server, f"marker-{n}:") for n in range(8)] == [
        min(ARCHIVE_MAX_TRIES, 8 - n) for n in range(8)
    ]
    # Nothing of the stored archive was lost: every increment is still in it.
    assert all(f"user: marker-{n}:" in previous.text for n in range(8))


def test_folds_while_the_model_is_down_do_not_use_up_the_tries(server: FakeOpenAI) -> None:
    summarizer = summariser(server)
    server.script(Reply(REFUSAL))
    first = summarizer.summarise(None, fold_of(0))
    previous = PreviousSummary(first.text, first.kind)
    for number in range(1, 6):
        server.script(Status(503))
        result = summarizer.summarise(previous, fold_of(number))
        previous = PreviousSummary(result.text, result.kind)
    server.script(Reply("The staging cluster is still down; markers 0 to 6 asked about it."))

    result = summarizer.summarise(previous, fold_of(6))

    assert result.kind == "llm"
    assert "marker-0:" in server.requests[-1]["messages"][1]["content"]

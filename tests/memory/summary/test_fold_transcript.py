"""The fold's transcript: numbered lines, dates once per day, compact JSON, cut tool results."""

# ruff: noqa: RUF001
# (Chinese text is written with its own full-width punctuation, as users type it.)

from __future__ import annotations

import json
from datetime import date

from memory.context.messages import parse_messages
from memory.context.tokens import TiktokenCounter
from memory.summary.transcript import compact_json, raw_archive, render_fold_transcript

COUNTER = TiktokenCounter("gpt-4o-mini")
ORDERS = {
    "results": [
        {"id": f"T-{n}", "title": f"订单 {n} 已发货", "eta": f"2024-05-0{n}", "total": 12.5 * n}
        for n in range(1, 6)
    ],
    "more": None,
}
PRETTY = json.dumps(ORDERS, indent=2)  # escapes every Chinese character as \\uXXXX
MESSAGES = parse_messages(
    [
        {"role": "user", "content": "我的订单到哪了？"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "orders", "arguments": '{ "user": "王芳" ,\n "n": 5 }'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": PRETTY},
        {"role": "assistant", "content": "五个订单都已发货。"},
    ]
)
DAYS = [date(2024, 5, 1), date(2024, 5, 1), date(2024, 5, 2), date(2024, 5, 2)]


def test_json_is_sent_as_the_same_value_in_fewer_tokens() -> None:
    compact = compact_json(PRETTY)

    assert json.loads(compact) == ORDERS
    assert "订单 1 已发货" in compact and "\\u" not in compact
    assert COUNTER.count_text(compact) < 0.7 * COUNTER.count_text(" ".join(PRETTY.split()))


def test_text_that_is_not_json_is_left_as_it_is() -> None:
    for text in ("[1] not json", "{broken", "plain words", "  "):
        assert compact_json(text) == text


def test_the_fold_transcript_numbers_what_may_be_cited_and_dates_each_day_once() -> None:
    transcript = render_fold_transcript(
        MESSAGES, DAYS, {0: 1, 3: 2}, chars_per_message=2_000, tool_result_chars=2_000
    )

    assert transcript.splitlines() == [
        "-- 2024-05-01",
        "[1] user: 我的订单到哪了？",
        'assistant: [calls orders({"user":"王芳","n":5})]',
        "-- 2024-05-02",
        "tool orders: " + compact_json(PRETTY),
        "[2] assistant: 五个订单都已发货。",
    ]


def test_tool_results_are_cut_to_their_own_limit() -> None:
    transcript = render_fold_transcript(
        MESSAGES, DAYS, {0: 1, 3: 2}, chars_per_message=2_000, tool_result_chars=100
    )

    tool_line = transcript.splitlines()[4]
    assert len(tool_line) <= 100 and "cut by stratamem" in tool_line
    assert transcript.splitlines()[5] == "[2] assistant: 五个订单都已发货。"


def test_the_raw_archive_keeps_the_text_as_it_was() -> None:
    # The archive is stored as the summary of last resort: it shows what the tool said.
    archive = raw_archive(MESSAGES, 10_000)

    assert " ".join(PRETTY.split()) in archive

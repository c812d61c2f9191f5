"""Dates without a year point the way the sentence does: plans forward, past events backward.

"Report due on 5 April", said in December, is next April; "on 5 April I moved" is last April;
"my birthday is 5 January" (no direction either way) is the nearer 5 January.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory.cards.dates import resolve_date, time_range_of_query

TZ = timezone(timedelta(hours=8))
# Tuesday 10 December 2024: a date without a year lies on either side of a year boundary.
DECEMBER = datetime(2024, 12, 10, 9, 0, tzinfo=TZ)

PLANS: list[tuple[str, date, str]] = [
    ("Report due on 5 April", date(2025, 4, 5), "day"),
    ("The report is due April 5", date(2025, 4, 5), "day"),
    ("The deadline for the grant is 31 March", date(2025, 3, 31), "day"),
    ("I have a dentist appointment on 3 March", date(2025, 3, 3), "day"),
    ("my flight to Lisbon is on 20 January", date(2025, 1, 20), "day"),
    ("We will move to Berlin on 1 February", date(2025, 2, 1), "day"),
    ("I'm going to visit Ana in March", date(2025, 3, 1), "month"),
    ("the board meeting on 14 January", date(2025, 1, 14), "day"),
    ("I need to send the form by 31 March", date(2025, 3, 31), "day"),
    ("we launch on 3 Jan", date(2025, 1, 3), "day"),
    ("I booked a table for 2 November", date(2025, 11, 2), "day"),
    ("We're flying to Rome on 8 December", date(2025, 12, 8), "day"),
    ("报告4月5日截止", date(2025, 4, 5), "day"),
    ("4月5日要交报告", date(2025, 4, 5), "day"),
    ("我打算3月去日本", date(2025, 3, 1), "month"),
    ("我预约了1月8日看牙医", date(2025, 1, 8), "day"),
    ("1月20日的航班", date(2025, 1, 20), "day"),
    ("我们将在2月1日搬家", date(2025, 2, 1), "day"),
    ("别忘了3月2日交房租", date(2025, 3, 2), "day"),
]

PAST: list[tuple[str, date, str]] = [
    ("on 5 April I moved", date(2024, 4, 5), "day"),
    ("I moved to Berlin on 5 April", date(2024, 4, 5), "day"),
    ("We met on 20 December", date(2023, 12, 20), "day"),
    ("I went to Lisbon in March", date(2024, 3, 1), "month"),
    ("my flight on 20 December was delayed", date(2023, 12, 20), "day"),
    ("The report was due on 5 April", date(2024, 4, 5), "day"),
    ("On 5 April, after a long week, I finally resigned", date(2024, 4, 5), "day"),
    ("I've lived here since 12 December", date(2023, 12, 12), "day"),
    ("我4月5日搬家了", date(2024, 4, 5), "day"),
    ("12月20日我们见过面", date(2023, 12, 20), "day"),
    ("我3月去了日本", date(2024, 3, 1), "month"),
    ("12月20日已经交了", date(2023, 12, 20), "day"),
    ("我是12月15日到的", date(2023, 12, 15), "day"),
]

# Neither a plan nor a past event: the nearer of the dates it can be.
EITHER: list[tuple[str, date, str]] = [
    ("my birthday is 5 January", date(2025, 1, 5), "day"),
    ("my birthday is 20 June", date(2024, 6, 20), "day"),
    ("我的生日是1月5日", date(2025, 1, 5), "day"),
    ("December 10", date(2024, 12, 10), "day"),
]


@pytest.mark.parametrize(("text", "day", "precision"), PLANS + PAST + EITHER)
def test_a_date_without_a_year_points_the_way_its_sentence_does(
    text: str, day: date, precision: str
) -> None:
    resolved = resolve_date(text, DECEMBER)

    assert resolved is not None, text
    assert (resolved.occurred_at.date(), resolved.precision) == (day, precision)
    assert resolved.occurred_at.tzinfo is TZ


@pytest.mark.parametrize(
    ("text", "day"),
    [
        ("Report due on 10 December", date(2024, 12, 10)),
        ("I moved on 10 December", date(2024, 12, 10)),
    ],
)
def test_the_day_it_was_said_is_both_ahead_and_behind(text: str, day: date) -> None:
    resolved = resolve_date(text, DECEMBER)
    assert resolved is not None
    assert resolved.occurred_at.date() == day


def test_each_date_of_a_message_reads_its_own_clause() -> None:
    message = "I moved to Berlin on 5 April, and my visa interview is on 3 March"
    first = resolve_date(message, DECEMBER)
    second = resolve_date(message[message.index("my visa") :], DECEMBER)

    assert first is not None and first.occurred_at.date() == date(2024, 4, 5)
    assert second is not None and second.occurred_at.date() == date(2025, 3, 3)


def test_a_leap_day_is_the_nearest_29_february_its_way() -> None:
    said = datetime(2025, 6, 1, tzinfo=TZ)
    ahead = resolve_date("the report is due on 29 February", said)
    behind = resolve_date("I moved on 29 February", said)

    assert ahead is not None and ahead.occurred_at.date() == date(2028, 2, 29)
    assert behind is not None and behind.occurred_at.date() == date(2024, 2, 29)


MONDAY_30 = datetime(2024, 12, 30, 18, 0, tzinfo=TZ)  # a Monday, the week across the new year
WEDNESDAY_25 = datetime(2024, 12, 25, 18, 0, tzinfo=TZ)

WEEKDAYS: list[tuple[str, datetime, date]] = [
    ("next Friday is the deadline", MONDAY_30, date(2025, 1, 3)),
    ("last Friday I was ill", MONDAY_30, date(2024, 12, 27)),
    ("下周五开会", MONDAY_30, date(2025, 1, 10)),
    ("上周五我生病了", MONDAY_30, date(2024, 12, 27)),
    ("on Monday we fly", WEDNESDAY_25, date(2024, 12, 30)),
    ("on Friday I was ill", MONDAY_30, date(2024, 12, 27)),
    ("周一要开会", WEDNESDAY_25, date(2024, 12, 30)),
    ("周五我生病了", MONDAY_30, date(2024, 12, 27)),
    ("周日见", WEDNESDAY_25, date(2024, 12, 29)),  # no direction: the day of this week
]


@pytest.mark.parametrize(("text", "said", "day"), WEEKDAYS)
def test_weekdays_point_the_way_their_sentence_does(text: str, said: datetime, day: date) -> None:
    resolved = resolve_date(text, said)
    assert resolved is not None
    assert (resolved.occurred_at.date(), resolved.precision) == (day, "day")


COUNTS: list[tuple[str, date, str]] = [
    ("the report is due in two weeks", date(2024, 12, 23), "week"),
    ("two weeks from now we move", date(2024, 12, 23), "week"),
    ("in 3 months I retire", date(2025, 3, 1), "month"),
    ("两周后交报告", date(2024, 12, 23), "week"),
    ("三天后出发", date(2024, 12, 13), "day"),
    ("一个月以后搬家", date(2025, 1, 1), "month"),
]


@pytest.mark.parametrize(("text", "day", "precision"), COUNTS)
def test_counts_ahead_in_english_and_chinese(text: str, day: date, precision: str) -> None:
    resolved = resolve_date(text, DECEMBER)
    assert resolved is not None
    assert (resolved.occurred_at.date(), resolved.precision) == (day, precision)


@pytest.mark.parametrize("text", ["9000年后", "5000年前", "三四天前", "一二三月", "十十天后"])
def test_a_count_outside_the_calendar_or_no_number_is_no_date(text: str) -> None:
    # Each raised (ValueError, KeyError) before, failing the extraction of its message.
    assert resolve_date(text, DECEMBER) is None


def midnight(year: int, month: int, day: int) -> datetime:
    return datetime(year, month, day, tzinfo=TZ)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("what is due on 5 April?", (midnight(2025, 4, 5), midnight(2025, 4, 6))),
        ("what did I do on 5 April?", (midnight(2024, 4, 5), midnight(2024, 4, 6))),
        ("what happened on 5 April?", (midnight(2024, 4, 5), midnight(2024, 4, 6))),
        ("4月5日要交什么", (midnight(2025, 4, 5), midnight(2025, 4, 6))),
        ("4月5日做了什么", (midnight(2024, 4, 5), midnight(2024, 4, 6))),
    ],
)
def test_a_question_asks_ahead_only_when_it_says_so(
    query: str, expected: tuple[datetime, datetime]
) -> None:
    assert time_range_of_query(query, DECEMBER) == expected


# -- properties ------------------------------------------------------------------------------

MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]  # fmt: skip
SAID = st.datetimes(
    min_value=datetime(1990, 1, 1), max_value=datetime(2080, 12, 31), timezones=st.just(TZ)
)
# Every day of the year but 29 February (tested above), as (month, day).
DAYS = st.dates(min_value=date(2023, 1, 1), max_value=date(2023, 12, 31)).map(
    lambda day: (day.month, day.day)
)
FORWARD = [
    "Report due on {d} {m}",
    "I have an appointment on {m} {d}",
    "we will fly to Oslo on {d} {m}",
    "报告{mn}月{d}日截止",
    "我们{mn}月{d}日要搬家",
]
BACKWARD = [
    "On {d} {m} I moved",
    "we met on {m} {d}",
    "I was in Oslo on {d} {m}",
    "我{mn}月{d}日搬家了",
    "{mn}月{d}日我们见过面",
]
NEUTRAL = ["my birthday is {d} {m}", "我的生日是{mn}月{d}日"]


def _said(template: str, month: int, day: int) -> str:
    return template.format(d=day, m=MONTHS[month - 1], mn=month)


@settings(max_examples=300)
@given(SAID, DAYS, st.sampled_from(FORWARD))
def test_a_plan_is_never_before_the_day_it_was_said(
    said: datetime, when: tuple[int, int], template: str
) -> None:
    resolved = resolve_date(_said(template, *when), said)

    assert resolved is not None
    day = resolved.occurred_at.date()
    assert (day.month, day.day) == when
    assert said.date() <= day < said.date() + timedelta(days=366)


@settings(max_examples=300)
@given(SAID, DAYS, st.sampled_from(BACKWARD))
def test_a_past_event_is_never_after_the_day_it_was_said(
    said: datetime, when: tuple[int, int], template: str
) -> None:
    resolved = resolve_date(_said(template, *when), said)

    assert resolved is not None
    day = resolved.occurred_at.date()
    assert (day.month, day.day) == when
    assert said.date() - timedelta(days=366) < day <= said.date()


@settings(max_examples=300)
@given(SAID, DAYS, st.sampled_from(NEUTRAL))
def test_a_date_with_no_direction_is_the_nearest_one(
    said: datetime, when: tuple[int, int], template: str
) -> None:
    resolved = resolve_date(_said(template, *when), said)

    assert resolved is not None
    day = resolved.occurred_at.date()
    assert (day.month, day.day) == when
    distance = abs((day - said.date()).days)
    assert distance <= 183
    for year in (day.year - 1, day.year + 1):
        other = date(year, *when) if when != (2, 29) else None
        assert other is None or abs((other - said.date()).days) >= distance


WEEKDAY_NAMES = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
CJK_WEEKDAYS = "一二三四五六日"


@settings(max_examples=200)
@given(SAID, st.integers(0, 6), st.booleans(), st.booleans())
def test_a_bare_weekday_is_the_next_one_for_a_plan_and_the_last_one_for_the_past(
    said: datetime, weekday: int, plan: bool, chinese: bool
) -> None:
    if chinese:
        text = f"周{CJK_WEEKDAYS[weekday]}要开会" if plan else f"周{CJK_WEEKDAYS[weekday]}我生病了"
    else:
        name = WEEKDAY_NAMES[weekday]
        text = f"on {name} we will fly" if plan else f"on {name} I was ill"

    resolved = resolve_date(text, said)

    assert resolved is not None
    day = resolved.occurred_at.date()
    assert day.weekday() == weekday
    days = (day - said.date()).days
    assert 1 <= days <= 7 if plan else -7 <= days <= -1

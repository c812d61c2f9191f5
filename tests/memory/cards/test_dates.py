"""Dates in words, English and Chinese, resolved against an explicit reference time."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone

import pytest

from memory.cards.dates import resolve_date, time_range_of_query

# Wednesday 10 May 2023, 15:30 in UTC+8: every relative date below counts from this day.
TZ = timezone(timedelta(hours=8))
SAID = datetime(2023, 5, 10, 15, 30, tzinfo=TZ)

STATEMENTS: list[tuple[str, date, str]] = [
    # English, named days
    ("I went hiking yesterday", date(2023, 5, 9), "day"),
    ("today I fixed the build", date(2023, 5, 10), "day"),
    ("the demo is tomorrow", date(2023, 5, 11), "day"),
    ("we met the day before yesterday", date(2023, 5, 8), "day"),
    ("see you the day after tomorrow", date(2023, 5, 12), "day"),
    # weeks, months, years
    ("last week was hard", date(2023, 5, 1), "week"),
    ("this week we ship", date(2023, 5, 8), "week"),
    ("next week I am off", date(2023, 5, 15), "week"),
    ("last month I started", date(2023, 4, 1), "month"),
    ("next month we move", date(2023, 6, 1), "month"),
    ("last year we hired two", date(2022, 1, 1), "year"),
    ("next year maybe", date(2024, 1, 1), "year"),
    # weekdays
    ("next Friday is the deadline", date(2023, 5, 12), "day"),
    ("last Friday I was ill", date(2023, 5, 5), "day"),
    ("last Wednesday too", date(2023, 5, 3), "day"),
    ("next Wednesday then", date(2023, 5, 17), "day"),
    ("this Monday it rained", date(2023, 5, 8), "day"),
    ("on Sunday we fly", date(2023, 5, 14), "day"),
    # named months
    ("I moved here last May", date(2022, 5, 1), "month"),
    ("last March was cold", date(2023, 3, 1), "month"),
    ("last December we went", date(2022, 12, 1), "month"),
    ("next March I retire", date(2024, 3, 1), "month"),
    ("next June is the wedding", date(2023, 6, 1), "month"),
    ("in March 2023 we launched", date(2023, 3, 1), "month"),
    ("back in September, 2021", date(2021, 9, 1), "month"),
    ("in July I travel", date(2023, 7, 1), "month"),
    ("since 2019 I run", date(2019, 1, 1), "year"),
    # counts ago and ahead
    ("3 days ago I lost it", date(2023, 5, 7), "day"),
    ("two weeks ago we talked", date(2023, 4, 24), "week"),
    ("a week ago", date(2023, 5, 1), "week"),
    ("a couple of days ago", date(2023, 5, 8), "day"),
    ("six months ago I quit", date(2022, 11, 1), "month"),
    ("ten years ago", date(2013, 1, 1), "year"),
    ("in 2 days I leave", date(2023, 5, 12), "day"),
    # absolute
    ("on 2023-05-07 it shipped", date(2023, 5, 7), "day"),
    ("2022/12/31 was the cutoff", date(2022, 12, 31), "day"),
    ("born on 7 May 2023", date(2023, 5, 7), "day"),
    ("on the 7th of May, 2021", date(2021, 5, 7), "day"),
    ("May 7, 2023 was a Sunday", date(2023, 5, 7), "day"),
    ("Sept 3rd 2020", date(2020, 9, 3), "day"),
    # without a year: a past event is the day before, a plan the one after (test_date_direction)
    ("we met on June 2", date(2022, 6, 2), "day"),
    ("on 3 Jan we start", date(2024, 1, 3), "day"),
    # Chinese, named days
    ("昨天我去爬山了", date(2023, 5, 9), "day"),
    ("前天开会", date(2023, 5, 8), "day"),
    ("大前天下雨", date(2023, 5, 7), "day"),
    ("今天很忙", date(2023, 5, 10), "day"),
    ("明天交报告", date(2023, 5, 11), "day"),
    ("后天出发", date(2023, 5, 12), "day"),
    # Chinese weeks and weekdays
    ("上周五我生病了", date(2023, 5, 5), "day"),
    ("上星期一开始的", date(2023, 5, 1), "day"),
    ("上周很累", date(2023, 5, 1), "week"),
    ("这周末休息", date(2023, 5, 8), "week"),
    ("下周三开会", date(2023, 5, 17), "day"),
    ("上上周去了上海", date(2023, 4, 24), "week"),
    ("周日见", date(2023, 5, 14), "day"),
    ("下礼拜天", date(2023, 5, 21), "day"),
    # Chinese months and years
    ("上个月搬家了", date(2023, 4, 1), "month"),
    ("下个月入职", date(2023, 6, 1), "month"),
    ("本月预算超了", date(2023, 5, 1), "month"),
    ("去年毕业的", date(2022, 1, 1), "year"),
    ("今年三十岁", date(2023, 1, 1), "year"),
    ("前年结婚", date(2021, 1, 1), "year"),
    ("明年换工作", date(2024, 1, 1), "year"),
    ("去年5月去了北京", date(2022, 5, 1), "month"),
    ("去年十二月二十五日", date(2022, 12, 25), "day"),
    # Chinese counts ago
    ("三天前丢了钥匙", date(2023, 5, 7), "day"),
    ("3天前", date(2023, 5, 7), "day"),
    ("两周前见过", date(2023, 4, 24), "week"),
    ("两个星期之前", date(2023, 4, 24), "week"),
    ("一个月前开始", date(2023, 4, 1), "month"),
    ("十年前", date(2013, 1, 1), "year"),
    # Chinese absolute
    ("2023年5月7日是周日", date(2023, 5, 7), "day"),
    ("2021年3月8号入职", date(2021, 3, 8), "day"),
    ("2020年6月", date(2020, 6, 1), "month"),
    ("2019年", date(2019, 1, 1), "year"),
    ("5月7日考试", date(2023, 5, 7), "day"),
    ("十月一日放假", date(2023, 10, 1), "day"),
    ("12月去旅游", date(2023, 12, 1), "month"),
    ("七月份", date(2023, 7, 1), "month"),
]


@pytest.mark.parametrize(("text", "day", "precision"), STATEMENTS)
def test_a_stated_date_is_resolved_against_when_it_was_said(
    text: str, day: date, precision: str
) -> None:
    resolved = resolve_date(text, SAID)

    assert resolved is not None, text
    assert (resolved.occurred_at.date(), resolved.precision) == (day, precision)
    assert resolved.occurred_at == datetime(day.year, day.month, day.day, tzinfo=TZ)
    assert resolved.phrase in text


NO_DATE = [
    "May I ask you something?",
    "we march on",
    "I like tea",
    "call me in a bit",
    "the report has 31 pages",
    "我喜欢喝茶",
    "一个人去的",
    "31 February 2023",
    "2023-02-30",
    "13月",
    "",
]


@pytest.mark.parametrize("text", NO_DATE)
def test_a_text_without_a_date_gives_none(text: str) -> None:
    assert resolve_date(text, SAID) is None


def test_the_first_date_of_a_text_wins() -> None:
    resolved = resolve_date("yesterday we planned the trip for next Friday", SAID)

    assert resolved is not None
    assert (resolved.occurred_at.date(), resolved.phrase) == (date(2023, 5, 9), "yesterday")


def test_the_longest_phrase_at_one_place_wins() -> None:
    resolved = resolve_date("去年5月3日", SAID)

    assert resolved is not None
    assert (resolved.occurred_at.date(), resolved.precision) == (date(2022, 5, 3), "day")


def test_the_reference_time_zone_is_kept() -> None:
    naive = datetime(2023, 1, 1, 0, 30)

    resolved = resolve_date("yesterday", naive)

    assert resolved is not None
    assert resolved.occurred_at == datetime(2022, 12, 31)


def midnight(year: int, month: int, day: int) -> datetime:
    return datetime(year, month, day, tzinfo=TZ)


QUERIES: list[tuple[str, tuple[datetime, datetime]]] = [
    ("what did I do yesterday?", (midnight(2023, 5, 9), midnight(2023, 5, 10))),
    ("what happened last week", (midnight(2023, 5, 1), midnight(2023, 5, 8))),
    ("anything planned this week", (midnight(2023, 5, 8), midnight(2023, 5, 15))),
    ("what did we decide in May?", (midnight(2023, 5, 1), midnight(2023, 6, 1))),
    ("what did we decide in July?", (midnight(2022, 7, 1), midnight(2022, 8, 1))),
    ("meetings last month", (midnight(2023, 4, 1), midnight(2023, 5, 1))),
    ("what was the plan in March 2021", (midnight(2021, 3, 1), midnight(2021, 4, 1))),
    ("trips last year", (midnight(2022, 1, 1), midnight(2023, 1, 1))),
    ("what did I say on Friday", (midnight(2023, 5, 5), midnight(2023, 5, 6))),
    ("three days ago?", (midnight(2023, 5, 7), midnight(2023, 5, 8))),
    ("What about 2023-04-30", (midnight(2023, 4, 30), midnight(2023, 5, 1))),
    ("上个月说了什么", (midnight(2023, 4, 1), midnight(2023, 5, 1))),
    ("去年的计划", (midnight(2022, 1, 1), midnight(2023, 1, 1))),
    ("昨天聊了什么", (midnight(2023, 5, 9), midnight(2023, 5, 10))),
    ("上周五的会议", (midnight(2023, 5, 5), midnight(2023, 5, 6))),
    ("上周做了什么", (midnight(2023, 5, 1), midnight(2023, 5, 8))),
    ("8月的旅行", (midnight(2022, 8, 1), midnight(2022, 9, 1))),
    ("周六去哪了", (midnight(2023, 5, 6), midnight(2023, 5, 7))),
    # A date with its year wins over relative words: the question is about that day.
    ("what did she finish last Friday on 23 January, 2022?", (midnight(2022, 1, 23),
                                                               midnight(2022, 1, 24))),
    ("the issue last week, as mentioned on November 6, 2023", (midnight(2023, 11, 6),
                                                                midnight(2023, 11, 7))),
    ("the picture shared on December 1,2023", (midnight(2023, 12, 1), midnight(2023, 12, 2))),
]  # fmt: skip


@pytest.mark.parametrize(("query", "expected"), QUERIES)
def test_a_query_with_a_time_intent_gives_its_range(
    query: str, expected: tuple[datetime, datetime]
) -> None:
    assert time_range_of_query(query, SAID) == expected


@pytest.mark.parametrize(
    "query", ["which database do we use?", "what is my daughter's name", "我们用的是什么数据库"]
)
def test_a_query_without_a_time_intent_gives_none(query: str) -> None:
    assert time_range_of_query(query, SAID) is None


def test_one_text_is_resolved_against_each_clock_it_is_given() -> None:
    # The rules' matches are remembered by text (recall and its read ahead both look): what
    # they resolve to is not, so the same question asked on another day means another week.
    asked = "what did we decide last week?"
    first = time_range_of_query(asked, datetime(2023, 5, 10, 12, tzinfo=UTC))
    later = time_range_of_query(asked, datetime(2023, 6, 21, 12, tzinfo=UTC))
    assert first == (datetime(2023, 5, 1, tzinfo=UTC), datetime(2023, 5, 8, tzinfo=UTC))
    assert later == (datetime(2023, 6, 12, tzinfo=UTC), datetime(2023, 6, 19, tzinfo=UTC))
    said = "I moved to Cork on 3 March"
    days = [resolve_date(said, datetime(year, 5, 1, tzinfo=UTC)) for year in (2024, 2025)]
    assert [day and day.occurred_at for day in days] == [
        datetime(2024, 3, 3, tzinfo=UTC),
        datetime(2025, 3, 3, tzinfo=UTC),
    ]

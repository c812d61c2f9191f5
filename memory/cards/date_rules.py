"""The date phrases of English and Chinese (their words, their patterns, the calendar period each
names relative to a day): the rule table that grows with every phrase supported, apart from
``memory.cards.dates``, which holds the public functions and how one phrase is chosen."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, timedelta

from memory.cards.date_direction import Lean
from memory.cards.model import DatePrecision

__all__ = ["RULES", "Period", "Rule", "add_months", "period_end"]


@dataclass(frozen=True, slots=True)
class Period:
    """A day, a week (from Monday), a month or a year, by its first day."""

    start: date
    precision: DatePrecision


_MONTHS = {
    name: number
    for number, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ],
        start=1,
    )
    for name in names
}
_WEEKDAYS = {
    name: number
    for number, names in enumerate(
        [
            ("monday", "mon"),
            ("tuesday", "tue", "tues"),
            ("wednesday", "wed"),
            ("thursday", "thu", "thur", "thurs"),
            ("friday", "fri"),
            ("saturday", "sat"),
            ("sunday", "sun"),
        ]
    )
    for name in names
}
_ENGLISH_NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "a couple of": 2,
}  # fmt: skip
_CJK_DIGITS = {"零": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7,
               "八": 8, "九": 9}  # fmt: skip
_CJK_WEEKDAYS = {"一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6}

_MONTH = "|".join(sorted(_MONTHS, key=len, reverse=True))
_WEEKDAY = "|".join(sorted(_WEEKDAYS, key=len, reverse=True))
_COUNT = r"\d+|a couple of|" + "|".join(sorted(_ENGLISH_NUMBERS, key=len, reverse=True))
_CJK_NUMBER = r"[\d零一二两三四五六七八九十]+"
_DAY_SUFFIX = r"(?:st|nd|rd|th)?"
_UNIT = {"day": "day", "week": "week", "month": "month", "year": "year",
         "天": "day", "日": "day", "周": "week", "星期": "week", "个星期": "week",
         "个礼拜": "week", "礼拜": "week", "个月": "month", "年": "year"}  # fmt: skip


def _number(text: str) -> int | None:
    """An Arabic, English or Chinese number below 100 (``12``, ``two``, ``二十三``, ``两``);
    ``None`` for digits that make no such number (``三四``, "three or four"; ``十十``)."""
    text = text.strip().lower()
    if text.isdigit():
        return int(text)
    if text in _ENGLISH_NUMBERS:
        return _ENGLISH_NUMBERS[text]
    tens, ten, ones = text.partition("十")
    if not ten:
        return _CJK_DIGITS.get(text)
    if len(tens) > 1 or len(ones) > 1 or not {tens, ones} <= {"", *_CJK_DIGITS}:
        return None
    return (_CJK_DIGITS[tens] if tens else 1) * 10 + (_CJK_DIGITS[ones] if ones else 0)


def _count_away(count: str, today: date, unit: str, sign: int) -> Period | None:
    """The period ``count`` units after (``sign`` 1) or before (-1) ``today``."""
    number = _number(count)
    return None if number is None else _shift(today, sign * number, unit)


def _month_start(day: date) -> date:
    return day.replace(day=1)


def add_months(day: date, months: int) -> date:
    """The first day of the month ``months`` after ``day``'s month (negative: before)."""
    index = day.year * 12 + day.month - 1 + months
    return date(index // 12, index % 12 + 1, 1)


def _week_start(day: date) -> date:
    return day - timedelta(days=day.weekday())


def period_end(period: Period) -> date:
    """The day after the period's last day."""
    if period.precision == "day":
        return period.start + timedelta(days=1)
    if period.precision == "week":
        return period.start + timedelta(weeks=1)
    if period.precision == "month":
        return add_months(period.start, 1)
    return date(period.start.year + 1, 1, 1)


def _shift(today: date, amount: int, unit: str) -> Period | None:
    """The period ``amount`` units away from ``today`` (negative is the past); ``None`` when
    that is outside the calendar (``5000年前``)."""
    try:
        if unit == "day":
            return Period(today + timedelta(days=amount), "day")
        if unit == "week":
            return Period(_week_start(today) + timedelta(weeks=amount), "week")
        if unit == "month":
            return Period(add_months(today, amount), "month")
        return Period(date(today.year + amount, 1, 1), "year")
    except (ValueError, OverflowError):
        return None


def _dated(year: int, month: int, day: int | None = None) -> Period | None:
    try:
        return Period(date(year, month, day or 1), "day" if day else "month")
    except ValueError:  # 31 February and the like: not a date, so no date
        return None


#: How many years either way a day without a year is looked for: 29 February recurs in four.
_LEAP_YEARS = 4


def _in_year(today: date, month: int, day: int | None, lean: Lean) -> Period | None:
    """A month (or a day of it) without a year, the way ``lean`` points from ``today``.

    ``forward``: the first that has not ended by ``today``; ``backward``: the last that has
    begun by it; ``nearest``: the one closest to it (of two as close, this year's, then the
    earlier). ``None`` when no year has that day (31 February).
    """
    years = range(today.year - _LEAP_YEARS, today.year + _LEAP_YEARS + 1)
    found = [period for year in years if (period := _dated(year, month, day)) is not None]
    if lean == "forward":
        return next((p for p in found if period_end(p) > today), None)
    if lean == "backward":
        return next((p for p in reversed(found) if p.start <= today), None)
    return min(
        found,
        key=lambda p: (_days_between(p, today), p.start.year != today.year, p.start),
        default=None,
    )


def _days_between(period: Period, today: date) -> int:
    """Days from ``today`` to the nearest day of ``period`` (0 inside it)."""
    if today < period.start:
        return (period.start - today).days
    return max((today - period_end(period)).days + 1, 0)


def _relative_month(today: date, month: int, which: str) -> Period:
    """``last May`` (the latest May before this month), ``next May``, ``this May``."""
    year = today.year
    if which == "last" and month >= today.month:
        year -= 1
    elif which == "next" and month <= today.month:
        year += 1
    return Period(date(year, month, 1), "month")


def _relative_weekday(today: date, weekday: int, which: str) -> Period:
    """``last`` (the latest before ``today``), ``next`` (the first after it), or ``this``."""
    if which == "last":
        back = (today.weekday() - weekday) % 7 or 7
        return Period(today - timedelta(days=back), "day")
    if which == "next":
        ahead = (weekday - today.weekday()) % 7 or 7
        return Period(today + timedelta(days=ahead), "day")
    return Period(_week_start(today) + timedelta(days=weekday), "day")


# A rule reads one pattern's match, the reference day and, when it needs it (a date without a
# year, a bare weekday), the way its sentence points: read only then, as it costs a few scans.
_LeanOf = Callable[[], Lean]
Rule = Callable[[re.Match[str], date, _LeanOf], "Period | None"]
RULES: list[tuple[re.Pattern[str], Rule]] = []


def _rule(pattern: str) -> Callable[[Rule], Rule]:
    def register(rule: Rule) -> Rule:
        RULES.append((re.compile(pattern, re.IGNORECASE), rule))
        return rule

    return register


@_rule(r"\b(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})\b")
def _iso(match: re.Match[str], today: date, lean: _LeanOf) -> Period | None:
    return _dated(int(match[1]), int(match[2]), int(match[3]))


@_rule(rf"\b(\d{{1,2}}){_DAY_SUFFIX}(?:\s+of)?\s+({_MONTH})\.?,?(?:\s+(\d{{4}}))?\b")
def _day_month_year(match: re.Match[str], today: date, lean: _LeanOf) -> Period | None:
    month = _MONTHS[match[2].lower()]
    if match[3]:
        return _dated(int(match[3]), month, int(match[1]))
    return _in_year(today, month, int(match[1]), lean())


@_rule(rf"\b({_MONTH})\.?\s+(\d{{1,2}}){_DAY_SUFFIX}\b(?:(?:\s*,\s*|\s+)(\d{{4}})\b)?")
def _month_day_year(match: re.Match[str], today: date, lean: _LeanOf) -> Period | None:
    month = _MONTHS[match[1].lower()]
    if match[3]:
        return _dated(int(match[3]), month, int(match[2]))
    return _in_year(today, month, int(match[2]), lean())


@_rule(rf"\b({_MONTH})\.?,?\s+(\d{{4}})\b")
def _month_year(match: re.Match[str], today: date, lean: _LeanOf) -> Period | None:
    return _dated(int(match[2]), _MONTHS[match[1].lower()])


# A bare month name needs a word before it: "May I ask" and "we march on" are not dates.
@_rule(rf"\b(last|next|this|in|since|during|until|by)\s+({_MONTH})\b(?!\.?,?\s+\d{{4}})")
def _named_month(match: re.Match[str], today: date, lean: _LeanOf) -> Period | None:
    which, month = match[1].lower(), _MONTHS[match[2].lower()]
    if which in ("last", "next", "this"):
        return _relative_month(today, month, which)
    if which == "since":
        return _in_year(today, month, None, "backward")
    way = lean()
    if which in ("by", "until") and way == "nearest":
        way = "forward"
    return _in_year(today, month, None, way)


@_rule(r"\b(?:in|during|since)\s+(\d{4})\b")
def _year(match: re.Match[str], today: date, lean: _LeanOf) -> Period | None:
    return Period(date(int(match[1]), 1, 1), "year")


@_rule(r"\b(the\s+day\s+before\s+yesterday|the\s+day\s+after\s+tomorrow|yesterday|today|"
       r"tonight|tomorrow)\b")  # fmt: skip
def _named_day(match: re.Match[str], today: date, lean: _LeanOf) -> Period | None:
    words = " ".join(match[1].lower().split())
    offset = {"the day before yesterday": -2, "yesterday": -1, "today": 0, "tonight": 0,
              "tomorrow": 1, "the day after tomorrow": 2}[words]  # fmt: skip
    return Period(today + timedelta(days=offset), "day")


@_rule(r"\b(last|this|next)\s+(week|month|year)\b")
def _named_period(match: re.Match[str], today: date, lean: _LeanOf) -> Period | None:
    offset = {"last": -1, "this": 0, "next": 1}[match[1].lower()]
    return _shift(today, offset, match[2].lower())


# A bare weekday: the next one for a plan, the last one for the past, else this week's.
_WEEKDAY_WAY: dict[Lean, str] = {"forward": "next", "backward": "last", "nearest": "this"}


@_rule(rf"\b(last|this|next|on)\s+({_WEEKDAY})\b")
def _weekday(match: re.Match[str], today: date, lean: _LeanOf) -> Period | None:
    which = match[1].lower()
    which = _WEEKDAY_WAY[lean()] if which == "on" else which
    return _relative_weekday(today, _WEEKDAYS[match[2].lower()], which)


@_rule(rf"\b({_COUNT})\s+(day|week|month|year)s?\s+ago\b")
def _ago(match: re.Match[str], today: date, lean: _LeanOf) -> Period | None:
    return _count_away(match[1], today, match[2].lower(), -1)


@_rule(
    rf"\bin\s+({_COUNT})\s+(day|week|month|year)s?\b"
    rf"|\b({_COUNT})\s+(day|week|month|year)s?\s+from\s+(?:now|today)\b"
)
def _in_future(match: re.Match[str], today: date, lean: _LeanOf) -> Period | None:
    count, unit = (match[1], match[2]) if match[1] else (match[3], match[4])
    return _count_away(count, today, unit.lower(), 1)


@_rule(r"(\d{4})\s*年\s*(\d{1,2})\s*月\s*(\d{1,2})\s*[日号]")
def _cjk_full(match: re.Match[str], today: date, lean: _LeanOf) -> Period | None:
    return _dated(int(match[1]), int(match[2]), int(match[3]))


@_rule(r"(\d{4})\s*年\s*(\d{1,2})\s*月")
def _cjk_year_month(match: re.Match[str], today: date, lean: _LeanOf) -> Period | None:
    return _dated(int(match[1]), int(match[2]))


@_rule(r"(\d{4})\s*年")
def _cjk_year(match: re.Match[str], today: date, lean: _LeanOf) -> Period | None:
    return Period(date(int(match[1]), 1, 1), "year")


@_rule(
    r"(前年|去年|今年|明年)(?:([\d一二三四五六七八九十]{1,3})月(?:份)?(?:([\d一二三四五六七八九十]{1,3})[日号])?)?"
)
def _cjk_named_year(match: re.Match[str], today: date, lean: _LeanOf) -> Period | None:
    year = today.year + {"前年": -2, "去年": -1, "今年": 0, "明年": 1}[match[1]]
    if not match[2]:
        return Period(date(year, 1, 1), "year")
    month, day = _number(match[2]), _number(match[3]) if match[3] else None
    if month is None or (match[3] and day is None):
        return None
    return _dated(year, month, day)


@_rule(
    r"(?<![\d年])([\d一二三四五六七八九十]{1,3})月(?:份)?(?:([\d一二三四五六七八九十]{1,3})[日号])?"
)
def _cjk_month_day(match: re.Match[str], today: date, lean: _LeanOf) -> Period | None:
    month, day = _number(match[1]), _number(match[2]) if match[2] else None
    if month is None or not 1 <= month <= 12 or (match[2] and day is None):
        return None
    return _in_year(today, month, day, lean())


@_rule(r"大前天|前天|昨天|昨日|今天|今日|今晚|明天|明日|后天")
def _cjk_named_day(match: re.Match[str], today: date, lean: _LeanOf) -> Period | None:
    offset = {"大前天": -3, "前天": -2, "昨天": -1, "昨日": -1, "今天": 0, "今日": 0, "今晚": 0,
              "明天": 1, "明日": 1, "后天": 2}[match[0]]  # fmt: skip
    return Period(today + timedelta(days=offset), "day")


@_rule(r"(上上|上|这|本|下)(?:个)?(周|星期|礼拜)([一二三四五六日天1-7])?")
def _cjk_week(match: re.Match[str], today: date, lean: _LeanOf) -> Period | None:
    weeks = {"上上": -2, "上": -1, "这": 0, "本": 0, "下": 1}[match[1]]
    start = _week_start(today) + timedelta(weeks=weeks)
    if match[3] is None:
        return Period(start, "week")
    day = int(match[3]) - 1 if match[3].isdigit() else _CJK_WEEKDAYS[match[3]]
    return Period(start + timedelta(days=day), "day")


@_rule(r"(?<![上这本下])(?:周|星期|礼拜)([一二三四五六日天])")
def _cjk_weekday(match: re.Match[str], today: date, lean: _LeanOf) -> Period | None:
    return _relative_weekday(today, _CJK_WEEKDAYS[match[1]], _WEEKDAY_WAY[lean()])


@_rule(r"(上上|上|这|本|下)个?月")
def _cjk_month(match: re.Match[str], today: date, lean: _LeanOf) -> Period | None:
    months = {"上上": -2, "上": -1, "这": 0, "本": 0, "下": 1}[match[1]]
    return Period(add_months(today, months), "month")


@_rule(rf"({_CJK_NUMBER})\s*(天|日|个星期|星期|个礼拜|礼拜|周|个月|年)(?:以前|之前|前)")
def _cjk_ago(match: re.Match[str], today: date, lean: _LeanOf) -> Period | None:
    return _count_away(match[1], today, _UNIT[match[2]], -1)


@_rule(rf"({_CJK_NUMBER})\s*(天|日|个星期|星期|个礼拜|礼拜|周|个月|年)(?:以后|之后|后)")
def _cjk_later(match: re.Match[str], today: date, lean: _LeanOf) -> Period | None:
    return _count_away(match[1], today, _UNIT[match[2]], 1)

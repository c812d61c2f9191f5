"""Dates written in words, in English and Chinese, resolved against the time they were said.

``resolve_date("I moved here last May", observed_at)`` gives the start of that May and the
precision ``month``; ``time_range_of_query("what did I do last week?", now)`` gives the week as
a half-open ``[since, until)`` range for recall. Everything is relative to a given datetime,
never to the wall clock, and keeps its time zone.

Conventions (documented because English is ambiguous about them): weeks start on Monday;
"last Friday" is the latest Friday before the day it was said, "next Friday" the first one
after it, "this Friday" the Friday of the same week; 上周五 is Friday of the previous calendar
week. A month or a day without a year is in the year it was said; in a query it is the latest
one that has begun ("in May" asked in March means last May).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from memory.cards.date_rules import RULES, Period, add_months
from memory.cards.model import DatePrecision

__all__ = ["ResolvedDate", "resolve_date", "time_range_of_query"]


@dataclass(frozen=True, slots=True)
class ResolvedDate:
    """A date found in a text.

    Attributes:
        occurred_at: the start of the period (midnight, in the reference's time zone).
        precision: the period's length: a day, a week (from Monday), a month or a year.
        phrase: the words it was read from.
    """

    occurred_at: datetime
    precision: DatePrecision
    phrase: str


_YEAR = re.compile(r"\d{4}")


def _find(
    text: str, reference: datetime, past: bool, *, dated_first: bool = False
) -> tuple[Period, str] | None:
    """The first date phrase of ``text`` (the longest one where several start at one place).

    With ``dated_first``, a phrase naming its year wins over any that does not: in "what did
    she finish last Friday, on 23 January 2022?" the question is about 23 January 2022.

    A phrase that reads as a date but is none (``31 February 2023``) hides the shorter phrases
    inside it (``February 2023``): the text names an impossible day, not a month.
    """
    today = reference.date()
    found: list[tuple[int, int, Period, str]] = []
    impossible: list[tuple[int, int]] = []
    for pattern, rule in RULES:
        for match in pattern.finditer(text):
            period = rule(match, today, past)
            if period is None:
                impossible.append(match.span())
            else:
                found.append((match.start(), match.end(), period, match[0]))
    possible = [
        item
        for item in found
        if not any(
            start <= item[0] and item[1] <= end and end - start > item[1] - item[0]
            for start, end in impossible
        )
    ]
    if dated_first and any(_YEAR.search(item[3]) for item in possible):
        possible = [item for item in possible if _YEAR.search(item[3])]
    if not possible:
        return None
    _, _, period, phrase = min(possible, key=lambda item: (item[0], item[0] - item[1]))
    return period, phrase


def _at_midnight(day: date, reference: datetime) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=reference.tzinfo)


def resolve_date(text: str, observed_at: datetime) -> ResolvedDate | None:
    """The first date ``text`` states, resolved against when it was said.

    Args:
        text: a message or a card's text, English or Chinese.
        observed_at: when it was said; relative dates count from its day, in its time zone.

    Returns:
        The start of the period and its precision, or ``None`` when the text states no date.
    """
    found = _find(text, observed_at, past=False)
    if found is None:
        return None
    period, phrase = found
    return ResolvedDate(_at_midnight(period.start, observed_at), period.precision, phrase)


def _end(period: Period) -> date:
    if period.precision == "day":
        return period.start + timedelta(days=1)
    if period.precision == "week":
        return period.start + timedelta(weeks=1)
    if period.precision == "month":
        return add_months(period.start, 1)
    return date(period.start.year + 1, 1, 1)


def time_range_of_query(query: str, now: datetime) -> tuple[datetime, datetime] | None:
    """The time a question asks about, as a half-open ``[since, until)`` range, if it names one.

    ``"what did we decide last week?"`` gives last Monday to this Monday; ``"in May"`` the latest
    May that has begun; ``"上个月"`` last month; ``"去年"`` last year. A date with its year wins
    over relative words (``"last week, as mentioned on 6 November 2023"`` is about that day).

    Args:
        query: the user's (rewritten) question.
        now: when it is asked.

    Returns:
        ``(since, until)`` at midnight in ``now``'s time zone, or ``None`` for no time intent.
    """
    found = _find(query, now, past=True, dated_first=True)
    if found is None:
        return None
    period = found[0]
    return _at_midnight(period.start, now), _at_midnight(_end(period), now)

"""Dates written in words, in English and Chinese, resolved against the time they were said.

``resolve_date("I moved here last May", observed_at)`` gives the start of that May and the
precision ``month``; ``time_range_of_query("what did I do last week?", now)`` gives the week as
a half-open ``[since, until)`` range for recall. Everything is relative to a given datetime,
never to the wall clock, and keeps its time zone.

Conventions (documented because English is ambiguous about them): weeks start on Monday;
"last Friday" is the latest Friday before the day it was said, "next Friday" the first one
after it, "this Friday" the Friday of the same week; 上周五 is Friday of the previous calendar
week.

A month or a day without a year, and a bare weekday ("on Friday", 周五), point the way their
sentence does (``memory.cards.date_direction``): plans, deadlines and appointments forward
("Report due on 5 April" said in December is the coming April; "on Friday we fly" the first
Friday after), past events backward ("on 5 April I moved" is the April before; "on Friday I was
ill" the last Friday), the day it was said counting both ways. A statement with neither is the
nearest such day (a bare weekday: the one of the same week). A question with neither looks
back: "in May" asked in March means last May, "what is due in May?" the coming one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime
from functools import lru_cache, partial

from memory.cards.date_direction import Lean, lean_reader
from memory.cards.date_rules import RULES, Period, Rule, period_end
from memory.cards.model import DatePrecision
from retrieval.held_texts import hold_cache

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
    text: str, reference: datetime, default: Lean, *, dated_first: bool = False
) -> tuple[Period, str] | None:
    """The first date phrase of ``text`` (the longest one where several start at one place).

    Each phrase is read the way its sentence points (``lean_reader``), ``default`` when the
    sentence does not say.

    With ``dated_first``, a phrase naming its year wins over any that does not: in "what did
    she finish last Friday, on 23 January 2022?" the question is about 23 January 2022.

    A phrase that reads as a date but is none (``31 February 2023``) hides the shorter phrases
    inside it (``February 2023``): the text names an impossible day, not a month.
    """
    today = reference.date()
    lean = lean_reader(text, default)
    first: tuple[Period, str] | None = None
    impossible: list[tuple[int, int]] = []
    for match, rule in _phrases(text):
        start, end = match.span()
        if any(s <= start and end <= e and e - s > end - start for s, e in impossible):
            continue
        period = rule(match, today, partial(lean, match.span()))
        if period is None:
            impossible.append((start, end))
            continue
        if not dated_first or _YEAR.search(match[0]):
            return period, match[0]
        first = first or (period, match[0])
    return first


@hold_cache
@lru_cache(maxsize=256)
def _phrases(text: str) -> tuple[tuple[re.Match[str], Rule], ...]:
    """Every rule's matches in ``text``: in text order, the longest first at one place (stable:
    the rules' order on ties), so a phrase is resolved (and its sentence read) only until the
    answer is known.

    Remembered by text (matches are immutable): a request's input is searched for its time by
    recall and by the search read ahead of it, each against its own clock, and running the
    rules took 175 us each time. A forget empties it (``retrieval.held_texts``): the matches
    hold the text.
    """
    matches = [(match, rule) for pattern, rule in RULES for match in pattern.finditer(text)]
    matches.sort(key=lambda item: (item[0].start(), item[0].start() - item[0].end()))
    return tuple(matches)


def _at_midnight(day: date, reference: datetime) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=reference.tzinfo)


def resolve_date(text: str, observed_at: datetime) -> ResolvedDate | None:
    """The first date ``text`` states, resolved against when it was said.

    A date without a year points the way its sentence does (see the module docstring).

    Args:
        text: a message or a card's text, English or Chinese.
        observed_at: when it was said; relative dates count from its day, in its time zone.

    Returns:
        The start of the period and its precision, or ``None`` when the text states no date.
    """
    found = _find(text, observed_at, "nearest")
    if found is None:
        return None
    period, phrase = found
    return ResolvedDate(_at_midnight(period.start, observed_at), period.precision, phrase)


def time_range_of_query(query: str, now: datetime) -> tuple[datetime, datetime] | None:
    """The time a question asks about, as a half-open ``[since, until)`` range, if it names one.

    ``"what did we decide last week?"`` gives last Monday to this Monday; ``"in May"`` the latest
    May that has begun, ``"what is due in May?"`` the coming one; ``"上个月"`` last month;
    ``"去年"`` last year. A date with its year wins
    over relative words (``"last week, as mentioned on 6 November 2023"`` is about that day).

    Args:
        query: the user's (rewritten) question.
        now: when it is asked.

    Returns:
        ``(since, until)`` at midnight in ``now``'s time zone, or ``None`` for no time intent.
    """
    found = _find(query, now, "backward", dated_first=True)
    if found is None:
        return None
    period = found[0]
    return _at_midnight(period.start, now), _at_midnight(period_end(period), now)

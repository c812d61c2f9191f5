"""Evaluation on knowledge updates: read the data, score a prompt, aggregate per language and kind.

Pure: no database, no model, no console. ``stratamem eval updates`` (``memory.cli.eval_updates``)
records the sessions, asks the questions through ``prepare``, and hands this module the text of
each prompt. A question is scored on the context memory built for it (every message before the
question itself, which would otherwise match its own words):

- current in prompt: the value that holds now (for a ``previous`` question, the value before the
  latest one) appears in the prompt;
- current first: it appears, and before every ``stale`` value that appears (questions with stale
  values only);
- stale present: a stale value appears at all (questions with stale values only).

A value matches as a whole word, case-insensitively (``Pixel 8`` is not in ``Pixel 8a``,
``vegan`` not in ``veganism``); Chinese text has no word boundaries, so it matches anywhere.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from statistics import fmean
from typing import Any, Literal

__all__ = [
    "KINDS",
    "LANGUAGES",
    "MESSAGE_GAP",
    "UpdateQuestion",
    "UpdateScore",
    "UpdateScoreRow",
    "UpdateSession",
    "UpdateUser",
    "UpdatesFormatError",
    "find_value",
    "load_updates",
    "parse_user",
    "score_prompt",
    "session_messages",
    "summarize",
]

Kind = Literal["update", "stable", "previous"]
#: The kinds of question, in the order tables show them.
KINDS: tuple[Kind, ...] = ("update", "previous", "stable")
#: The languages tables know, in their order; others follow by name.
LANGUAGES = ("en", "zh")
#: How far apart the messages of a session are recorded, from the session's date on.
MESSAGE_GAP = timedelta(minutes=1)


class UpdatesFormatError(ValueError):
    """The file is not knowledge-update data: not JSON, or a user lacks what every user has."""


@dataclass(frozen=True, slots=True)
class UpdateSession:
    """One dated session: its id, when it began, its messages as (role, content) in order."""

    id: str
    date: datetime
    messages: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class UpdateQuestion:
    """A question and the values that score it.

    Attributes:
        text: what is asked.
        current: the value the answer needs (for ``previous``: the value before the latest).
        stale: values that held earlier and must not come before ``current``.
        kind: ``update`` (the fact changed), ``stable`` (said once) or ``previous``.
        lang: the question's language (``en``, ``zh``).
    """

    text: str
    current: str
    stale: tuple[str, ...]
    kind: Kind
    lang: str


@dataclass(frozen=True, slots=True)
class UpdateUser:
    """One user: the sessions in order and the questions asked at ``ask_date``."""

    user: str
    ask_date: datetime
    sessions: tuple[UpdateSession, ...]
    questions: tuple[UpdateQuestion, ...]


@dataclass(frozen=True, slots=True)
class UpdateScore:
    """How the prompt of one question did, and the prompt's text that was scored."""

    question: UpdateQuestion
    current_in: bool
    current_first: bool
    stale_present: bool
    prompt: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class UpdateScoreRow:
    """Shares over a group of questions; ``None`` where no question of it has stale values."""

    name: str
    questions: int
    current_in: float
    current_first: float | None
    stale_present: float | None

    def as_json(self) -> dict[str, Any]:
        """The row as a JSON object (without its name)."""
        return {
            "questions": self.questions,
            "current_in_prompt": self.current_in,
            "current_first": self.current_first,
            "stale_present": self.stale_present,
        }


# --- reading ------------------------------------------------------------------------------


def load_updates(path: Path) -> list[UpdateUser]:
    """Read a knowledge-update JSON file (a list of users).

    Raises:
        OSError: The file cannot be read.
        UpdatesFormatError: It is not JSON, or not a list of users of that format.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise UpdatesFormatError(f"{path} is not valid JSON: {error}") from error
    if not isinstance(data, list):
        raise UpdatesFormatError(f"{path} is not a list of users")
    return [parse_user(raw, position) for position, raw in enumerate(data)]


def parse_user(raw: Any, position: int = 0) -> UpdateUser:
    """Turn one user object into an ``UpdateUser``.

    Raises:
        UpdatesFormatError: A field is missing or of the wrong shape (names the user's position).
    """
    try:
        sessions = tuple(
            UpdateSession(
                str(session["id"]),
                _time(session["date"]),
                tuple((str(m["role"]), str(m["content"])) for m in session["messages"]),
            )
            for session in raw["sessions"]
        )
        questions = tuple(
            UpdateQuestion(
                str(q["q"]),
                str(q["current"]),
                tuple(str(value) for value in q.get("stale") or ()),
                _kind(q["kind"]),
                str(q["lang"]),
            )
            for q in raw["questions"]
        )
        return UpdateUser(str(raw["user"]), _time(raw["ask_date"]), sessions, questions)
    except (KeyError, TypeError, ValueError) as error:
        raise UpdatesFormatError(
            f"user {position} is not a knowledge-update user: {error!r}"
        ) from error


def _time(raw: Any) -> datetime:
    """An ISO 8601 time; naive means UTC."""
    moment = datetime.fromisoformat(str(raw))
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _kind(raw: Any) -> Kind:
    for kind in KINDS:
        if raw == kind:
            return kind
    raise ValueError(f"kind {raw!r} is none of {', '.join(KINDS)}")


def session_messages(session: UpdateSession) -> list[dict[str, Any]]:
    """The messages ``record`` takes for one session, ``MESSAGE_GAP`` apart from its date."""
    return [
        {"role": role, "content": content, "timestamp": session.date + position * MESSAGE_GAP}
        for position, (role, content) in enumerate(session.messages)
    ]


# --- scoring ------------------------------------------------------------------------------


def find_value(text: str, value: str) -> int | None:
    """Where ``value`` first occurs in ``text`` as a whole word (case-insensitive), if it does."""
    if not value.strip():
        return None
    pattern = re.escape(value.strip())
    # Word boundaries only where the value has word characters at its ends: "C++" and 天津 have
    # none that \b could anchor, and Chinese words run into each other with no boundary at all.
    if re.match(r"[A-Za-z0-9]", value.strip()):
        pattern = r"(?<![\w])" + pattern
    if re.search(r"[A-Za-z0-9]$", value.strip()):
        pattern += r"(?![\w])"
    found = re.search(pattern, text, re.IGNORECASE)
    return found.start() if found else None


def score_prompt(question: UpdateQuestion, prompt: str) -> UpdateScore:
    """Score the text of the context built for ``question`` (the question itself left out)."""
    current = find_value(prompt, question.current)
    stale = [at for value in question.stale if (at := find_value(prompt, value)) is not None]
    return UpdateScore(
        question,
        current_in=current is not None,
        current_first=current is not None and all(current < at for at in stale),
        stale_present=bool(stale),
        prompt=prompt,
    )


def summarize(scores: Sequence[UpdateScore]) -> list[UpdateScoreRow]:
    """Rows per language and kind (``en update``), then per language (``en``), then ``all``.

    Languages in ``LANGUAGES`` order, then others by name; kinds in ``KINDS`` order; groups with
    no question are left out.
    """
    languages = sorted(
        {s.question.lang for s in scores},
        key=lambda lang: (LANGUAGES.index(lang) if lang in LANGUAGES else len(LANGUAGES), lang),
    )
    rows: list[UpdateScoreRow] = []
    for lang in languages:
        for kind in KINDS:
            group = [s for s in scores if s.question.lang == lang and s.question.kind == kind]
            if group:
                rows.append(_row(f"{lang} {kind}", group))
    rows += [_row(lang, [s for s in scores if s.question.lang == lang]) for lang in languages]
    return [*rows, _row("all", scores)]


def _row(name: str, scores: Sequence[UpdateScore]) -> UpdateScoreRow:
    """Shares over ``scores``; the stale columns over the questions that have stale values."""
    with_stale = [s for s in scores if s.question.stale]
    return UpdateScoreRow(
        name,
        len(scores),
        fmean(s.current_in for s in scores) if scores else 0.0,
        fmean(s.current_first for s in with_stale) if with_stale else None,
        fmean(s.stale_present for s in with_stale) if with_stale else None,
    )

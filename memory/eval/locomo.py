"""Evaluation on LoCoMo: read the data, score recalled sources against evidence, aggregate.

Pure: no database, no model, no console. ``stratamem eval locomo`` (``memory.cli.eval``) ingests
and searches; this module says what the conversations are and how well a search did:

- evidence recall@k: the share of a question's evidence dialog ids (``D1:3``) found among the
  sources of the recalled cards;
- reciprocal rank: 1 / the rank of the first recalled card holding any evidence id (0 if none);
- token share: the tokens of the recalled cards' texts over the whole conversation's tokens.

Malformed evidence ids (not ``D<session>:<turn>``) and ids pointing at no turn are counted per
conversation and skipped, never an error; a question left with no evidence is not scored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from statistics import fmean
from typing import Any

from retrieval.turns import day_text, speaker_line

__all__ = [
    "CATEGORIES",
    "Conversation",
    "LocomoFormatError",
    "Question",
    "QuestionScore",
    "Recalled",
    "ScoreRow",
    "Session",
    "Turn",
    "conversation_tokens",
    "evidence_recall",
    "load_locomo",
    "parse_conversation",
    "parse_evidence",
    "parse_session_time",
    "reciprocal_rank",
    "score_question",
    "summarize",
    "turn_line",
]

#: LoCoMo's question categories, in the order tables show them.
CATEGORIES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}

_DIALOG_ID = re.compile(r"^D(\d+):(\d+)$")
_SESSION_KEY = re.compile(r"^session_(\d+)$")
_TIME_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %B %Y", "%d %B, %Y", "%d %B %Y")


class LocomoFormatError(ValueError):
    """The file is not LoCoMo-shaped: not JSON, or a sample lacks what every sample has."""


@dataclass(frozen=True, slots=True)
class Turn:
    """One turn: its dialog id, who said it, what, and the caption of an image it shared."""

    dia_id: str
    speaker: str
    text: str
    caption: str | None = None


@dataclass(frozen=True, slots=True)
class Session:
    """One LoCoMo session: its number, when it took place (if known), its turns in order."""

    number: int
    time: datetime | None
    turns: tuple[Turn, ...]


@dataclass(frozen=True, slots=True)
class Question:
    """A question with its category, its valid evidence dialog ids (at least one), and its
    gold answer as text (``None``: the item has none, as LoCoMo's adversarial ones)."""

    text: str
    category: int
    evidence: tuple[str, ...]
    answer: str | None = None


@dataclass(frozen=True, slots=True)
class Conversation:
    """A conversation: its sessions, the questions that have evidence, the ids it skipped.

    Attributes:
        sample_id: LoCoMo's id of the conversation (one user each).
        sessions: The sessions in order.
        questions: The questions with at least one valid evidence id.
        malformed: Evidence ids that are not dialog ids.
        missing: Well-formed evidence ids that point at no turn of the conversation.
    """

    sample_id: str
    sessions: tuple[Session, ...]
    questions: tuple[Question, ...]
    malformed: int = 0
    missing: int = 0

    @property
    def turns(self) -> list[Turn]:
        """Every turn, in conversation order."""
        return [turn for session in self.sessions for turn in session.turns]


@dataclass(frozen=True, slots=True)
class Recalled:
    """A recalled card as scoring sees it: its text and its sources (dialog ids)."""

    text: str
    sources: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class QuestionScore:
    """How one search did for one question."""

    category: int
    recall: float
    reciprocal_rank: float
    token_share: float


@dataclass(frozen=True, slots=True)
class ScoreRow:
    """Means over a group of questions (a category, or all of them)."""

    name: str
    questions: int
    recall: float
    mrr: float
    token_share: float

    def as_json(self) -> dict[str, Any]:
        """The row as a JSON object (without its name)."""
        return {
            "questions": self.questions,
            "recall": self.recall,
            "mrr": self.mrr,
            "token_share": self.token_share,
        }


# --- reading ------------------------------------------------------------------------------


def load_locomo(path: Path) -> list[Conversation]:
    """Read a LoCoMo JSON file (a list of samples).

    Raises:
        OSError: The file cannot be read.
        LocomoFormatError: It is not JSON, or not a list of LoCoMo samples.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise LocomoFormatError(f"{path} is not valid JSON: {error}") from error
    if not isinstance(data, list):
        raise LocomoFormatError(f"{path} is not a list of LoCoMo samples")
    return [parse_conversation(sample, position) for position, sample in enumerate(data)]


def parse_conversation(sample: Any, position: int = 0) -> Conversation:
    """Turn one LoCoMo sample into a ``Conversation``.

    Raises:
        LocomoFormatError: The sample has no ``sample_id``, ``conversation`` or ``qa``.
    """
    try:
        sample_id = str(sample["sample_id"])
        raw = sample["conversation"]
        qa = sample["qa"]
        sessions = tuple(_sessions(raw))
    except (KeyError, TypeError, ValueError) as error:
        raise LocomoFormatError(f"sample {position} is not a LoCoMo sample: {error!r}") from error
    known = {turn.dia_id for session in sessions for turn in session.turns}
    questions: list[Question] = []
    malformed = missing = 0
    for item in qa if isinstance(qa, list) else []:
        if not isinstance(item, dict):
            continue
        evidence, bad, dangling = parse_evidence(item.get("evidence") or [], known)
        malformed, missing = malformed + bad, missing + dangling
        if evidence and "question" in item and "category" in item:
            answer = item.get("answer")
            questions.append(
                Question(
                    str(item["question"]),
                    int(item["category"]),
                    evidence,
                    None if answer is None else str(answer),
                )
            )
    return Conversation(sample_id, sessions, tuple(questions), malformed, missing)


def _sessions(raw: dict[str, Any]) -> Iterable[Session]:
    """The sessions of a sample's ``conversation`` object, by number."""
    numbers = sorted(int(m.group(1)) for key in raw if (m := _SESSION_KEY.match(key)))
    for number in numbers:
        turns = tuple(
            Turn(str(t["dia_id"]), str(t["speaker"]), str(t["text"]), t.get("blip_caption"))
            for t in raw[f"session_{number}"]
        )
        yield Session(number, parse_session_time(raw.get(f"session_{number}_date_time", "")), turns)


def parse_session_time(raw: str) -> datetime | None:
    """Parse LoCoMo's ``1:56 pm on 8 May, 2023`` (or a bare day) as UTC; None if neither."""
    text = " ".join(str(raw).split())
    for layout in _TIME_FORMATS:
        try:
            return datetime.strptime(text, layout).replace(tzinfo=UTC)
        except ValueError:
            continue
    return None


def parse_evidence(items: Sequence[Any], known: set[str]) -> tuple[tuple[str, ...], int, int]:
    """Split, validate and de-duplicate a question's evidence ids.

    Some ids are several run together (``"D8:6; D9:17"``): each part is checked on its own.

    Returns:
        The valid ids in order, how many parts were malformed, how many pointed at no turn.
    """
    valid: list[str] = []
    malformed = missing = 0
    for item in items:
        for part in re.split(r"[;,\s]+", str(item).strip()):
            if not part:
                continue
            if not _DIALOG_ID.match(part):
                malformed += 1
            elif part not in known:
                missing += 1
            elif part not in valid:
                valid.append(part)
    return tuple(valid), malformed, missing


# --- scoring ------------------------------------------------------------------------------


def evidence_recall(evidence: Sequence[str], recalled: Sequence[Recalled]) -> float:
    """The share of ``evidence`` found among the sources of ``recalled`` (1.0 if no evidence)."""
    if not evidence:
        return 1.0
    found = {source for card in recalled for source in card.sources}
    return sum(1 for item in evidence if item in found) / len(evidence)


def reciprocal_rank(evidence: Sequence[str], recalled: Sequence[Recalled]) -> float:
    """1 / the rank of the first recalled card holding any evidence id; 0 when none does."""
    wanted = set(evidence)
    for rank, card in enumerate(recalled, start=1):
        if wanted.intersection(card.sources):
            return 1 / rank
    return 0.0


def turn_line(turn: Turn) -> str:
    """``Speaker: text``, with the shared image's caption when there is one."""
    return speaker_line(turn.speaker, turn.text, turn.caption)


def conversation_tokens(conversation: Conversation, count: Callable[[str], int]) -> int:
    """Tokens of the whole conversation: each session's date once, then its turns' lines."""
    total = 0
    for session in conversation.sessions:
        if session.time is not None:
            total += count(day_text(session.time))
        total += sum(count(turn_line(turn)) for turn in session.turns)
    return total


def score_question(
    question: Question,
    recalled: Sequence[Recalled],
    *,
    full_tokens: int,
    count: Callable[[str], int],
) -> QuestionScore:
    """Score one search: recall, reciprocal rank, and the recalled texts' share of tokens."""
    tokens = sum(count(card.text) for card in recalled)
    return QuestionScore(
        category=question.category,
        recall=evidence_recall(question.evidence, recalled),
        reciprocal_rank=reciprocal_rank(question.evidence, recalled),
        token_share=tokens / full_tokens if full_tokens else 0.0,
    )


def summarize(scores: Sequence[QuestionScore]) -> list[ScoreRow]:
    """One row per category that has questions (in ``CATEGORIES`` order), then ``overall``.

    Categories outside ``CATEGORIES`` get a row named ``category N`` after the known ones.
    """
    categories = sorted({s.category for s in scores}, key=lambda c: (c not in CATEGORIES, c))
    rows = [
        _row(CATEGORIES.get(c, f"category {c}"), [s for s in scores if s.category == c])
        for c in categories
    ]
    return [*rows, _row("overall", scores)]


def _row(name: str, scores: Sequence[QuestionScore]) -> ScoreRow:
    """Means over ``scores`` (zeros when there are none)."""
    if not scores:
        return ScoreRow(name, 0, 0.0, 0.0, 0.0)
    return ScoreRow(
        name,
        len(scores),
        fmean(s.recall for s in scores),
        fmean(s.reciprocal_rank for s in scores),
        fmean(s.token_share for s in scores),
    )

"""The words sent to a model for card extraction and query rewriting, and how messages render.

The card rules and the reply schema are written once (``CARD_RULES``, ``CARD_SCHEMA``, and
``CARD_JSON_SCHEMA`` for JSON mode): the extraction-only request and the fold's shared request
(``memory.longterm.summary_and_cards``) both use them, so the two cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from typing import Any

from memory.cards.model import SourceMessage
from memory.context.cut import cut_to_chars, one_line
from memory.llm import ReplyFormat

__all__ = [
    "CARD_JSON_SCHEMA",
    "CARD_RULES",
    "CARD_SCHEMA",
    "EXTRACTION_FORMAT",
    "EXTRACTION_INSTRUCTIONS",
    "REWRITE_FORMAT",
    "REWRITE_INSTRUCTIONS",
    "date_line",
    "render_numbered",
]

#: What a card is, what to keep and what to skip; the sources are "numbered lines".
CARD_RULES = """\
Keep: the user's identity and profile (name, age, job, where they live); preferences; confirmed \
facts and decisions; tasks and their state (open or done); dated events. \
Skip chit-chat, questions, and the assistant's own guesses and suggestions the user did not \
confirm. A card is one short statement that stands on its own, about the user in the third \
person ("User lives in Porto") or neutral, in the language of the line it comes from (Chinese \
lines give Chinese cards: "用户叫王芳"). Never translate names. Write absolute dates: \
resolve relative ones ("yesterday", "上周五") against the line's date."""

#: One card as JSON; a newer card on the same subject and attribute replaces the older one.
CARD_SCHEMA = """\
{"type": "fact|preference|task|event|profile", "text": "...", "topic": "short label", \
"tags": [], "occurred_at": "YYYY-MM-DD|YYYY-MM|YYYY|null", "subject": "who it is about, e.g. \
user", "attribute": "what it sets, e.g. city, employer, preference:coffee", "source": [line \
numbers]}; a newer card with the same subject and attribute replaces the older one, so name \
attributes the same way each time."""

#: ``CARD_SCHEMA`` as a JSON Schema, for JSON mode: the fields the reply's parser reads
#: (``memory.cards.extract.ReplyCard``). Strict JSON mode wants every field required, so a field
#: a card may lack is nullable instead of optional.
CARD_JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "type": {"type": "string", "enum": ["fact", "preference", "task", "event", "profile"]},
        "text": {"type": "string"},
        "topic": {"type": ["string", "null"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "occurred_at": {"type": ["string", "null"]},
        "subject": {"type": ["string", "null"]},
        "attribute": {"type": ["string", "null"]},
        "source": {"type": "array", "items": {"type": "integer"}, "minItems": 1},
    },
    "required": [
        "type", "text", "topic", "tags", "occurred_at", "subject", "attribute", "source",
    ],
    "additionalProperties": False,
}  # fmt: skip

#: The extractor's system message.
EXTRACTION_INSTRUCTIONS = f"""\
You extract long-term memory cards from a conversation between a user and an AI assistant. You \
get its lines numbered [n]; "-- YYYY-MM-DD" dates the lines after it.
{CARD_RULES}
Reply with JSON only: {{"cards": [card, ...]}}, each card {CARD_SCHEMA} \
Reply {{"cards": []}} when nothing is worth keeping."""

#: The query rewriter's system message.
REWRITE_INSTRUCTIONS = """\
You rewrite the user's latest message into a self-contained search query for a memory store. \
Replace pronouns and references ("it", "that", "this one", "they", "这个", "那个", "它", \
"上面的", "上次说的") with what they refer to in the recent conversation. Keep the user's \
language and wording otherwise; never translate; add nothing else. When there is nothing to \
resolve, return the message unchanged.
Reply with JSON only: {"query": "..."}"""

#: The extractor's reply as a JSON Schema, for JSON mode.
EXTRACTION_FORMAT = ReplyFormat(
    "cards",
    {
        "type": "object",
        "properties": {"cards": {"type": "array", "items": CARD_JSON_SCHEMA}},
        "required": ["cards"],
        "additionalProperties": False,
    },
)
#: The query rewriter's reply as a JSON Schema, for JSON mode.
REWRITE_FORMAT = ReplyFormat(
    "query",
    {
        "type": "object",
        "properties": {"query": {"type": "string"}},
        "required": ["query"],
        "additionalProperties": False,
    },
)


def date_line(day: date) -> str:
    """The line that dates the lines after it: ``-- 2024-05-03``.

    A date is written once for the lines that share it, not on every line: most folds hold
    one or two days, so repeating it would send the same text again and again.
    """
    return f"-- {day.isoformat()}"


def render_numbered(messages: Sequence[SourceMessage], chars_per_message: int) -> str:
    """One line per message, ``[n] role: text``, numbered from 1, each cut; dated by day."""
    lines: list[str] = []
    day: date | None = None
    for number, message in enumerate(messages, start=1):
        if message.time.date() != day:
            day = message.time.date()
            lines.append(date_line(day))
        lines.append(
            cut_to_chars(f"[{number}] {message.role}: {one_line(message.text)}", chars_per_message)
        )
    return "\n".join(lines)

"""The text of a ``turn`` card: a message with its neighbours and its date, as measured best.

A turn card holds one line per message, in the order of its sources, so that recall can take
it apart again (``split_turn_card``): overlapping cards are merged line by line, never sent
twice.
"""

import re
from collections.abc import Sequence
from datetime import date

from pydantic import BaseModel, ConfigDict

from retrieval.recipe import DEFAULT_SEARCH

__all__ = [
    "TurnCardText",
    "Utterance",
    "captioned",
    "day_label",
    "day_text",
    "speaker_line",
    "split_turn_card",
    "turn_card_text",
    "turn_window",
]

# "[8 May 2023] " at the start of a dated turn card.
_DAY_PREFIX = re.compile(r"^\[(\d{1,2} [A-Z][a-z]+ \d{4})\] ")


class Utterance(BaseModel):
    """One message as a turn card shows it: who said what, and an image's caption if any."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    speaker: str
    text: str
    caption: str | None = None


def turn_window(
    count: int,
    index: int,
    *,
    before: int = DEFAULT_SEARCH.turn_before,
    after: int = DEFAULT_SEARCH.turn_after,
) -> range:
    """Return the positions of a turn and its neighbours among ``count`` messages of a session.

    One message before and one after by default (``SearchConfig.turn_before``/``turn_after``):
    on LoCoMo this lifted recall@10 from 0.71 to 0.87 (BENCHMARKS.md).

    Raises:
        IndexError: ``index`` is not a position in the session.
    """
    if not 0 <= index < count:
        raise IndexError(f"turn {index} is not in a session of {count} messages")
    return range(max(0, index - before), min(count, index + after + 1))


def turn_card_text(utterances: Sequence[Utterance], *, day: date | None = None) -> str:
    """Render a turn card: ``[8 May 2023] Caroline: ...`` one line per utterance.

    The date goes first because it helps both searches (a question about "May" matches it) and
    because a recalled memory without its date is often useless. An utterance's own line
    breaks become `` / ``, so that line ``i`` is utterance ``i`` (``split_turn_card``).

    Args:
        utterances: The turn and its neighbours, in conversation order (see ``turn_window``).
        day: The day the turn was said, if known.

    Returns:
        The card's text; every utterance's text is in it, so each can be listed as a source.
    """
    lines = []
    for utterance in utterances:
        lines.append(_one_line(speaker_line(utterance.speaker, utterance.text, utterance.caption)))
    body = "\n".join(lines)
    if day is None:
        return body
    return f"{day_label(day)} {body}"


def day_label(day: date) -> str:
    """``[8 May 2023]``: how a memory shows the day it was said."""
    return f"[{day_text(day)}]"


def day_text(day: date) -> str:
    """``8 May 2023``: how memories, excerpts and the evaluation show a day (or a datetime's)."""
    return f"{day.day} {day.strftime('%B')} {day.year}"


def speaker_line(speaker: str, text: str, caption: str | None = None) -> str:
    """``Speaker: text``, with a shared image's caption when there is one: one message's line."""
    return f"{speaker}: {captioned(text, caption)}"


def captioned(text: str, caption: str | None) -> str:
    """``text``, followed by the caption of the image it shares, if any."""
    return f"{text} [shares an image: {caption}]" if caption else text


class TurnCardText(BaseModel):
    """A turn card's text taken apart: its day label and one line per source message."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    day: str | None
    lines: tuple[str, ...]


def split_turn_card(text: str, sources: int) -> TurnCardText | None:
    """Take a turn card's text apart into its day label and one line per source, in order.

    Args:
        text: The card's text (``turn_card_text``).
        sources: How many source messages the card has.

    Returns:
        The parts, or ``None`` when the text does not have one line per source (a card
        written before utterances were kept on one line, whose message had line breaks): such
        a card can only be recalled whole.
    """
    matched = _DAY_PREFIX.match(text)
    day = f"[{matched.group(1)}]" if matched else None
    body = text[matched.end() :] if matched else text
    lines = tuple(body.split("\n"))
    if sources < 1 or len(lines) != sources or not all(line.strip() for line in lines):
        return None
    return TurnCardText(day=day, lines=lines)


def _one_line(text: str) -> str:
    """``text`` with its line breaks (every kind ``str.splitlines`` knows) as `` / ``."""
    parts = text.splitlines()
    if parts == [text]:
        return text
    return " / ".join(stripped for part in parts if (stripped := part.strip()))

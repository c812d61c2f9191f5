"""The text of a ``turn`` card: a message with its neighbours and its date, as measured best."""

from collections.abc import Sequence
from datetime import date

from pydantic import BaseModel, ConfigDict

__all__ = [
    "TURN_CONTEXT_AFTER",
    "TURN_CONTEXT_BEFORE",
    "Utterance",
    "turn_card_text",
    "turn_window",
]

#: Neighbours of a turn held in its card (and so among its sources): one message before and one
#: after. On LoCoMo this lifted recall@10 from 0.71 to 0.87 for about 5% of the conversation's
#: tokens (BENCHMARKS.md, "Recall on LoCoMo (offline)").
TURN_CONTEXT_BEFORE = 1
TURN_CONTEXT_AFTER = 1


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
    before: int = TURN_CONTEXT_BEFORE,
    after: int = TURN_CONTEXT_AFTER,
) -> range:
    """Return the positions of a turn and its neighbours among ``count`` messages of a session.

    Raises:
        IndexError: ``index`` is not a position in the session.
    """
    if not 0 <= index < count:
        raise IndexError(f"turn {index} is not in a session of {count} messages")
    return range(max(0, index - before), min(count, index + after + 1))


def turn_card_text(utterances: Sequence[Utterance], *, day: date | None = None) -> str:
    """Render a turn card: ``[8 May 2023] Caroline: ...`` one line per utterance.

    The date goes first because it helps both searches (a question about "May" matches it) and
    because a recalled memory without its date is often useless.

    Args:
        utterances: The turn and its neighbours, in conversation order (see ``turn_window``).
        day: The day the turn was said, if known.

    Returns:
        The card's text; every utterance's text is in it, so each can be listed as a source.
    """
    lines = []
    for utterance in utterances:
        line = f"{utterance.speaker}: {utterance.text}"
        if utterance.caption:
            line += f" [shares an image: {utterance.caption}]"
        lines.append(line)
    body = "\n".join(lines)
    if day is None:
        return body
    return f"[{day.day} {day.strftime('%B')} {day.year}] {body}"

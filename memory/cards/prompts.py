"""The words sent to a model for card extraction and query rewriting, and how messages render."""

from __future__ import annotations

from collections.abc import Sequence

from memory.cards.model import SourceMessage
from memory.context.cut import cut_to_chars, one_line

__all__ = ["EXTRACTION_INSTRUCTIONS", "REWRITE_INSTRUCTIONS", "render_numbered"]

#: The extractor's system message.
EXTRACTION_INSTRUCTIONS = """\
You extract long-term memory cards from a conversation between a user and an AI assistant. You \
get messages numbered [1], [2], ..., each with its date and speaker.
Keep: the user's identity and profile (name, age, job, where they live); the user's \
preferences; confirmed facts and decisions; tasks and their state (open or done); dated events, \
with absolute dates.
Skip: chit-chat and pleasantries; questions; the assistant's own guesses, suggestions and \
claims that the user did not confirm.
Each card is one short statement that stands on its own, about the user in the third person \
("User lives in Porto") or neutral. Write it in the language of the message it comes from: a \
Chinese conversation gives Chinese cards ("用户叫王芳"). Never translate names. Replace \
relative dates ("yesterday", "last May", "上周五") with absolute ones, resolved against the \
message's date.
Reply with JSON only, no prose:
{"cards": [{"type": "fact|preference|task|event|profile", "text": "...", "topic": "short label", \
"tags": ["..."], "occurred_at": "YYYY-MM-DD, YYYY-MM, YYYY or null", "subject": "user, team or \
who it is about", "attribute": "what it sets, e.g. city, name, employer, preference:coffee", \
"source": [message numbers]}]}
A newer card on the same subject and attribute replaces the older one, so name the attribute \
the same way each time. Reply {"cards": []} when there is nothing worth keeping."""

#: The query rewriter's system message.
REWRITE_INSTRUCTIONS = """\
You rewrite the user's latest message into a self-contained search query for a memory store. \
Replace pronouns and references ("it", "that", "this one", "they", "这个", "那个", "它", \
"上面的", "上次说的") with what they refer to in the recent conversation. Keep the user's \
language and wording otherwise; never translate; add nothing else. When there is nothing to \
resolve, return the message unchanged.
Reply with JSON only: {"query": "..."}"""


def render_numbered(messages: Sequence[SourceMessage], chars_per_message: int) -> str:
    """One line per message, ``[n] YYYY-MM-DD role: text``, numbered from 1, each cut."""
    return "\n".join(
        cut_to_chars(
            f"[{number}] {message.time.date().isoformat()} {message.role}: "
            f"{one_line(message.text)}",
            chars_per_message,
        )
        for number, message in enumerate(messages, start=1)
    )

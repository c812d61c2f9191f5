"""What a card is before it is stored: its type, the draft, its normalized text and its hash.

An ``ExtractedCard`` is what extraction produces: a statement whose sources are named by their
place in the batch read. Archiving names them by stored id and hands the store the one draft
type of every layer (``storage.CardDraft``); the store adds the user, ids, validity and the
embedding. ``normalize_text`` defines when two statements are the same card for the judgment
(extraction merges them, supersede keeps an equal one), so it is written once, here. The store's
unique key per user is its own (``storage.content_hash(type, text)``: the type is part of it and
trailing punctuation is not dropped); its stored values never change.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
import warnings
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from memory.context.messages import Role
from storage import CardType  # the card types are storage's, declared once

__all__ = [
    "CardType",
    "DatePrecision",
    "ExtractedCard",
    "SourceMessage",
    "normalize_text",
]

#: How exact an ``occurred_at`` is: it is the start of that day, week (Monday), month or year.
DatePrecision = Literal["day", "week", "month", "year"]

_SPACE = re.compile(r"\s+")
# Sentence-final punctuation. It runs after NFKC, which makes full-width marks ASCII, so only the
# ideographic full stop and comma and the ellipsis need naming: "Ana lives in Porto." and
# "Ana lives in Porto" are one card.
_TRAILING = re.compile(r"[\s.!?,;:。、…~]+$")


def normalize_text(text: str) -> str:
    """The form of a card's text that decides identity.

    NFKC (full-width letters and digits become ASCII), case folded, runs of whitespace folded to
    one space, trailing punctuation dropped. CJK text passes through unchanged but for those.
    """
    folded = unicodedata.normalize("NFKC", text).casefold()
    return _TRAILING.sub("", _SPACE.sub(" ", folded).strip())


_RETIRED_HASH = (
    "memory.cards.content_hash is retired and goes in the next release: it was never the "
    "store's key (that is storage.content_hash(type, text)); compare normalize_text(...) instead"
)


def _normalized_text_hash(text: str) -> str:
    """The SHA-256 hex digest of ``normalize_text(text)``, for the retired ``content_hash``."""
    return hashlib.sha256(normalize_text(text).encode("utf-8")).hexdigest()


def __getattr__(name: str) -> object:
    """``content_hash``, retired: it still answers until the next release, with a warning."""
    if name != "content_hash":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(_RETIRED_HASH, DeprecationWarning, stacklevel=2)
    return _normalized_text_hash


@dataclass(frozen=True, slots=True)
class SourceMessage:
    """One message handed to extraction: who said what, when, and where it is stored.

    Attributes:
        role: who said it; only the user's words make profile and preference cards.
        text: the message's text.
        time: when it was said (``observed_at`` of the cards it yields); relative dates in it are
            resolved against this.
        index: the message's position (e.g. its sequence number in the session).
        id: the stored message id or the client's id, passed through to the card's sources.
    """

    role: Role
    text: str
    time: datetime
    index: int
    id: str | None = None


@dataclass(frozen=True, slots=True)
class ExtractedCard:
    """A card ready to be stored: a short self-contained statement with its metadata.

    Attributes:
        type: what kind of memory it is.
        text: the statement, in the user's language, third person or neutral
            (``User's name is Ana``, ``用户叫王芳``).
        observed_at: when it was said (the latest source message's time).
        topic: a short label (``identity``, ``location``, ``stack``) or ``None``.
        tags: free labels for filtering.
        occurred_at: when it happened, where the text says so (relative dates resolved).
        precision: how exact ``occurred_at`` is; ``None`` when there is none.
        subject: who or what the statement is about, normalized (``user``, ``team``).
        attribute: which property of the subject it sets, normalized (``city``, ``name``,
            ``task:send invoice``); a newer card with the same subject and attribute and a
            different text supersedes the older one.
        source_indices: the ``SourceMessage.index`` of each message it came from.
        source_ids: the ``SourceMessage.id`` of each of them that has one.

    Raises:
        ValueError: ``text`` is blank, or ``occurred_at`` and ``precision`` are not both set or
            both ``None``.
    """

    type: CardType
    text: str
    observed_at: datetime
    topic: str | None = None
    tags: tuple[str, ...] = ()
    occurred_at: datetime | None = None
    precision: DatePrecision | None = None
    subject: str | None = None
    attribute: str | None = None
    source_indices: tuple[int, ...] = ()
    source_ids: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.text.strip():
            raise ValueError("a card needs a text")
        if (self.occurred_at is None) != (self.precision is None):
            raise ValueError("occurred_at and precision go together")

    @property
    def normalized(self) -> str:
        """``normalize_text(self.text)``."""
        return normalize_text(self.text)

    @property
    def content_hash(self) -> str:
        """Retired (a warning says so): the SHA-256 of ``normalized``, not the store's key."""
        warnings.warn(_RETIRED_HASH, DeprecationWarning, stacklevel=2)
        return _normalized_text_hash(self.text)

    @property
    def key(self) -> tuple[str, str] | None:
        """``(subject, attribute)`` when both are set: what a newer card may supersede."""
        if self.subject is None or self.attribute is None:
            return None
        return (self.subject, self.attribute)

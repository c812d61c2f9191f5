"""The records of the card store (what callers pass and get back) and its filter's SQL."""

import hashlib
import unicodedata
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from storage.errors import InvalidInputError
from storage.migrations import EMBEDDING_DIM
from storage.records import Record

__all__ = [
    "MAX_CARD_KEY_CHARS",
    "MAX_CARD_TAGS",
    "MAX_CARD_TAG_CHARS",
    "MAX_CARD_TEXT_CHARS",
    "MAX_CARD_TOPIC_CHARS",
    "Card",
    "CardDraft",
    "CardFilter",
    "CardMatch",
    "CardType",
    "NewCard",
    "check_card",
    "content_hash",
    "filter_sql",
]

CardType = Literal["fact", "preference", "task", "event", "profile", "turn"]

#: The longest card text, in characters: a turn card holds a message and its neighbours (its
#: maker cuts long ones), a pin is bounded by the pin budget, an extracted card is one short
#: statement. About 8,000 tokens: a card longer than that is data, not a memory.
MAX_CARD_TEXT_CHARS = 32_000
#: The longest topic, a short label (``identity``, ``stack``).
MAX_CARD_TOPIC_CHARS = 100
#: The most tags of one card, and the longest tag.
MAX_CARD_TAGS = 20
MAX_CARD_TAG_CHARS = 64
#: The longest subject and attribute: both are keys of a b-tree index, whose entries are
#: limited to about 2,700 bytes with the user id (up to 1,024 bytes) beside them.
MAX_CARD_KEY_CHARS = 200


class CardDraft(Record):
    """A card before it is stored, the one shape every layer passes down: what extraction, an
    archived turn, a pin or ``Memory.add`` says. ``NewCard`` is a draft with its embedding and
    keyword terms, ``Card`` a stored draft; the draft's fields are declared here only.

    Attributes:
        type: What kind of memory it is; ``turn`` is an archived raw message.
        text: The self-contained statement (what is recalled and shown to the model).
        topic: An optional topic.
        tags: Optional tags.
        session_id: The session it came from, if any.
        source_message_ids: Stored ids of the messages it came from.
        source_client_ids: Client ids of those messages.
        observed_at: When it was said; the database clock when None.
        occurred_at: When it happened, where the text says so.
        pinned: Whether it is always in the context.
        subject: Who or what it is about (``user``, ``team``), if known.
        attribute: Which property of the subject it sets (``city``); a newer card with the
            same subject and attribute may supersede it.
        turn_message_id: For a ``turn`` card, the stored id of the message it archives: a
            user has at most one card per such message (``CardStore.add``).
    """

    type: CardType
    text: str = Field(min_length=1)
    topic: str | None = None
    tags: list[str] = Field(default_factory=list)
    session_id: str | None = None
    source_message_ids: list[int] = Field(default_factory=list)
    source_client_ids: list[str] = Field(default_factory=list)
    observed_at: datetime | None = None
    occurred_at: datetime | None = None
    pinned: bool = False
    subject: str | None = None
    attribute: str | None = None
    turn_message_id: int | None = None


class NewCard(CardDraft):
    """A draft with its embedding and keyword terms computed by the caller: what
    ``CardStore.add`` stores.

    Attributes:
        embedding: The draft's embedding, ``EMBEDDING_DIM`` floats (stored scaled to unit
            length).
        terms: Its keyword terms with their counts (see ``retrieval.keywords``).

    The sizes are bounded (``MAX_CARD_TEXT_CHARS`` and the others); ``CardStore.add`` refuses
    a card over a bound.
    """

    embedding: list[float] = Field(min_length=EMBEDDING_DIM, max_length=EMBEDDING_DIM)
    terms: dict[str, int] = Field(default_factory=dict)

    @classmethod
    def of(cls, draft: CardDraft, *, embedding: list[float], terms: dict[str, int]) -> "NewCard":
        """The draft with its embedding and terms (a ``NewCard`` given keeps its draft only)."""
        fields = {name: getattr(draft, name) for name in CardDraft.model_fields}
        return cls(**fields, embedding=embedding, terms=terms)


class Card(CardDraft):
    """A stored card: its draft, and what storage adds (its id and owner, when it was said and
    stored, its validity), without its embedding; ``valid_to`` is set once it was superseded.
    """

    id: int
    user_id: str
    observed_at: datetime
    valid_from: datetime
    valid_to: datetime | None
    superseded_by: int | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class CardMatch:
    """One search hit: a card id and its score (cosine similarity or BM25).

    A plain dataclass, not a validated record: a search makes hundreds of them, of ids and
    scores the database or numpy just computed (100 took 0.28 ms as pydantic models, 0.05 here).
    """

    card_id: int
    score: float


class CardFilter(Record):
    """Restrictions on the cards searched or listed; every one is applied in SQL.

    ``since``/``until`` compare a card's time: when it happened where known, else when it was
    said (``coalesce(occurred_at, observed_at)``); ``since`` is inclusive, ``until`` exclusive.
    """

    types: tuple[CardType, ...] | None = None
    session_id: str | None = None
    topic: str | None = None
    tags: tuple[str, ...] | None = None
    since: datetime | None = None
    until: datetime | None = None
    include_superseded: bool = False
    pinned: bool | None = None


def check_card(position: int, card: NewCard) -> None:
    """Raise ``InvalidInputError`` unless the card is within the size bounds and well-keyed.

    Args:
        position: The card's position in its batch, named by the error.
        card: The card.
    """
    name = f"card {position}"
    sizes = [
        ("text", card.text, MAX_CARD_TEXT_CHARS),
        ("topic", card.topic or "", MAX_CARD_TOPIC_CHARS),
        ("subject", card.subject or "", MAX_CARD_KEY_CHARS),
        ("attribute", card.attribute or "", MAX_CARD_KEY_CHARS),
        *(("a tag", tag, MAX_CARD_TAG_CHARS) for tag in card.tags),
    ]
    for field, value, limit in sizes:
        if len(value) > limit:
            raise InvalidInputError(
                f"{name}: {field} has {len(value):,} characters; at most {limit:,} are allowed"
            )
    if len(card.tags) > MAX_CARD_TAGS:
        raise InvalidInputError(
            f"{name} has {len(card.tags):,} tags; at most {MAX_CARD_TAGS} are allowed"
        )
    if card.turn_message_id is not None and card.type != "turn":
        raise InvalidInputError(f"{name}: only a turn card archives a message (turn_message_id)")


def content_hash(card_type: str, text_: str) -> str:
    """Return the hash that identifies a card's content for one user: the ``content_hash`` column.

    The cards table is unique on ``(user_id, content_hash)``, so its stored values must never
    change. It is not the judgment's ``memory.cards.normalize_text`` rule: the type is part of
    it and trailing punctuation is kept.

    Args:
        card_type: The card's type.
        text_: Its text; compared after NFKC normalization, case folding and collapsing spaces.

    Returns:
        A hex SHA-256 digest.
    """
    normalized = " ".join(unicodedata.normalize("NFKC", text_).casefold().split())
    return hashlib.sha256(f"{card_type}\n{normalized}".encode()).hexdigest()


def filter_sql(where: CardFilter, alias: str = "") -> tuple[str, dict[str, Any]]:
    """Return ``AND ...`` conditions (bound parameters) for a filter."""
    p = f"{alias}." if alias else ""
    parts: list[str] = []
    params: dict[str, Any] = {}
    if not where.include_superseded:
        parts.append(f"{p}valid_to IS NULL")
    if where.types is not None:
        parts.append(f"{p}type = ANY(:f_types)")
        params["f_types"] = list(where.types)
    if where.session_id is not None:
        parts.append(f"{p}session_id = :f_session")
        params["f_session"] = where.session_id
    if where.topic is not None:
        parts.append(f"{p}topic = :f_topic")
        params["f_topic"] = where.topic
    if where.tags:
        parts.append(f"{p}tags @> CAST(:f_tags AS text[])")
        params["f_tags"] = list(where.tags)
    if where.since is not None:
        parts.append(f"coalesce({p}occurred_at, {p}observed_at) >= :f_since")
        params["f_since"] = where.since
    if where.until is not None:
        parts.append(f"coalesce({p}occurred_at, {p}observed_at) < :f_until")
        params["f_until"] = where.until
    if where.pinned is not None:
        parts.append(f"{p}pinned = :f_pinned")
        params["f_pinned"] = where.pinned
    return "".join(f" AND {part}" for part in parts), params

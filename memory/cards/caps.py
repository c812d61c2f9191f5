"""Bounds on what extraction may add to long-term memory: cards per reply, and each card's size.

A model may answer anything: one reply held 5,000 cards, another a card whose topic was 1 MB.
What is over a bound is cut or dropped here, where drafts are made, and the rest is kept; the
card store refuses whatever would still be over its bounds (``storage.MAX_CARD_TEXT_CHARS`` and
the others), so no path can store it.

- at most ``MAX_CARDS_PER_REPLY`` cards of one model reply (the first ones it gave), or one
  per line it read when it read more lines (a fold may read hundreds);
- a card whose text is over ``MAX_EXTRACTED_TEXT_CHARS`` is dropped: a statement cut in the
  middle may say something else;
- a topic, a tag, a subject and an attribute are labels, cut to their store bounds; tags past
  ``storage.MAX_CARD_TAGS`` are dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from memory.cards.model import ExtractedCard
from storage import (
    MAX_CARD_KEY_CHARS,
    MAX_CARD_TAG_CHARS,
    MAX_CARD_TAGS,
    MAX_CARD_TOPIC_CHARS,
)

__all__ = ["MAX_CARDS_PER_REPLY", "MAX_EXTRACTED_TEXT_CHARS", "Capped", "cap_drafts", "cap_label"]

#: The most cards one model reply may add, unless it read more lines than that (then one per
#: line). A reply within the extractor's 2,000 tokens holds about 40 cards of the prompt's
#: schema (about 50 tokens each), and an extraction batch reads at most 60 messages: more is
#: a model that ignores the limit or repeats itself.
MAX_CARDS_PER_REPLY = 50

#: The longest text of an extracted card: one short statement (the prompt asks for one).
MAX_EXTRACTED_TEXT_CHARS = 1_000


@dataclass(frozen=True, slots=True)
class Capped:
    """Drafts within the bounds, and what it took.

    Attributes:
        cards: the drafts kept, in their order, cut where needed.
        over_count: drafts dropped because the reply had more than ``max_cards``.
        too_long: drafts dropped because their text was over ``MAX_EXTRACTED_TEXT_CHARS``.
        cut: drafts kept with a label cut (topic, tags, subject or attribute).
    """

    cards: tuple[ExtractedCard, ...]
    over_count: int = 0
    too_long: int = 0
    cut: int = 0

    @property
    def changed(self) -> bool:
        """Whether anything was dropped or cut."""
        return bool(self.over_count or self.too_long or self.cut)

    def describe(self) -> str:
        """One line for the log: what was dropped and cut."""
        return (
            f"{self.over_count} card(s) over the cap per reply dropped, "
            f"{self.too_long} over {MAX_EXTRACTED_TEXT_CHARS:,} characters dropped, "
            f"{self.cut} with a label cut; {len(self.cards)} kept"
        )


def cap_drafts(drafts: Sequence[ExtractedCard], *, max_cards: int | None) -> Capped:
    """``drafts`` within the bounds (see the module).

    Args:
        drafts: extracted drafts (not turns), in the order they were given.
        max_cards: the most drafts kept (the first ones); ``None`` for no count bound (the
            rules, whose cards are bounded by the messages they read).
    """
    counted = drafts if max_cards is None else drafts[:max_cards]
    fitting = [draft for draft in counted if len(draft.text) <= MAX_EXTRACTED_TEXT_CHARS]
    kept: list[ExtractedCard] = []
    cut = 0
    for draft in fitting:
        bounded = _bounded_labels(draft)
        cut += bounded != draft
        kept.append(bounded)
    return Capped(tuple(kept), len(drafts) - len(counted), len(counted) - len(fitting), cut)


def cap_label(value: str | None, limit: int) -> str | None:
    """A label (topic, tag, subject, attribute) over ``limit`` characters cut to them;
    ``None`` when nothing but whitespace is left."""
    if value is None or len(value) <= limit:
        return value
    return value[:limit].strip() or None


def _bounded_labels(draft: ExtractedCard) -> ExtractedCard:
    labels = (draft.topic, draft.tags, draft.subject, draft.attribute)
    tags = (cap_label(tag, MAX_CARD_TAG_CHARS) for tag in draft.tags[:MAX_CARD_TAGS])
    bounded = (
        cap_label(draft.topic, MAX_CARD_TOPIC_CHARS),
        tuple(tag for tag in tags if tag),
        cap_label(draft.subject, MAX_CARD_KEY_CHARS),
        cap_label(draft.attribute, MAX_CARD_KEY_CHARS),
    )
    if bounded == labels:
        return draft
    topic, kept_tags, subject, attribute = bounded
    return replace(draft, topic=topic, tags=kept_tags, subject=subject, attribute=attribute)

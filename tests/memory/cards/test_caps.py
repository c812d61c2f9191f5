"""The bounds on extracted cards: how many per reply, how long each part (pure, no I/O)."""

from __future__ import annotations

from datetime import UTC, datetime

from memory.cards.caps import (
    MAX_CARDS_PER_REPLY,
    MAX_EXTRACTED_TEXT_CHARS,
    cap_drafts,
    cap_label,
)
from memory.cards.model import ExtractedCard
from storage import MAX_CARD_TAG_CHARS, MAX_CARD_TAGS, MAX_CARD_TOPIC_CHARS

SAID = datetime(2024, 5, 6, 9, tzinfo=UTC)


def draft(text: str, **fields: object) -> ExtractedCard:
    return ExtractedCard(type="fact", text=text, observed_at=SAID, **fields)  # type: ignore[arg-type]


def test_drafts_within_the_bounds_pass_unchanged() -> None:
    drafts = [draft(f"Fact {index}", topic="work", tags=("a", "b")) for index in range(10)]

    capped = cap_drafts(drafts, max_cards=MAX_CARDS_PER_REPLY)

    assert capped.cards == tuple(drafts)
    assert all(kept is given for kept, given in zip(capped.cards, drafts, strict=True))
    assert not capped.changed


def test_extra_and_over_long_cards_are_dropped_and_labels_cut() -> None:
    drafts = [
        draft("x" * (MAX_EXTRACTED_TEXT_CHARS + 1)),
        draft("Fact", topic="t" * 1_000, tags=(*("t" * 70 for _ in range(25)), " ")),
        *(draft(f"Fact {index}") for index in range(60)),
    ]

    capped = cap_drafts(drafts, max_cards=MAX_CARDS_PER_REPLY)

    assert (capped.over_count, capped.too_long, capped.cut) == (12, 1, 1)
    assert len(capped.cards) == MAX_CARDS_PER_REPLY - 1
    cut = capped.cards[0]
    assert cut.topic == "t" * MAX_CARD_TOPIC_CHARS
    assert cut.tags == ("t" * MAX_CARD_TAG_CHARS,) * MAX_CARD_TAGS
    assert capped.describe().startswith("12 card(s) over the cap per reply dropped, 1 over 1,000")


def test_the_rules_cards_are_not_counted_only_bounded() -> None:
    drafts = [draft(f"Fact {index}") for index in range(200)]

    assert len(cap_drafts(drafts, max_cards=None).cards) == 200


def test_a_label_of_only_whitespace_once_cut_is_none() -> None:
    assert cap_label(None, 5) is None
    assert cap_label("short", 5) == "short"
    assert cap_label("ab   cdef", 4) == "ab"
    assert cap_label("    abcdef", 4) is None

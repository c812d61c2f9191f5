"""Card drafts and the normalized text that decides when two statements are one card."""

# Full-width forms are what NFKC is tested on, on purpose.
# ruff: noqa: RUF001

from __future__ import annotations

from datetime import UTC, datetime

import pytest

import memory.cards
from memory.cards import model
from memory.cards.model import ExtractedCard, normalize_text
from storage import content_hash as stored_card_hash

SAID = datetime(2023, 5, 10, 12, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "normalized"),
    [
        ("User lives in Porto.", "user lives in porto"),
        ("  User   lives\tin\nPorto  ", "user lives in porto"),
        ("USER LIVES IN PORTO!!", "user lives in porto"),
        ("Ｕｓｅｒ　ｌｉｖｅｓ", "user lives"),  # full-width letters and space (NFKC)
        ("用户叫王芳。", "用户叫王芳"),
        ("用户喜欢喝茶\uff01", "用户喜欢喝茶"),  # full-width exclamation mark
        ("用户住在北京…", "用户住在北京"),
        ("Straße", "strasse"),  # casefold, not lower
        ("v1.2 is out", "v1.2 is out"),  # inner punctuation is kept
    ],
)
def test_normalize_text(text: str, normalized: str) -> None:
    assert normalize_text(text) == normalized


def test_the_retired_hash_is_the_same_for_the_same_normalized_text_only() -> None:
    with pytest.warns(DeprecationWarning, match="never the store's key"):
        content_hash = memory.cards.content_hash
    with pytest.warns(DeprecationWarning, match="retired"):
        assert model.content_hash is content_hash
    assert content_hash("User lives in Porto.") == content_hash("user lives in porto")
    assert content_hash("用户叫王芳。") == content_hash("用户叫王芳")
    assert content_hash("User lives in Porto") != content_hash("User lives in Lisbon")
    assert len(content_hash("x")) == 64
    # It never was the store's key: that one holds the type and keeps trailing punctuation.
    assert content_hash("user lives in porto") != stored_card_hash("fact", "user lives in porto")


def test_a_draft_knows_its_key_and_its_retired_hash() -> None:
    draft = ExtractedCard("profile", "User lives in Porto.", SAID, subject="user", attribute="city")

    with pytest.warns(DeprecationWarning, match="retired"):
        assert draft.content_hash == model._normalized_text_hash("user lives in porto")
    assert draft.key == ("user", "city")
    assert ExtractedCard("fact", "x", SAID).key is None


def test_a_draft_is_frozen_and_checked() -> None:
    draft = ExtractedCard("fact", "x", SAID)
    with pytest.raises(AttributeError):
        draft.text = "y"  # type: ignore[misc]
    with pytest.raises(ValueError, match="needs a text"):
        ExtractedCard("fact", "  ", SAID)
    with pytest.raises(ValueError, match="go together"):
        ExtractedCard("event", "x", SAID, occurred_at=SAID)

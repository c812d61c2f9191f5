"""Tests of the turn card's text and window."""

from datetime import date

import pytest

from retrieval import (
    DEFAULT_SEARCH,
    TurnCardText,
    Utterance,
    split_turn_card,
    turn_card_text,
    turn_window,
)


def test_text_holds_every_utterance_and_the_date() -> None:
    text = turn_card_text(
        [
            Utterance(speaker="Caroline", text="I went to a support group."),
            Utterance(speaker="Melanie", text="Look!", caption="a photo of a lake"),
        ],
        day=date(2023, 5, 8),
    )
    assert text == (
        "[8 May 2023] Caroline: I went to a support group.\n"
        "Melanie: Look! [shares an image: a photo of a lake]"
    )


def test_window_stays_inside_the_session() -> None:
    assert list(turn_window(5, 0)) == [0, 1]
    assert list(turn_window(5, 2)) == [1, 2, 3]
    assert list(turn_window(5, 4)) == [3, 4]
    with pytest.raises(IndexError):
        turn_window(5, 5)


def test_each_utterance_is_one_line_so_the_card_splits_into_its_sources() -> None:
    text = turn_card_text(
        [
            Utterance(speaker="User", text="My list:\n- eggs\r\n- milk\u2028done\n"),
            Utterance(speaker="Assistant", text="Noted."),
        ],
        day=date(2024, 2, 4),
    )
    assert text == "[4 February 2024] User: My list: / - eggs / - milk / done\nAssistant: Noted."
    split = split_turn_card(text, 2)
    assert split == TurnCardText(
        day="[4 February 2024]",
        lines=("User: My list: / - eggs / - milk / done", "Assistant: Noted."),
    )
    assert split_turn_card("User: a\nBot: b", 2) == TurnCardText(
        day=None, lines=("User: a", "Bot: b")
    )


@pytest.mark.parametrize(
    ("text", "sources"),
    [("[4 February 2024] User: one\nmore\nBot: b", 2), ("User: a", 2), ("User: a\n\nBot: b", 3)],
)
def test_a_card_without_one_line_per_source_is_not_split(text: str, sources: int) -> None:
    assert split_turn_card(text, sources) is None


def test_the_window_is_the_recipes() -> None:
    assert (DEFAULT_SEARCH.turn_before, DEFAULT_SEARCH.turn_after) == (1, 1)
    assert list(turn_window(9, 4)) == [3, 4, 5]
    assert list(turn_window(9, 4, before=2, after=0)) == [2, 3, 4]

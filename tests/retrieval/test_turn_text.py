"""Tests of the turn card's text and window."""

from datetime import date

import pytest

from retrieval import Utterance, turn_card_text, turn_window


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

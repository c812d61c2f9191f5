"""Tests of the turn card's text and window."""

from datetime import UTC, date, datetime

import pytest

from memory.eval.locomo import Turn, turn_line
from retrieval import (
    DEFAULT_SEARCH,
    TurnCardText,
    Utterance,
    split_turn_card,
    turn_card_text,
    turn_window,
)
from retrieval.excerpt_walk import day_text as excerpt_day
from retrieval.turns import day_label, day_text, speaker_line


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


def test_a_day_and_a_speakers_line_are_shown_one_way_everywhere() -> None:
    # One rule each (issue 19 item 8): turn cards, recalled memories, excerpts and the LoCoMo
    # evaluation all take the day's text and a message's line from here.
    moment = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert day_text(moment) == day_text(moment.date()) == "8 May 2023"
    assert day_label(moment.date()) == "[8 May 2023]"
    assert excerpt_day is day_text
    assert speaker_line("Melanie", "Look!", "a lake") == "Melanie: Look! [shares an image: a lake]"
    assert speaker_line("Melanie", "Look!") == "Melanie: Look!"
    turn = Turn("D1:3", "Melanie", "Look!", "a lake")
    assert turn_line(turn) == speaker_line("Melanie", "Look!", "a lake")

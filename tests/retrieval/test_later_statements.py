"""``with_later_statements``: a later change below the gate, brought in after what it changes.

Pure: cards are built by hand, as archiving writes turn cards (one message and its neighbours).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from retrieval import DEFAULT_SEARCH, ScoredCard, Utterance, analyze, turn_card_text
from retrieval.later_statements import with_later_statements
from storage import Card

MARCH = datetime(2025, 3, 5, 9, tzinfo=UTC)
APRIL = MARCH + timedelta(days=30)
GATED = DEFAULT_SEARCH.model_copy(update={"min_similarity": 0.3})
QUESTION = "Which city do I live in?"


def turn(card_id: int, said: datetime, lines: Sequence[str], own: int = 0) -> Card:
    """The turn card of message ``card_id`` (line ``own`` of ``lines``) and its neighbours."""
    utterances = [
        Utterance(speaker=line.split(": ")[0], text=line.split(": ", 1)[1]) for line in lines
    ]
    sources = [card_id - own + i for i in range(len(lines))]
    return Card(
        id=card_id,
        user_id="u",
        type="turn",
        text=turn_card_text(utterances, day=said.date()),
        topic=None,
        tags=["user"],
        session_id="s",
        source_message_ids=sources,
        source_client_ids=[],
        turn_message_id=card_id,
        observed_at=said,
        occurred_at=None,
        valid_from=said,
        valid_to=None,
        superseded_by=None,
        pinned=False,
        created_at=said,
    )


def hit(card: Card, similarity: float) -> ScoredCard:
    return ScoredCard(card=card, score=similarity, similarity=similarity, keyword_score=0.0)


LYON = hit(turn(10, MARCH, ["User: My flat in Lyon is tiny.", "Assistant: Noted."]), 0.36)
BORDEAUX = hit(turn(50, APRIL, ["User: Finally settled in Bordeaux after leaving Lyon."]), 0.16)


def brought(hits: Sequence[ScoredCard], passed: Sequence[ScoredCard]) -> list[int]:
    found = with_later_statements(hits, passed, analyze(QUESTION), GATED)
    assert set(found.why) == {h.card.id for h in found.hits} - {h.card.id for h in passed}
    return [h.card.id for h in found.hits]


def test_a_later_change_naming_a_recalled_word_comes_right_after_it() -> None:
    other = hit(turn(20, MARCH, ["User: I drink black coffee."]), 0.31)
    found = with_later_statements([LYON, other, BORDEAUX], [LYON, other], analyze(QUESTION), GATED)

    assert [h.card.id for h in found.hits] == [10, 50, 20]
    assert found.why == {50: "said later, names lyon of a memory"}
    assert found.changed == {10}


def test_what_is_not_brought() -> None:
    said_before = hit(turn(5, MARCH - timedelta(days=9), ["User: Leaving Lyon now."]), 0.2)
    no_change = hit(turn(51, APRIL, ["User: Lyon was lovely in the rain."]), 0.2)
    a_question = hit(turn(56, APRIL, ["User: Should I leave Lyon now?"]), 0.2)
    by_the_assistant = hit(turn(52, APRIL, ["Assistant: So you left Lyon now?"]), 0.2)
    a_neighbour_says_it = hit(
        turn(53, APRIL, ["User: Finally left Lyon.", "User: Recommend a podcast."], own=1), 0.2
    )
    below_half_the_gate = hit(turn(54, APRIL, ["User: I left Lyon."]), 0.14)
    only_the_questions_word = hit(turn(55, APRIL, ["User: I moved to a new city."]), 0.2)
    city = hit(turn(11, MARCH, ["User: Which city has the best food?"]), 0.4)
    candidates = [
        LYON,
        city,
        said_before,
        no_change,
        a_question,
        by_the_assistant,
        a_neighbour_says_it,
        below_half_the_gate,
        only_the_questions_word,
    ]

    assert brought(candidates, [LYON, city]) == [10, 11]


def test_each_is_brought_once_and_nothing_without_a_gate_to_pass() -> None:
    again = hit(turn(12, MARCH, ["User: Lyon has a tiny flat market."]), 0.35)

    assert brought([LYON, again, BORDEAUX], [LYON, again]) == [10, 50, 12]
    # A Chinese question has no gate: every candidate passed it, none is left to bring.
    found = with_later_statements([LYON, BORDEAUX], [LYON], analyze("我住在哪里"), GATED)
    assert [h.card.id for h in found.hits] == [10, 50] and found.why


def test_the_latest_change_is_brought_and_one_that_passed_moves_up() -> None:
    paris = hit(turn(70, APRIL + timedelta(days=9), ["User: Left Lyon for good, Paris now."]), 0.2)
    other = hit(turn(20, MARCH, ["User: I drink black coffee."]), 0.31)
    # Both changes name Lyon; the later one comes right after the memory it changes.
    assert brought([LYON, other, BORDEAUX, paris], [LYON, other]) == [10, 70, 20]
    # A change that passed the gate ranked low moves up to what it changes.
    found = with_later_statements(
        [LYON, other, BORDEAUX], [LYON, other, BORDEAUX], analyze(QUESTION), GATED
    )
    assert [h.card.id for h in found.hits] == [10, 50, 20]
    assert found.why == {} and found.changed == {10}


def test_an_extracted_card_is_read_with_the_message_it_was_made_from() -> None:
    # "User lives in Lyon" was read from the first statement; the change that names Lyon passed
    # the gate itself: nothing to bring, but the city card is what it changes.
    city = LYON.card.model_copy(
        update={"id": 30, "type": "fact", "text": "User likes the flat", "source_message_ids": [10]}
    )
    change = BORDEAUX.model_copy(update={"similarity": 0.4})

    found = with_later_statements(
        [hit(city, 0.5), change, LYON], [hit(city, 0.5), change], analyze(QUESTION), GATED
    )

    assert [h.card.id for h in found.hits] == [30, 50]
    assert found.why == {}
    assert found.changed == {30}


def test_a_card_other_than_a_turn_is_read_whole() -> None:
    pet = hit(turn(10, MARCH, ["User: We have a cat."]), 0.5)
    fact = pet.card.model_copy(update={"id": 30, "type": "fact", "text": "User's cat is Mochi"})
    died = hit(turn(60, APRIL, ["User: Sadly Mochi died; we adopted a puppy, Biscuit."]), 0.2)

    found = with_later_statements(
        [hit(fact, 0.5), died], [hit(fact, 0.5)], analyze("What's my pet called?"), GATED
    )
    assert [h.card.id for h in found.hits] == [30, 60]
    assert found.why == {60: "said later, names mochi of a memory"}

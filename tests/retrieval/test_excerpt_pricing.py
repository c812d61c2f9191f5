"""``pricing_excerpts``: the composition asks for each memory's tokens instead of counting them.

The caller that counts (recall, in ``memory.longterm``) answers in its own loop over
``Questions``, so the walk never calls up into it; answered with the same counts, the excerpts
are ``compose_excerpts``'s.
Pure: cards built by hand, tokens counted as words.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from retrieval import (
    DEFAULT_SEARCH,
    Excerpt,
    ScoredCard,
    Utterance,
    analyze,
    compose_excerpts,
    turn_card_text,
)
from retrieval.excerpt_walk import Questions, priced
from retrieval.excerpts import pricing_excerpts
from storage import Card

SAID = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
GATED = DEFAULT_SEARCH.model_copy(update={"min_similarity": 0.3})
CONVERSATION = [
    (11, "User: We adopted a puppy named Biscuit yesterday."),
    (12, "Assistant: Congratulations, what breed is Biscuit?"),
    (13, "User: A golden retriever, he loves the beach."),
    (14, "Assistant: Golden retrievers love water."),
    (15, "User: I also started the violin."),
    (16, "Assistant: The violin takes patience."),
]


def words(text: str) -> int:
    return len(text.split())


def turn_hit(card_id: int, lines: list[tuple[int, str]]) -> ScoredCard:
    """A turn card over ``(message id, "Speaker: text")`` lines, as a search returns it."""
    utterances = [
        Utterance(speaker=s, text=t) for s, t in (line.split(": ", 1) for _, line in lines)
    ]
    card = Card(
        id=card_id, user_id="u", type="turn", text=turn_card_text(utterances, day=SAID.date()),
        topic=None, tags=["user"], session_id="s",
        source_message_ids=[message_id for message_id, _ in lines], source_client_ids=[],
        observed_at=SAID, occurred_at=None, valid_from=SAID, valid_to=None, superseded_by=None,
        pinned=False, created_at=SAID,
    )  # fmt: skip
    return ScoredCard(card=card, score=0.5, similarity=0.5, keyword_score=1.0)


HITS = [turn_hit(100 + i, CONVERSATION[max(0, i - 1) : i + 2]) for i in (1, 4, 2, 5)]


def answered(budget: int | None) -> tuple[list[str], list[Excerpt]]:
    """The texts ``pricing_excerpts`` asks about, answered in words, and its excerpts."""
    asked: list[str] = []
    questions = Questions(
        pricing_excerpts(HITS, analyze("puppy violin beach"), GATED, k=4, max_tokens=budget)
    )
    for text in questions:
        asked.append(text)
        questions.answer(words(text))
    return asked, questions.result


def test_each_memory_weighed_is_asked_for_and_the_excerpts_are_compose_excerpts() -> None:
    for budget in (None, 40, 15, 3):
        asked, excerpts = answered(budget)
        composed = compose_excerpts(
            HITS, analyze("puppy violin beach"), GATED, k=4, max_tokens=budget, count=words
        )
        assert excerpts == composed
        assert asked  # every line weighed was priced by the caller, none counted inside
        assert all(e.text in asked for e in excerpts)  # what is sent was priced as sent
        if budget is not None:
            assert sum(words(e.text) for e in excerpts) <= budget


def test_priced_answers_with_a_counting_function() -> None:
    pricing = pricing_excerpts(HITS, analyze("puppy"), GATED, k=2, max_tokens=None)
    assert priced(pricing, words) == compose_excerpts(
        HITS, analyze("puppy"), GATED, k=2, max_tokens=None, count=words
    )
    # Nothing to weigh: the result without a question.
    assert (
        priced(pricing_excerpts(HITS, analyze("puppy"), GATED, k=0, max_tokens=None), words) == []
    )


TALKATIVE = [
    (
        21,
        "User: We adopted a puppy. It was raining all day. My sister came over. She brought cake.",
    ),
    (22, "Assistant: Lovely news. How is the cake? What breed is the puppy?"),
    (23, "User: The violin is hard. I practise at night. The neighbours complain. I play anyway."),
]
SEVERAL_CUT = GATED.model_copy(update={"several_close_cut_from": 0, "close_sentences_after": 0})


def test_a_question_asking_for_several_things_reaches_the_walk_recall_runs() -> None:
    """``question`` is passed on to the pricing walk (recall's), not only to compose_excerpts:
    a list question with a recipe that cuts its lines close gets the cut lines."""
    hits = [turn_hit(200, TALKATIVE)]
    terms = analyze("What hobbies and pets has the user got? puppy violin")
    asked_several = "What hobbies and pets has the user got?"

    def priced_walk(question: str) -> list[Excerpt]:
        pricing = pricing_excerpts(
            hits, terms, SEVERAL_CUT, k=4, max_tokens=None, question=question
        )
        return priced(pricing, words)

    composed = compose_excerpts(
        hits, terms, SEVERAL_CUT, k=4, max_tokens=None, count=words, question=asked_several
    )
    assert priced_walk(asked_several) == composed
    assert priced_walk(asked_several) != priced_walk("")  # the question changed the cut
    assert "raining" not in " ".join(e.text for e in composed)


def test_a_question_left_unanswered_is_an_error_not_a_guess() -> None:
    questions = Questions(pricing_excerpts(HITS, analyze("puppy"), GATED, k=2, max_tokens=None))
    with pytest.raises(RuntimeError, match="not yet answered"):
        _ = questions.result
    with pytest.raises(RuntimeError, match="asked for, not answered"):
        for _text in questions:
            pass

"""``asks_for_several``: the questions whose answer is a list spread over a conversation."""

from __future__ import annotations

import pytest

from retrieval.question_shape import asks_for_several


@pytest.mark.parametrize(
    "question",
    [
        "What books has Melanie read?",
        "Which cities has Jon visited?",
        "What types of yoga has Maria practiced?",
        "What activities does Melanie partake in?",
        "What has Melanie painted?",
        "Where has Maria made friends?",
        "Which city have both Jean and John visited?",
        "What do Jon and Gina both have in common?",
        "How many children does Melanie have?",
        "What are the names of John's children?",
        "What are Maria's dogs' names?",
    ],
)
def test_a_question_asking_for_a_list_or_a_count(question: str) -> None:
    assert asks_for_several(question)


@pytest.mark.parametrize(
    "question",
    [
        "What did the charity race raise awareness for?",
        "Why did Caroline choose the adoption agency?",
        "When did Melanie paint a sunrise?",
        "How long has Melanie been practicing art?",
        "What is Caroline's relationship status?",
        "Where do I live now?",
        "What does Caroline's necklace symbolize?",
        "What class is Melanie taking?",
        "我现在住在哪里",
    ],
)
def test_a_question_asking_for_one_thing(question: str) -> None:
    assert not asks_for_several(question)

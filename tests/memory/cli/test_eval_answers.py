"""Answer in the recalled text (``memory.eval.answers``), beside evidence recall: pure."""

from __future__ import annotations

import pytest

from memory.eval.answers import answer_in_text, checkable_answer, normalize_answer
from memory.eval.equal_budgets import score_budgets, summarize_budgets
from memory.eval.locomo import Question, Recalled, parse_conversation


def words(text: str) -> int:
    """A stand-in token counter: one token per word."""
    return len(text.split())


def test_an_answer_is_normalised_case_punctuation_and_articles() -> None:
    assert normalize_answer('"The Becoming Nicole"!') == "becoming nicole"
    assert normalize_answer("love, faith, and strength") == "love faith and strength"
    assert normalize_answer("A guinea-pig") == "guinea pig"


@pytest.mark.parametrize(
    ("answer", "checkable"),
    [
        ("7 May 2023", "7 may 2023"),
        ("2022", "2022"),
        ("Brave by Sara Bareilles", "brave by sara bareilles"),
        ("Improving education and local roads", None),  # 5 words: a phrase, not checked
        ("", None),
        ("...", None),
        (None, None),
    ],
)
def test_only_short_answers_are_checked_by_containment(
    answer: str | None, checkable: str | None
) -> None:
    assert checkable_answer(answer) == checkable


def test_an_answer_is_in_the_text_as_whole_words_in_order() -> None:
    texts = ["[8 May 2023] Caroline: We all made our own pots.", "Melanie: Brave, by Sara!"]
    assert answer_in_text("pots", texts)
    assert answer_in_text("2023", texts)  # lenient: a year is in every day label of it
    assert not answer_in_text("7 may 2023", texts)  # another day is not
    assert not answer_in_text("pot", texts)
    assert not answer_in_text("sara brave", texts)
    assert answer_in_text("brave by sara", texts)
    assert not answer_in_text("pots", [])


def test_a_cited_turn_cut_to_words_without_the_answer_is_recalled_but_not_answered() -> None:
    question = Question("Where do I live now?", 4, ("D1:1",), "Berlin")
    cut = Recalled("[8 May 2023] User: Hi there! …", ("D1:1",))
    whole = Recalled("[8 May 2023] User: Hi there! I moved to Berlin last week.", ("D1:1",))
    score = score_budgets(question, {100: [cut], 3: [whole]}, [whole], words)
    # Both cite the evidence; only the whole line carries the answer (and only within budget).
    assert score.recall == {100: 1.0, 3: 0.0, "k": 1.0}
    assert score.answered == {100: 0.0, 3: 0.0, "k": 1.0}


def test_answer_in_text_is_averaged_over_the_checkable_questions_only() -> None:
    line = Recalled("A: We moved to Lisbon in June.", ("D1:1",))
    scores = [
        score_budgets(Question("q", 2, ("D1:1",), "Lisbon"), {50: [line]}, [], words),
        score_budgets(Question("q", 2, ("D1:1",), "Porto"), {50: [line]}, [], words),
        score_budgets(
            Question("q", 2, ("D1:1",), "a long answer of many words"), {50: [line]}, [], words
        ),
        score_budgets(Question("q", 5, ("D1:1",)), {50: [line]}, [], words),
    ]
    temporal, adversarial, overall = summarize_budgets(scores)
    assert (temporal.questions, temporal.answerable, temporal.answered) == (
        3,
        2,
        {50: 0.5, "k": 0.0},
    )
    assert (adversarial.answerable, adversarial.answered) == (0, {})
    assert (overall.answerable, overall.answered[50]) == (2, 0.5)
    assert overall.as_json()["answer_in_text"] == {"50": 0.5, "k": 0.0}


def test_a_question_keeps_its_gold_answer_as_text() -> None:
    sample = {
        "sample_id": "s",
        "conversation": {
            "speaker_a": "A",
            "speaker_b": "B",
            "session_1_date_time": "8 May 2023",
            "session_1": [{"dia_id": "D1:1", "speaker": "A", "text": "Painted it in 2022."}],
        },
        "qa": [
            {"question": "When?", "answer": 2022, "evidence": ["D1:1"], "category": 2},
            {"question": "Who?", "adversarial_answer": "B", "evidence": ["D1:1"], "category": 5},
        ],
    }
    when, who = parse_conversation(sample).questions
    assert (when.answer, who.answer) == ("2022", None)

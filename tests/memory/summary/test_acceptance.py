"""Which summariser replies may replace the stored summary (pure: no model, no database)."""

from __future__ import annotations

import pytest

from memory.errors import LLMError
from memory.summary.acceptance import MIN_KEY_FACTS, check_reply, key_facts, retention
from memory.summary.transcript import sanitize_text

PREVIOUS = "Order #4471 for Anna: 2 chairs, 240 EUR, delivery to Porto on 2025-06-01."


@pytest.mark.parametrize(
    "reply",
    [
        "I'm sorry, but I can't help with that.",
        "I\u2019m sorry, I cannot summarise this conversation.",
        "Sorry, I can't do that.",
        "I cannot assist with that request.",
        "I can't help with that.",
        "As an AI language model, I do not keep summaries.",
        "I apologize, but I am unable to comply.",
        "Unfortunately, I am not able to help with this.",
    ],
)
def test_a_refusal_is_rejected(reply: str) -> None:
    with pytest.raises(LLMError, match="refusal"):
        check_reply(reply, None, min_retention=0.5)


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        ('{"summary": "Order 4471"}', "JSON"),
        ("```\nOrder #4471 for Anna\n```", "code block"),
        ("Current summary:\nOrder #4471\n\nNew messages:\nuser: hi", "repeats the request"),
        ("user: where is my order?\nassistant: it ships today\nuser: thanks", "transcript"),
    ],
)
def test_a_reply_that_is_not_a_plain_summary_is_rejected(reply: str, problem: str) -> None:
    with pytest.raises(LLMError, match=problem):
        check_reply(reply, None, min_retention=0.5)


def test_key_facts_are_numbers_ids_dates_and_names_inside_sentences() -> None:
    facts = key_facts(PREVIOUS)
    assert facts == {"#4471", "anna", "2", "240", "eur", "porto", "2025-06-01"}
    # The word opening a sentence or a line is not taken for a name.
    assert key_facts("The user likes tea. She drinks it daily.\n- Green is best") == set()


def test_a_reply_that_forgets_the_order_number_and_most_facts_is_rejected() -> None:
    reply = "The user ordered some chairs; delivery is planned."
    assert retention(key_facts(PREVIOUS), reply) == 0.0
    with pytest.raises(LLMError, match=r"keeps 0% of the previous summary's 7 key facts"):
        check_reply(reply, PREVIOUS, min_retention=0.5)


def test_a_reply_that_keeps_most_facts_is_accepted_in_any_case() -> None:
    reply = "Order #4471 (anna): 2 chairs for 240 eur, to PORTO. She now also wants a lamp."
    assert retention(key_facts(PREVIOUS), reply) == pytest.approx(6 / 7)
    check_reply(reply, PREVIOUS, min_retention=0.5)


def test_the_threshold_is_the_least_share_kept() -> None:
    reply = "Order #4471 for Anna, 2 chairs."  # 3 of 7 facts
    check_reply(reply, PREVIOUS, min_retention=0.4)
    with pytest.raises(LLMError):
        check_reply(reply, PREVIOUS, min_retention=0.5)
    check_reply("Nothing left.", PREVIOUS, min_retention=0.0)


def test_without_a_previous_llm_summary_nothing_must_be_kept() -> None:
    check_reply("A fresh start.", None, min_retention=1.0)


def test_a_previous_summary_with_too_few_key_facts_is_not_measured() -> None:
    assert len(key_facts("Summary one: Lisbon in May.")) < MIN_KEY_FACTS
    check_reply("Summary two: a trip.", "Summary one: Lisbon in May.", min_retention=1.0)
    with pytest.raises(LLMError):
        check_reply("Summary two: a trip.", "Trip to Lisbon in May, 3 nights.", min_retention=0.5)


def test_sanitize_makes_text_storable_and_leaves_clean_text_alone() -> None:
    clean = "Trip to Lisbon 🚀, 今天"
    assert sanitize_text(clean) is clean
    assert sanitize_text("a\x00b") == "a\u2400b"
    assert sanitize_text("lone \ud800 surrogate") == "lone \ufffd surrogate"
    assert sanitize_text("joined \ud83d\ude80") == "joined 🚀"
    sanitize_text("a\x00b\udfff").encode("utf-8")  # encodes: nothing unstorable is left

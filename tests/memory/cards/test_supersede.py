"""Supersede decisions: same subject and attribute, a different value; tasks done; pins kept."""

# Chinese text is written with its own full-width punctuation, on purpose.
# ruff: noqa: RUF001

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memory.cards.model import CardType, ExtractedCard
from memory.cards.supersede import (
    ExistingCard,
    SupersedeDecision,
    decide_supersede,
    task_attribute,
    task_key,
)

SAID = datetime(2023, 5, 10, 12, tzinfo=UTC)


def draft(
    text: str, attribute: str | None, *, subject: str = "user", type: CardType = "profile"
) -> ExtractedCard:
    return ExtractedCard(type, text, SAID, subject=subject, attribute=attribute)


PORTO = ExistingCard(1, "user", "city", "profile", "User lives in Porto")
LISBON = draft("User moved to Lisbon", "city")


def test_a_new_value_of_the_same_attribute_supersedes() -> None:
    assert decide_supersede(LISBON, [PORTO]) == SupersedeDecision(supersedes=(1,))


def test_an_identical_card_is_a_duplicate_not_a_supersede() -> None:
    same = draft("user lives in porto.", "city")

    assert decide_supersede(same, [PORTO]) == SupersedeDecision(duplicate_of=1)


def test_a_duplicate_of_a_superseded_card_is_found_and_the_newer_one_closed() -> None:
    old = ExistingCard(1, "user", "city", "profile", "User lives in Porto", valid=False)
    newer = ExistingCard(2, "user", "city", "profile", "User moved to Lisbon")

    decision = decide_supersede(draft("User lives in Porto", "city"), [old, newer])

    assert decision == SupersedeDecision(duplicate_of=1, supersedes=(2,))


@pytest.mark.parametrize(
    "card",
    [
        ExistingCard(1, "team", "city", "profile", "The office is in Porto"),  # other subject
        ExistingCard(1, "user", "employer", "profile", "User works at Acme"),  # other attribute
        ExistingCard(1, "user", None, "fact", "User lives in Porto"),  # no attribute
        ExistingCard(1, "user", "city", "profile", "User lives in Porto", valid=False),
        ExistingCard(1, "user", "city", "turn", "I live in Porto"),  # a turn is history
    ],
)
def test_nothing_is_superseded_without_the_same_subject_and_attribute(
    card: ExistingCard,
) -> None:
    assert decide_supersede(LISBON, [card]) == SupersedeDecision()


def test_a_draft_without_a_key_supersedes_nothing() -> None:
    assert decide_supersede(draft("User moved to Lisbon", None), [PORTO]) == SupersedeDecision()


def test_a_pinned_card_is_never_superseded_but_reported() -> None:
    pinned = ExistingCard(1, "user", "city", "profile", "User lives in Porto", pinned=True)
    other = ExistingCard(2, "user", "city", "profile", "User lives in Braga")

    decision = decide_supersede(LISBON, [pinned, other])

    assert decision == SupersedeDecision(supersedes=(2,), pinned_conflicts=(1,))


def test_a_changed_preference_supersedes() -> None:
    liked = ExistingCard(5, "user", "preference:coffee", "preference", "User likes coffee")
    changed = draft("User doesn't like coffee", "preference:coffee", type="preference")

    assert decide_supersede(changed, [liked]).supersedes == (5,)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("remind me to send the invoice to Bob", "send invoic bob"),
        ("I finished sending the invoice", "send invoic"),
        ("To do: write the report", "writ report"),
        ("Done: writing the report", "writ report"),
        ("I submitted the form", "submit form"),
        ("提醒我交报告", "交报告"),
        ("报告完成了", "报告"),
        ("待办：给妈妈打电话", "给妈妈打电话"),
    ],
)
def test_task_key(text: str, key: str) -> None:
    assert task_key(text) == key


@pytest.mark.parametrize(
    ("open_task", "done_task"),
    [
        ("To do: send the invoice to Bob", "Done: sending the invoice"),
        ("To do: write the report", "Done: writing the report"),
        ("To do: book flights to Lisbon", "Done: booked the flights to Lisbon"),
        ("待办：交报告", "已完成：报告"),
        ("待办：给妈妈打电话", "已完成：给妈妈打电话了"),
    ],
)
def test_a_task_marked_done_supersedes_the_open_task(open_task: str, done_task: str) -> None:
    stored = ExistingCard(7, "user", task_attribute(open_task), "task", open_task)

    decision = decide_supersede(draft(done_task, task_attribute(done_task), type="task"), [stored])

    assert decision.supersedes == (7,)


def test_a_done_task_leaves_other_tasks_open() -> None:
    stored = [
        ExistingCard(1, "user", task_attribute("call the bank"), "task", "To do: call the bank"),
        ExistingCard(2, "user", task_attribute("renew passport"), "task", "To do: renew passport"),
        ExistingCard(3, "user", task_attribute("买牛奶"), "task", "待办：买牛奶"),
    ]
    done = "Done: renewed the passport"

    decision = decide_supersede(draft(done, task_attribute(done), type="task"), stored)

    assert decision.supersedes == (2,)

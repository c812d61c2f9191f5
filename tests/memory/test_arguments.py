"""The facade's checks of its own arguments, without a database: what each refuses, in the
words the caller reads, and the search plan they build from what they accept."""

from datetime import UTC, datetime
from typing import Any

import pytest

from memory.arguments import check_fact, check_forget_target, search_plan
from memory.errors import InvalidArgumentError

_NO_FILTERS: dict[str, Any] = {
    "types": None,
    "session_id": None,
    "topic": None,
    "tags": None,
    "since": None,
    "until": None,
    "min_score": None,
    "include_superseded": False,
}


def test_a_search_plan_carries_every_filter() -> None:
    since = datetime(2026, 1, 1, tzinfo=UTC)
    plan = search_plan(
        "tea", k=3, **{**_NO_FILTERS, "types": ["fact"], "tags": ["drinks"], "since": since}
    )
    assert plan.k == 3
    assert plan.where.types == ("fact",)
    assert plan.where.tags == ("drinks",)
    assert plan.where.since == since


@pytest.mark.parametrize(
    ("query", "k", "filters", "complaint"),
    [
        (3, 4, {}, "query must be a string, not int"),
        ("\udfff", 4, {}, "lone surrogate"),
        ("x", -1, {}, "k must be a whole number >= 0, not -1"),
        ("x", True, {}, "k must be a whole number >= 0, not True"),
        ("x", 4, {"types": "fact"}, "types must be a list of strings, not one string"),
        ("x", 4, {"since": "then"}, "search filter since"),
    ],
)
def test_a_search_refuses(query: Any, k: Any, filters: dict[str, Any], complaint: str) -> None:
    with pytest.raises(InvalidArgumentError, match=complaint):
        search_plan(query, k=k, **{**_NO_FILTERS, **filters})


@pytest.mark.parametrize(
    ("noun", "text", "tags", "complaint"),
    [
        ("pin", 7, None, "a pin's text must be a string, not int"),
        ("memory", 7, None, "a memory's text must be a string, not int"),
        ("pin", "tea \x00", None, "pin text contains a NUL"),
        ("memory", "tea", "a", "tags must be a list of strings, not one string"),
        ("pin", "  ", None, "a pin needs a text"),
        ("memory", "  ", None, "a memory needs a text"),
    ],
)
def test_a_fact_to_keep_refuses(noun: str, text: Any, tags: Any, complaint: str) -> None:
    with pytest.raises(InvalidArgumentError, match=complaint):
        check_fact(text, tags, noun=noun)


def test_a_fact_with_text_and_tags_passes() -> None:
    check_fact("Prefers green tea", ["drinks"], noun="pin")


def test_forget_takes_one_target_at_most() -> None:
    check_forget_target(None, None)
    check_forget_target(1, None)
    check_forget_target(None, "s1")
    with pytest.raises(InvalidArgumentError, match="not both"):
        check_forget_target(1, "s1")

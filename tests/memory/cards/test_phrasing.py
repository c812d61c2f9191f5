"""Wording helpers: sentences, questions, third person, absolute dates, tool categories."""

# Chinese text is written with its own full-width punctuation, on purpose.
# ruff: noqa: RUF001

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memory.cards.dates import resolve_date
from memory.cards.phrasing import (
    category_of,
    is_question,
    split_sentences,
    third_person,
    with_absolute_date,
)

SAID = datetime(2023, 5, 10, 12, tzinfo=UTC)


def test_sentences_split_at_final_marks_but_not_inside_names() -> None:
    assert split_sentences("We use Node.js. I like v1.2! Really?\nYes") == [
        "We use Node.js.",
        "I like v1.2!",
        "Really?",
        "Yes",
    ]
    assert split_sentences("我叫王芳。我住在北京！你呢？") == [
        "我叫王芳。",
        "我住在北京！",
        "你呢？",
    ]


@pytest.mark.parametrize(
    ("sentence", "asks"),
    [
        ("What did I do yesterday", True),
        ("Do you like tea", True),
        ("I like tea?", True),
        ("I like tea.", False),
        ("Remind me to call Bob", False),
        ("我们用的是什么数据库", True),
        ("你是谁", True),
        ("我住在北京吗", True),
        ("我住在北京。", False),
    ],
)
def test_is_question(sentence: str, asks: bool) -> None:
    assert is_question(sentence) is asks


@pytest.mark.parametrize(
    ("said", "third"),
    [
        ("I went hiking with my sister", "The user went hiking with the user's sister"),
        ("I'm moving, so I've packed", "The user is moving, so the user has packed"),
        ("we shipped our app", "The user and others shipped their app"),
        ("Ana told me", "Ana told the user"),
        ("我们上周去了上海", "用户等人上周去了上海"),
        ("我昨天生病了", "用户昨天生病了"),
    ],
)
def test_third_person(said: str, third: str) -> None:
    assert third_person(said) == third


@pytest.mark.parametrize(
    ("text", "absolute"),
    [
        ("I went there yesterday", "I went there on 2023-05-09"),
        ("due by next Friday", "due by 2023-05-12"),
        ("since last May", "since May 2022"),
        ("in March 2021 we met", "in March 2021 we met"),
        ("last week was busy", "in the week of 2023-05-01 was busy"),
        ("我上周五去了", "我2023年5月5日去了"),
        ("去年搬家", "2022年搬家"),
    ],
)
def test_with_absolute_date(text: str, absolute: str) -> None:
    resolved = resolve_date(text, SAID)
    assert resolved is not None
    assert with_absolute_date(text, resolved) == absolute


@pytest.mark.parametrize(
    ("thing", "category"),
    [
        ("Postgres 16", "database"),
        ("PostgreSQL", "database"),
        ("GitHub Actions", "ci"),
        ("Next.js", "framework"),
        ("阿里云", "cloud"),
        ("Redis做缓存", "cache"),
        ("redis", "cache"),
        ("Notion", None),
        ("我们的新系统", None),
    ],
)
def test_category_of(thing: str, category: str | None) -> None:
    assert category_of(thing) == category

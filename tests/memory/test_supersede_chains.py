"""Supersede chains under rules-only extraction: acyclic, one current card per fact, whatever comes.

A property test on the real Postgres: random sequences of statements of one fact (a city, an
employer, a phone, a sport, a diet; English and Chinese phrasings; values said again; equal
times; sessions archived out of order and archived twice) are read by the rule extractor and
written by ``CardWriter`` in batches. The chains never turn back on themselves, exactly one
card of the fact is current, and it holds a value said last.
"""

# Chinese text is written with its own full-width punctuation, on purpose.
# ruff: noqa: RUF001

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory.cards.model import SourceMessage
from memory.cards.rules import extract_by_rules
from memory.cards.supersede import ChainLink, chain_problems
from memory.longterm.card_lifecycle import CardWriter
from retrieval import MINILM_NAME, CardDraft, CardIndex, HashingEmbedder
from storage import CardFilter, CardStore, Database

T0 = datetime(2025, 1, 6, 9, tzinfo=UTC)

# For each fact: its attribute, the values it takes, and phrasings that state a value.
FACTS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "city": (
        "city",
        ("Lyon", "Berlin", "Porto", "Cork"),
        (
            "I live in {}.",
            "I moved to {}.",
            "Big news, we moved to {}.",
            "I moved house, my home is in {} now.",
            "My home is in {}.",
            "I'm based in {}",
        ),
    ),
    "城市": (
        "city",
        ("天津", "西安", "杭州"),
        ("我家在{}。", "我们已经搬去{}了。", "我们搬家了，现在家在{}。", "我住在{}。"),
    ),
    "employer": (
        "employer",
        ("Kestrel Optics", "Pine Ledger", "Harbor Mutual"),
        (
            "I'm employed by {}.",
            "I left my job; I'm with {} now.",
            "Started at {} this month.",
            "I work at {}.",
        ),
    ),
    "phone": (
        "phone",
        ("Pixel 8", "Galaxy S22", "iPhone 13"),
        ("My phone is a {}.", "Got a new phone, a {}.", "I switched phones, it's a {} now."),
    ),
    "sport": (
        "sport",
        ("running", "cycling", "pilates"),
        ("I go {} on Saturdays.", "I switched to {} on Sundays now.", "These days I do {}."),
    ),
    "diet": (
        "diet",
        ("vegetarian", "vegan", "pescatarian"),
        ("I'm {}.", "I went fully {} this month.", "I eat fish again now, so I'm {}."),
    ),
}


@st.composite
def histories(draw: st.DrawFn) -> tuple[str, list[tuple[str, str, int]], list[list[int]], int]:
    """A fact, its statements (value, text, day), the batches they are archived in (in the
    order they are archived), and a batch archived twice (a retry)."""
    fact = draw(st.sampled_from(sorted(FACTS)))
    _, values, phrasings = FACTS[fact]
    said = draw(
        st.lists(
            st.tuples(st.sampled_from(values), st.sampled_from(phrasings), st.integers(0, 4)),
            min_size=1,
            max_size=8,
        )
    )
    statements = [(value, phrasing.format(value), day) for value, phrasing, day in said]
    # Consecutive statements make a session; sessions are archived in any order.
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(statements) - 1)), max_size=3)))
    bounds = [0, *[c for c in cuts if c < len(statements)], len(statements)]
    batches = [list(range(a, b)) for a, b in itertools.pairwise(bounds) if a < b]
    batches = draw(st.permutations(batches))
    retry = draw(st.integers(0, len(batches) - 1))
    return fact, statements, list(batches), retry


@pytest.fixture(scope="module")
def chains_database(database_url: str) -> Iterator[Database]:
    with Database.open(database_url) as opened:
        yield opened


@pytest.fixture(scope="module")
def index(chains_database: Database) -> CardIndex:
    store = CardStore(chains_database, model=MINILM_NAME, dimension=384)
    return CardIndex(store, HashingEmbedder(name=MINILM_NAME))


def stored_drafts(statements: list[tuple[str, str, int]], batch: list[int]) -> list[CardDraft]:
    """The rule extractor's cards of one archived batch, as the index stores them."""
    messages = [
        SourceMessage("user", statements[i][1], T0 + timedelta(days=statements[i][2]), i, f"m{i}")
        for i in batch
    ]
    return [
        CardDraft(
            type=draft.type,
            text=draft.text,
            observed_at=draft.observed_at,
            subject=draft.subject,
            attribute=draft.attribute,
            source_client_ids=list(draft.source_ids),
        )
        for draft in extract_by_rules(messages)
    ]


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(history=histories())
@pytest.mark.slow
def test_rules_only_chains_are_acyclic_with_one_current_card_per_fact(
    index: CardIndex, history: tuple[str, list[tuple[str, str, int]], list[list[int]], int]
) -> None:
    fact, statements, batches, retry = history
    attribute = FACTS[fact][0]
    user_id = f"chains-{uuid.uuid4().hex[:12]}"
    writer = CardWriter(index)
    for number, batch in enumerate(batches):
        writer.write(user_id, stored_drafts(statements, batch))
        if number == retry:  # the same range archived again after a crash
            writer.write(user_id, stored_drafts(statements, batch))

    cards = index.store.list_cards(user_id, CardFilter(include_superseded=True))
    problems = chain_problems(
        ChainLink(c.id, c.subject, c.attribute, c.superseded_by, c.pinned) for c in cards
    )
    assert not problems, (problems, [(c.id, c.text, c.superseded_by) for c in cards])
    [current] = index.store.current_keyed(user_id, [("user", attribute)])
    last_day = max(day for _, _, day in statements)
    said_last = {value for value, _, day in statements if day == last_day}
    assert any(value in current.text for value in said_last), (current.text, statements)


def test_a_fact_said_twice_in_one_batch_around_another_stays_current(
    index: CardIndex,
) -> None:
    # Berlin, Lyon, Berlin archived together: one Berlin card, stated last, current; Lyon
    # closed by it. The card as stored before the batch's closings must not be taken as
    # current (it was closed by Lyon in between): Berlin and Lyon then closed each other.
    user_id = f"chains-{uuid.uuid4().hex[:12]}"
    statements = [
        ("Berlin", "I live in Berlin.", 0),
        ("Lyon", "I live in Lyon.", 1),
        ("Berlin", "I live in Berlin.", 2),
    ]
    CardWriter(index).write(user_id, stored_drafts(statements, [0, 1, 2]))

    cards = {
        c.text: c for c in index.store.list_cards(user_id, CardFilter(include_superseded=True))
    }
    assert cards["User lives in Berlin"].superseded_by is None
    assert cards["User lives in Lyon"].superseded_by == cards["User lives in Berlin"].id


def test_chain_problems_finds_cycles_and_facts_without_one_current_card() -> None:
    links = [
        ChainLink(1, "user", "city", 2),
        ChainLink(2, "user", "city", 1),  # 1 and 2 close each other: no current city
        ChainLink(3, "user", "phone", None),
        ChainLink(4, "user", "phone", None),  # two current phones
        ChainLink(5, "user", "diet", None, pinned=True),
        ChainLink(6, "user", "diet", None),  # a pin beside a current card is allowed
        ChainLink(7, "user", "task:call bob", None),
        ChainLink(8, "user", "task:call bob", None),  # tasks are not facts
        ChainLink(9, None, None, None),
    ]

    problems = chain_problems(links)

    assert problems.facts == 3
    assert problems.cycles == ((1, 2),)
    assert problems.without_current == (("user", "city"),)
    assert problems.several_current == (("user", "phone"),)
    assert problems
    assert not chain_problems([ChainLink(1, "user", "city", 2), ChainLink(2, "user", "city", None)])

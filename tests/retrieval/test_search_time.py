"""Tests of the time window of a card search (``during``), with real dates, MiniLM and Postgres."""

from datetime import UTC, datetime, timedelta

import pytest

import storage.cards.queries
from retrieval import CardDraft, CardIndex, CardQuery
from storage import CardFilter


def said(text: str, when: datetime, occurred: datetime | None = None) -> CardDraft:
    return CardDraft(type="event", text=text, observed_at=when, occurred_at=occurred)


MAY = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
AUGUST = datetime(2023, 8, 14, 9, 30, tzinfo=UTC)
MAY_WINDOW = (datetime(2023, 5, 1, tzinfo=UTC), datetime(2023, 6, 1, tzinfo=UTC))
AUGUST_WINDOW = (datetime(2023, 8, 1, tzinfo=UTC), datetime(2023, 9, 1, tzinfo=UTC))

PAINTINGS = [
    said("I painted a sunrise over the lake with my kids.", MAY),
    said("I painted a sunset over the lake with my kids.", AUGUST),
    said("We adopted a puppy called Oscar.", MAY),
    said("My sister moved to Lisbon.", AUGUST),
    said("The quarterly report is due on Friday.", MAY),
]


def texts(found: list[object]) -> list[str]:
    return [hit.card.text for hit in found]  # type: ignore[attr-defined]


def test_the_window_puts_the_cards_of_that_time_first(index: CardIndex, user_id: str) -> None:
    index.add(user_id, PAINTINGS)
    query = "What did I paint with my kids?"

    in_may = index.search(user_id, query, CardQuery(k=2, during=MAY_WINDOW))
    in_august = index.search(user_id, query, CardQuery(k=2, during=AUGUST_WINDOW))

    # Both paintings match the words equally well; the window decides which comes first.
    assert texts(in_may)[0] == PAINTINGS[0].text
    assert texts(in_august)[0] == PAINTINGS[1].text
    assert set(texts(in_may)) == set(texts(in_august)) == {PAINTINGS[0].text, PAINTINGS[1].text}


def test_a_window_holding_nothing_changes_nothing(index: CardIndex, user_id: str) -> None:
    index.add(user_id, PAINTINGS)
    query = "What did I paint with my kids?"
    # "last week" asked years after the conversation: a window with no card in it.
    empty = (datetime(2026, 11, 23, tzinfo=UTC), datetime(2026, 11, 30, tzinfo=UTC))

    plain = index.search(user_id, query, CardQuery(k=5))
    boosted = index.search(user_id, query, CardQuery(k=5, during=empty))

    assert [(h.card.id, h.score) for h in boosted] == [(h.card.id, h.score) for h in plain]


def test_a_boost_never_removes_a_card(index: CardIndex, user_id: str) -> None:
    index.add(user_id, PAINTINGS)

    for window in (MAY_WINDOW, AUGUST_WINDOW):
        found = index.search(user_id, "lake", CardQuery(k=len(PAINTINGS), during=window))
        assert sorted(texts(found)) == sorted(card.text for card in PAINTINGS)


def test_when_it_happened_counts_as_much_as_when_it_was_said(
    index: CardIndex, user_id: str
) -> None:
    index.add(
        user_id,
        [
            # Said in August about a trip in May: the May window finds it by occurred_at.
            said("We went camping by the river.", AUGUST, occurred=MAY + timedelta(days=3)),
            said("We went camping in the mountains.", AUGUST),
        ],
    )

    [first] = index.search(user_id, "Where did we go camping?", CardQuery(k=1, during=MAY_WINDOW))

    assert first.card.text == "We went camping by the river."


def test_the_window_respects_every_filter(index: CardIndex, user_id: str) -> None:
    index.add(user_id, [*PAINTINGS, said("I painted the fence in May.", MAY).model_copy(
        update={"type": "task"})])  # fmt: skip

    found = index.search(
        user_id, "paint", CardQuery(k=10, during=MAY_WINDOW, where=CardFilter(types=("task",)))
    )

    assert texts(found) == ["I painted the fence in May."]


@pytest.mark.slow
def test_never_fewer_than_k_with_a_window_and_a_filter(index: CardIndex, user_id: str) -> None:
    drafts = [
        said(f"Note number {i} about the garden.", MAY + timedelta(hours=i)) for i in range(30)
    ]
    index.add(user_id, drafts)

    found = index.search(
        user_id,
        "garden",
        CardQuery(k=12, during=AUGUST_WINDOW, diversify=False, where=CardFilter(since=MAY)),
    )

    assert len(found) == 12


def test_users_above_the_exact_scan_limit_take_the_index_path_with_the_same_cards(
    index: CardIndex, user_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    index.add(user_id, PAINTINGS)
    exact = index.search(user_id, "lake", CardQuery(k=5, during=MAY_WINDOW))

    # Every user is "big" now: the vector ranking walks HNSW (falling back to the exact scan
    # when the index leaves fewer than asked, as it must for a small user in a shared table).
    monkeypatch.setattr(storage.cards.queries, "EXACT_SCAN_MAX_CARDS", 1)
    indexed = index.search(user_id, "lake", CardQuery(k=5, during=MAY_WINDOW))

    assert [(h.card.id, round(h.score, 9)) for h in indexed] == [
        (h.card.id, round(h.score, 9)) for h in exact
    ]

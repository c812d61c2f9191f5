"""A date without a year in a card points the way it was said, and recall's time ranking uses it.

"The tax report is due on 5 April", said in December 2024, is a card that happens on 5 April
2025 (its ``occurred_at``, for the extracted card and for the turn card alike); "On 5 April I
moved to Lyon", said the same day, happened in 2024. Asked in March 2025 "which report is due on
5 April?", recall boosts the cards of 5 April 2025: the tax report, not the grant report that
was due the April before.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from memory import Memory, Settings
from retrieval import MINILM_NAME, HashingEmbedder
from storage import Card, Database


@pytest.fixture(scope="module")
def dated_database(database_url: str) -> Iterator[Database]:
    """This module's own handle on the shared database."""
    with Database.open(database_url) as opened:
        yield opened


@pytest.fixture
def mem(dated_database: Database) -> Memory:
    settings = Settings(summary={"mode": "inline", "debounce_seconds": 0})
    return Memory(dated_database, settings, embedder=HashingEmbedder(name=MINILM_NAME))


def say(mem: Memory, user_id: str, session_id: str, said: str, when: datetime) -> None:
    """One exchange said at ``when``, then the session ended (its cards made)."""
    mem.record(
        user_id=user_id,
        session_id=session_id,
        messages=[
            {"role": "user", "content": said, "timestamp": when.isoformat()},
            {"role": "assistant", "content": "Noted.", "timestamp": when.isoformat()},
        ],
    )
    mem.end_session(user_id=user_id, session_id=session_id)


def cards_saying(mem: Memory, user_id: str, words: str) -> list[Card]:
    """Every card of the user (extracted and turn cards) whose text holds ``words``."""
    hits = mem.search(user_id=user_id, query=words, k=50, include_superseded=True)
    return [hit.card for hit in hits if words in hit.card.text]


MARCH = datetime(2024, 3, 1, 10, 0, tzinfo=UTC)
DECEMBER = datetime(2024, 12, 10, 10, 0, tzinfo=UTC)


def test_a_deadline_said_in_december_is_stored_in_the_coming_april(
    mem: Memory, user_id: str
) -> None:
    say(mem, user_id, "s1", "The tax report is due on 5 April.", DECEMBER)
    say(mem, user_id, "s2", "On 5 April I moved to Lyon.", DECEMBER)
    say(mem, user_id, "s3", "报告4月5日截止。", DECEMBER)
    say(mem, user_id, "s4", "我4月5日搬家了。", DECEMBER)

    expected = {
        "tax report": datetime(2025, 4, 5, tzinfo=UTC),
        "moved to Lyon": datetime(2024, 4, 5, tzinfo=UTC),
        "截止": datetime(2025, 4, 5, tzinfo=UTC),
        "搬家": datetime(2024, 4, 5, tzinfo=UTC),
    }
    for words, day in expected.items():
        cards = cards_saying(mem, user_id, words)
        assert {card.type for card in cards} >= {"turn"}, words
        assert [card.occurred_at for card in cards] == [day] * len(cards), words
    # The extracted card words the date with its year, so it reads right when recalled later.
    extracted = [c for c in cards_saying(mem, user_id, "tax report") if c.type != "turn"]
    assert extracted and all("2025" in card.text for card in extracted)


def test_recall_ranks_the_cards_of_the_date_a_question_asks_about(
    mem: Memory, user_id: str
) -> None:
    say(mem, user_id, "s1", "The grant report is due on 5 April.", MARCH)
    say(mem, user_id, "s2", "The tax report is due on 5 April.", DECEMBER)

    context = mem.prepare(
        user_id=user_id,
        session_id="s3",
        input={
            "role": "user",
            "content": "Which report is due on 5 April?",
            "timestamp": datetime(2025, 3, 20, 9, 0, tzinfo=UTC).isoformat(),
        },
    )

    recall = context.report.recall
    assert recall is not None
    recalled = [mem.card(user_id=user_id, card_id=card.card_id) for card in recall.cards]
    reports = [card for card in recalled if "report" in card.text]
    assert reports, [card.text for card in recalled]
    assert "tax report" in reports[0].text
    assert reports[0].occurred_at == datetime(2025, 4, 5, tzinfo=UTC)

"""Tests of hybrid card search on the embedded Postgres with the real MiniLM model."""

import random
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from retrieval import (
    CardDraft,
    CardIndex,
    CardQuery,
    EmbedderMismatchError,
    HashingEmbedder,
    SentenceTransformerEmbedder,
)
from storage import CardFilter

FACTS = [
    "My daughter is called Emma.",
    "We use Postgres with pgvector for the product.",
    "I am allergic to peanuts.",
    "The quarterly report is due on Friday.",
    "I moved from Sweden four years ago.",
    "My favourite painting is a sunrise over a lake.",
    "I run a charity race every spring.",
    "The dog's name is Oscar.",
]


def fact(text: str, **fields: object) -> CardDraft:
    return CardDraft.model_validate({"type": "fact", "text": text, **fields})


def test_semantic_and_keyword_queries_find_their_card(index: CardIndex, user_id: str) -> None:
    index.add(user_id, [fact(text) for text in FACTS])

    def top(query: str) -> str:
        return index.search(user_id, query, CardQuery(k=1))[0].card.text

    # Meaning alone: no word of the question is in the card ("name" is in the dog's card,
    # which the keyword ranking therefore prefers), yet it is among the top two.
    two = [s.card.text for s in index.search(user_id, "What is my child's name?", CardQuery(k=2))]
    assert "My daughter is called Emma." in two
    assert top("which database do we use") == FACTS[1]
    assert top("Oscar") == "The dog's name is Oscar."


@pytest.mark.slow
def test_random_searches_never_return_another_users_card(
    index: CardIndex, minilm: SentenceTransformerEmbedder
) -> None:
    alice, bob = f"alice-{uuid.uuid4()}", f"bob-{uuid.uuid4()}"
    mine = {c.id for c in index.add(alice, [fact(t) for t in FACTS[:4]])}
    # Bob's cards are the better match for every query: only scoping keeps them out.
    index.add(bob, [fact(t) for t in FACTS] + [fact(f"{t} Really.") for t in FACTS])
    words = " ".join(FACTS).split()
    rng = random.Random(7)

    for _ in range(25):
        query = " ".join(rng.sample(words, 4))
        found = index.search(
            alice, query, CardQuery(k=10, where=CardFilter(include_superseded=True))
        )
        assert {s.card.id for s in found} <= mine
        assert len(found) == 4


def test_a_chinese_query_matches_a_chinese_card_by_keywords(index: CardIndex, user_id: str) -> None:
    index.add(
        user_id,
        [fact(t) for t in FACTS]
        + [
            fact("我们的方案是用向量数据库做检索"),
            fact("我女儿叫小美"),
            fact("下周五要交季度报告"),
        ],
    )

    [best] = index.search(user_id, "我上次说的那个方案用的什么数据库", CardQuery(k=1))

    assert best.card.text == "我们的方案是用向量数据库做检索"
    assert best.keyword_score > 0


def test_never_fewer_than_k_when_k_cards_exist(index: CardIndex, user_id: str) -> None:
    index.add(user_id, [fact(text) for text in FACTS])

    # No keyword matches at all: the vector ranking alone must still fill k.
    assert len(index.search(user_id, "zzzz qqqq", CardQuery(k=6))) == 6
    assert len(index.search(user_id, "anything", CardQuery(k=20))) == len(FACTS)


def test_filters_reach_the_search(index: CardIndex, user_id: str) -> None:
    day = datetime(2025, 5, 8, tzinfo=UTC)
    index.add(
        user_id,
        [
            fact("Trip to Paris in May.", session_id="s1", occurred_at=day, tags=["travel"]),
            fact("Trip to Rome in June.", session_id="s2", occurred_at=day + timedelta(30)),
            CardDraft(type="task", text="Book the trip to Oslo.", topic="travel"),
        ],
    )

    def texts(**filters: object) -> list[str]:
        return sorted(
            s.card.text
            for s in index.search(user_id, "trip", CardQuery(k=10, where=CardFilter(**filters)))
        )  # type: ignore[arg-type]

    assert texts(session_id="s2") == ["Trip to Rome in June."]
    assert texts(types=["task"]) == ["Book the trip to Oslo."]
    assert texts(topic="travel") == ["Book the trip to Oslo."]
    assert texts(tags=["travel"]) == ["Trip to Paris in May."]
    assert texts(since=day + timedelta(1), types=["fact"]) == ["Trip to Rome in June."]
    assert texts(until=day + timedelta(1), types=["fact"]) == ["Trip to Paris in May."]


def test_superseded_cards_are_excluded_unless_asked_for(index: CardIndex, user_id: str) -> None:
    old, new = index.add(user_id, [fact("I live in Paris."), fact("I live in Berlin.")])
    index.store.supersede(user_id, old.id, new.id)

    assert [s.card.id for s in index.search(user_id, "where do I live", CardQuery(k=5))] == [new.id]
    both = index.search(
        user_id, "where do I live", CardQuery(k=5, where=CardFilter(include_superseded=True))
    )
    assert {s.card.id for s in both} == {old.id, new.id}


def test_scores_and_min_score(index: CardIndex, user_id: str) -> None:
    index.add(user_id, [fact(text) for text in FACTS])

    found = index.search(user_id, "What is my daughter's name?", CardQuery(k=8))
    assert [s.score for s in found] == sorted((s.score for s in found), reverse=True)
    assert 0 < found[-1].score <= found[0].score <= 1
    strict = index.search(user_id, "What is my daughter's name?", CardQuery(k=8, min_score=0.5))
    assert [s.card.text for s in strict] == ["My daughter is called Emma."]


def test_cards_whose_sources_are_covered_are_skipped(index: CardIndex, user_id: str) -> None:
    # Any two of these cover all three sources, so the third ranked is always redundant.
    index.add(
        user_id,
        [
            fact("I went to a support group.", source_client_ids=["1", "2"]),
            fact("How was the support group?", source_client_ids=["2", "3"]),
            fact("The support group was powerful.", source_client_ids=["1", "3"]),
        ],
    )

    diverse = index.search(user_id, "support group", CardQuery(k=3))
    every = index.search(user_id, "support group", CardQuery(k=3, diversify=False))

    assert len(every) == 3
    assert [s.card.id for s in diverse] == [s.card.id for s in every[:2]]


def test_an_embedder_other_than_the_stores_is_refused(index: CardIndex) -> None:
    with pytest.raises(EmbedderMismatchError, match="hashing"):
        CardIndex(index.store, HashingEmbedder())


def test_a_search_without_diversity_reads_k_cards_and_the_next_when_one_was_deleted(
    index: CardIndex, user_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    index.add(user_id, [fact(text) for text in FACTS])
    query = CardQuery(k=3, diversify=False)
    ranked = [s.card.id for s in index.search(user_id, "my family and pets", CardQuery(k=8))]
    asked: list[list[int]] = []
    get_many = index.store.get_many

    def deleting_first(owner: str, card_ids: list[int], *, terms: bool) -> object:
        # The first of the first read is deleted between the ranking and the read.
        if not asked:
            index.store.delete(owner, card_id=card_ids[0])
        asked.append(list(card_ids))
        assert terms  # a search reads each card's stored terms
        return get_many(owner, card_ids, terms=True)

    monkeypatch.setattr(index.store, "get_many", deleting_first)
    found = index.search(user_id, "my family and pets", query)

    assert asked == [ranked[:3], ranked[3:6]]
    assert [s.card.id for s in found] == ranked[1:4]

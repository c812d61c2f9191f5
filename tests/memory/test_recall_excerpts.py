"""What ``prepare`` recalls: merged excerpts, no line twice, the gate, the budget, the report.

Real embedded Postgres; cards embedded with the hashing fake (named as MiniLM, the model the
shared test database records), whose gate is the one measured for it; one test uses MiniLM.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from rich.console import Console

from memory import Memory, Settings
from memory.cli.views import report_view
from memory.context.parts import MEMORIES_HEADER
from memory.context.tokens import TiktokenCounter
from retrieval import MINILM_NAME, HashingEmbedder, SentenceTransformerEmbedder
from storage import Database


@pytest.fixture(scope="module")
def excerpts_database(database_url: str) -> Iterator[Database]:
    with Database.open(database_url) as opened:
        yield opened


@pytest.fixture
def make_memory(excerpts_database: Database) -> Callable[..., Memory]:
    def make(embedder: Any = None, **cards: Any) -> Memory:
        settings = Settings(summary={"mode": "inline", "debounce_seconds": 0}, cards=cards)
        return Memory(
            excerpts_database, settings, embedder=embedder or HashingEmbedder(name=MINILM_NAME)
        )

    return make


def say(mem: Memory, user_id: str, session_id: str, *pairs: tuple[str, str]) -> None:
    mem.record(
        user_id=user_id,
        session_id=session_id,
        messages=[
            message
            for index, (said, answer) in enumerate(pairs)
            for message in (
                {"role": "user", "content": said, "id": f"{session_id}-u{index}"},
                {"role": "assistant", "content": answer, "id": f"{session_id}-a{index}"},
            )
        ],
    )
    mem.end_session(user_id=user_id, session_id=session_id)


def memories(context: Any) -> list[str]:
    """The memories of the prompt, one text each, in order."""
    first = context.messages[0]
    if first["role"] != "system" or not str(first["content"]).startswith(MEMORIES_HEADER):
        return []
    return [json.loads(line[2:]) for line in str(first["content"]).split("\n")[1:]]


def lines_of(texts: list[str]) -> list[str]:
    """Every line of the memories, without the day label of the first."""
    lines = []
    for text in texts:
        for line in text.split("\n"):
            lines.append(line.split("] ", 1)[1] if line.startswith("[") else line)
    return lines


PUPPY = [
    ("We adopted a puppy named Biscuit.", "Congratulations on the puppy!"),
    ("Biscuit the puppy chews every shoe.", "Puppies chew, it passes."),
    ("The puppy Biscuit sleeps in a basket.", "A basket is cosy for a puppy."),
    ("I started the violin.", "Enjoy the violin."),
]


def test_overlapping_turn_cards_reach_the_prompt_once_per_line(
    make_memory: Callable[..., Memory], user_id: str
) -> None:
    mem = make_memory()
    say(mem, user_id, "old", *PUPPY)

    context = mem.prepare(user_id=user_id, session_id="new", input="What about Biscuit the puppy?")

    texts = memories(context)
    lines = lines_of(texts)
    assert texts and len(lines) == len(set(lines))
    # The six puppy lines are consecutive: one memory, dated once, not three overlapping ones
    # (beside it, the card the rules extracted: "User's puppy is called Biscuit").
    excerpts = [text for text in texts if "User: " in text]
    assert len(excerpts) == 1 and excerpts[0].count("] ") == 1
    assert "Biscuit sleeps in a basket" in excerpts[0]


def test_the_report_gives_each_memory_its_score_parts_and_reason(
    make_memory: Callable[..., Memory], user_id: str
) -> None:
    mem = make_memory()
    say(mem, user_id, "old", *PUPPY)

    context = mem.prepare(user_id=user_id, session_id="new", input="What about Biscuit the puppy?")

    recall = context.report.recall
    assert recall is not None
    [card] = [card for card in recall.cards if card.type == "turn"]
    assert card.rank == 1 and card.similarity is not None and card.keyword_share is not None
    assert card.reason.startswith("rank 1: cosine ")
    assert "merged with the lines of #2" in card.reason
    assert len(card.cards) > 1 and card.card_id == card.cards[0]
    stored = {m.id: m.payload["content"] for m in mem.history(user_id=user_id, session_id="old")}
    assert [stored[i] for i in card.message_ids][:2] == [PUPPY[0][0], PUPPY[0][1]]
    text = memories(context)[recall.cards.index(card)]
    assert card.tokens == TiktokenCounter().count_text(
        "- " + json.dumps(text, ensure_ascii=False) + "\n"
    )
    reasons = [c["reason"] for c in json.loads(context.report.to_json())["recall"]["cards"]]
    assert card.reason in reasons


def test_nothing_is_sent_when_nothing_is_relevant(
    make_memory: Callable[..., Memory], user_id: str
) -> None:
    mem = make_memory()
    say(mem, user_id, "old", *PUPPY)

    context = mem.prepare(user_id=user_id, session_id="new", input="Quantum chromodynamics?")

    assert memories(context) == []
    recall = context.report.recall
    assert recall is not None and recall.query and recall.cards == ()
    # A user's own threshold below every card lets them through again.
    loose = make_memory(min_score=-1.0)
    assert memories(loose.prepare(user_id=user_id, session_id="n2", input="Quantum?"))


def test_boilerplate_and_the_users_own_questions_do_not_fill_k(
    make_memory: Callable[..., Memory], user_id: str
) -> None:
    mem = make_memory(k=4)
    boiler = "Happy to help. Here are a couple of ideas you could try."
    say(
        mem,
        user_id,
        "old",
        ("Which phone case should I buy?", boiler),
        ("Is my phone waterproof?", boiler),
        ("What phone plan is cheapest?", boiler),
        ("My phone is a Pixel 8.", "Got it, I will keep that in mind."),
        ("Which phone charger is fastest?", boiler),
        ("How do I clean my phone screen?", boiler),
    )

    context = mem.prepare(user_id=user_id, session_id="new", input="What phone do I use?")

    texts = memories(context)
    assert texts and "Pixel 8" in texts[0]
    # The user's earlier questions and the assistant's stock reply are context at most:
    # no memory is made of them alone, so fewer than k memories are sent.
    for text in texts:
        told = [line for line in lines_of([text]) if not line.endswith("?") and boiler not in line]
        assert told, text
    assert len(texts) < 4
    lines = lines_of(texts)
    assert len(lines) == len(set(lines))


def test_memories_keep_to_their_token_budget(
    make_memory: Callable[..., Memory], user_id: str
) -> None:
    mem = make_memory(k=50, max_tokens=60)
    say(mem, user_id, "old", *PUPPY)

    context = mem.prepare(user_id=user_id, session_id="new", input="What about Biscuit the puppy?")

    recall = context.report.recall
    assert recall is not None and recall.cards
    assert sum(card.tokens or 0 for card in recall.cards) <= 60
    unbounded = make_memory(k=50).prepare(user_id=user_id, session_id="n2", input="Biscuit puppy?")
    assert len(lines_of(memories(unbounded))) > len(lines_of(memories(context)))


@pytest.fixture(scope="module")
def minilm() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder()


def test_minilm_recalls_the_fact_and_not_the_question_about_it(
    make_memory: Callable[..., Memory], user_id: str, minilm: SentenceTransformerEmbedder
) -> None:
    mem = make_memory(embedder=minilm, k=4)
    say(
        mem,
        user_id,
        "old",
        ("Do you know any good peanut-free recipes?", "Sure, here are some ideas."),
        ("Nice weather today.", "Indeed, sunny."),
        ("I'm allergic to peanuts.", "Noted, no peanuts for you."),
    )

    context = mem.prepare(user_id=user_id, session_id="new", input="Do I have any allergies?")

    texts = memories(context)
    assert texts and "allergic to peanuts" in texts[0]
    # Fewer than k: the weather is below the gate, however many places are left.
    assert len(texts) < 4
    assert not any("Nice weather today." in text for text in texts)


def test_inspect_shows_each_memory_with_its_score_tokens_and_reason(
    make_memory: Callable[..., Memory], user_id: str
) -> None:
    mem = make_memory()
    say(mem, user_id, "old", *PUPPY)
    context = mem.prepare(user_id=user_id, session_id="new", input="What about Biscuit the puppy?")
    recall = context.report.recall
    assert recall is not None and recall.cards

    console = Console(width=400, record=True)
    console.print(report_view(context.report))
    out = console.export_text()

    for card in recall.cards:
        assert f"score {card.score:.2f}, {card.tokens} tokens: {card.reason}" in out, out
    assert "rank 1: cosine " in out and "merged with the lines of #2" in out


def test_the_property_a_question_names_comes_first_among_changed_facts(
    make_memory: Callable[..., Memory], user_id: str
) -> None:
    # Phone, sport and city changed too: their stale excerpts must not bring their current
    # cards ahead of the employer the question asks about.
    mem = make_memory()
    chat = ("Suggest a board game for four people.", "Happy to help. Here are some ideas.")
    changes = [
        ("I work at Foxglove Bio.", "My phone is a Galaxy S22.", "I live in Nantes."),
        ("I switched phones, it's an iPhone 13 now.", "I moved house, my home is in Turku now."),
        ("I started a new job at Pine Ledger.", "I switched phones, it's a Fairphone 5 now."),
    ]
    for number, said in enumerate(changes):
        say(mem, user_id, f"s{number}", chat, *((text, "Got it.") for text in said), chat)

    context = mem.prepare(user_id=user_id, session_id="ask", input="Which company am I with now?")

    texts = memories(context)
    assert texts and "Pine Ledger" in texts[0], texts
    assert not any("Foxglove" in text and "until" not in text for text in texts), texts


class _Counting(TiktokenCounter):
    """A tiktoken counter that remembers every text it counted."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    def count_text(self, text: str) -> int:
        self.texts.append(text)
        return super().count_text(text)


def test_each_memory_text_is_counted_once_for_the_walk_and_the_report(
    excerpts_database: Database, user_id: str
) -> None:
    counter = _Counting()
    settings = Settings(summary={"mode": "inline", "debounce_seconds": 0})
    mem = Memory(
        excerpts_database, settings, embedder=HashingEmbedder(name=MINILM_NAME), counter=counter
    )
    say(mem, user_id, "old", *PUPPY)
    counter.texts.clear()

    context = mem.prepare(user_id=user_id, session_id="new", input="What about Biscuit the puppy?")

    recall = context.report.recall
    assert recall is not None and any(card.type == "turn" for card in recall.cards)
    lines = [text for text in counter.texts if text.startswith("- ")]  # memory_tokens' lines
    assert lines and len(lines) == len(set(lines))
    for card, text in zip(recall.cards, memories(context), strict=True):
        assert card.tokens == TiktokenCounter().count_text(
            "- " + json.dumps(text, ensure_ascii=False) + "\n"
        )

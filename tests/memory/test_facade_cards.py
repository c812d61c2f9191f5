"""Long-term memory through the ``Memory`` facade, on the real embedded Postgres.

Cards are embedded with the hashing fake (named as MiniLM, the model the shared test database
records) so these tests stay fast; the recall test at the end uses the real MiniLM, as the
default settings run it (on ONNX Runtime).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from databases import user_rows

from memory import (
    CardNotFoundError,
    ConfigurationError,
    InvalidHistoryError,
    Memory,
    PinBudgetError,
    Settings,
)
from memory.longterm.long_term_memory import default_embedder
from memory.settings import CardSettings
from retrieval import MINILM_NAME, HashingEmbedder, OnnxEmbedder
from storage import Database, InvalidInputError


@pytest.fixture(scope="module")
def cards_database(database_url: str) -> Iterator[Database]:
    """This module's own handle on the shared database."""
    with Database.open(database_url) as opened:
        yield opened


@pytest.fixture
def make_memory(cards_database: Database) -> Callable[..., Memory]:
    """A ``Memory`` in inline mode with the fast fake embedder (or the one given)."""

    def make(embedder: Any = None, **settings: Any) -> Memory:
        values = {"summary": {"mode": "inline", "debounce_seconds": 0}, **settings}
        return Memory(
            cards_database,
            Settings(**values),
            embedder=embedder or HashingEmbedder(name=MINILM_NAME),
        )

    return make


@pytest.fixture
def mem(make_memory: Callable[..., Memory]) -> Memory:
    return make_memory()


def say(mem: Memory, user_id: str, session_id: str, *pairs: tuple[str, str]) -> None:
    mem.record(
        user_id=user_id,
        session_id=session_id,
        messages=[
            message
            for index, (question, answer) in enumerate(pairs)
            for message in (
                {"role": "user", "content": question, "id": f"{session_id}-u{index}"},
                {"role": "assistant", "content": answer, "id": f"{session_id}-a{index}"},
            )
        ],
    )


def test_end_session_archives_turn_cards_with_neighbours_and_sources(
    mem: Memory, user_id: str
) -> None:
    say(mem, user_id, "s1", ("We use Postgres for billing.", "Noted."), ("Thanks!", "Anytime."))
    mem.end_session(user_id=user_id, session_id="s1")

    hits = mem.search(user_id=user_id, query="which database for billing", k=10, types=["turn"])
    first = next(h.card for h in hits if "Postgres" in h.card.text.split("\n")[0])
    stored = mem.history(user_id=user_id, session_id="s1")
    assert first.text.splitlines()[0].endswith("User: We use Postgres for billing.")
    assert first.text.startswith("[")  # dated
    assert first.source_message_ids == [stored[0].id, stored[1].id]
    assert first.source_client_ids == ["s1-u0", "s1-a0"]
    middle = [h.card for h in hits if h.card.source_message_ids[:1] == [stored[0].id]]
    assert middle
    count = len(mem.search(user_id=user_id, query="billing", k=50))
    mem.end_session(user_id=user_id, session_id="s1")  # idempotent
    assert len(mem.search(user_id=user_id, query="billing", k=50)) == count


def test_end_session_extracts_rule_cards(mem: Memory, user_id: str) -> None:
    say(mem, user_id, "s1", ("My name is Ana.", "Hello Ana."))
    mem.end_session(user_id=user_id, session_id="s1")

    extracted = mem.search(user_id=user_id, query="name", k=10, types=["profile", "fact"])
    assert any("Ana" in hit.card.text for hit in extracted)


def test_messages_with_a_nul_become_cards_that_show_it_as_the_summary_does(
    mem: Memory, user_id: str
) -> None:
    # A message keeps its NUL (its JSON holds it); a card's text column cannot: one such turn
    # failed the whole batch of the session's cards. Cards and summaries repair text the same
    # way (``sanitize_text``): a NUL is shown as U+2400, not lost in U+FFFD.
    say(mem, user_id, "s1", ("My name is Ana\x00.", "Hello\x00 Ana."), ("We use Postgres.", "Ok."))
    mem.end_session(user_id=user_id, session_id="s1")

    cards = [hit.card for hit in mem.search(user_id=user_id, query="Ana Postgres", k=50)]
    texts = "\n".join(card.text for card in cards)
    assert "User: My name is Ana\u2400." in texts and "Assistant: Hello\u2400 Ana." in texts
    assert "User: We use Postgres." in texts
    assert "\x00" not in texts
    stored = mem.history(user_id=user_id, session_id="s1")
    assert stored[0].payload["content"] == "My name is Ana\x00."  # the message is unchanged


def test_search_is_scoped_by_user_and_filters(mem: Memory, user_id: str) -> None:
    say(mem, user_id, "s1", ("I like green tea.", "Nice."))
    say(mem, user_id, "s2", ("I like black coffee.", "Good."))
    mem.end_session(user_id=user_id, session_id="s1")
    mem.end_session(user_id=user_id, session_id="s2")

    assert mem.search(user_id=f"{user_id}-other", query="green tea") == []
    only_s2 = mem.search(user_id=user_id, query="I like", k=20, session_id="s2")
    assert only_s2 and all(hit.card.session_id == "s2" for hit in only_s2)


def test_pins_are_first_in_every_prepare_and_unpin(mem: Memory, user_id: str) -> None:
    pin = mem.pin(user_id=user_id, text="Always answer in French.", topic="style")
    assert pin.pinned and [p.id for p in mem.pins(user_id=user_id)] == [pin.id]

    context = mem.prepare(user_id=user_id, session_id="s1", input="hello there")
    assert "Always answer in French." in context.messages[0]["content"]
    assert context.report.recall is not None
    assert context.report.recall.cards[0].card_id == pin.id
    assert context.report.recall.cards[0].pinned

    mem.unpin(user_id=user_id, card_id=pin.id)
    assert mem.pins(user_id=user_id) == []
    with pytest.raises(CardNotFoundError):
        mem.unpin(user_id=f"{user_id}-other", card_id=pin.id)


def test_a_recalled_card_is_looked_up_by_id_for_its_user_only(mem: Memory, user_id: str) -> None:
    pin = mem.pin(user_id=user_id, text="The VPN gateway is vpn-2.")
    context = mem.prepare(user_id=user_id, session_id="s1", input="which gateway?")
    assert context.report.recall is not None
    recalled = context.report.recall.cards[0].card_id
    assert mem.card(user_id=user_id, card_id=recalled).text == "The VPN gateway is vpn-2."
    with pytest.raises(CardNotFoundError, match="has no card"):
        mem.card(user_id=f"{user_id}-other", card_id=pin.id)


def test_pin_over_the_pin_budget_is_refused(
    make_memory: Callable[..., Memory], user_id: str
) -> None:
    mem = make_memory(context_window=2_000, max_output=200)
    budget = int(mem.budget.history * 0.1)
    with pytest.raises(PinBudgetError) as refused:
        mem.pin(user_id=user_id, text="word " * budget)
    assert refused.value.budget == budget
    assert mem.pins(user_id=user_id) == []


@pytest.mark.parametrize(
    ("arguments", "complaint"),
    [
        ({"query": "Lisbon \ud800"}, "query contains a lone surrogate"),
        ({"query": None}, "query must be a string"),
        ({"query": "Lisbon", "k": -1}, "k must be a whole number"),
        ({"query": "Lisbon", "tags": "travel"}, "tags must be a list of strings"),
        ({"query": "Lisbon", "types": "fact"}, "types must be a list of strings"),
        ({"query": "Lisbon", "types": ["nope"]}, "search filter types.0"),
        ({"query": "Lisbon", "since": "last week"}, "search filter since"),
    ],
)
def test_a_careless_search_is_a_clear_error(
    mem: Memory, user_id: str, arguments: dict[str, Any], complaint: str
) -> None:
    say(mem, user_id, "s", ("I live in Lisbon", "Noted."))
    mem.end_session(user_id=user_id, session_id="s")

    with pytest.raises(InvalidInputError, match=complaint):
        mem.search(user_id=user_id, **arguments)

    assert mem.search(user_id=user_id, query="Lisbon")  # nothing lost


@pytest.mark.parametrize(
    ("text", "complaint"),
    [("tea \x00", "contains a NUL"), ("tea \udfff", "lone surrogate"), (7, "must be a string")],
)
def test_a_pin_that_is_not_text_is_a_clear_error(
    mem: Memory, user_id: str, text: Any, complaint: str
) -> None:
    mem.pin(user_id=user_id, text="Prefers green tea")

    with pytest.raises(InvalidInputError, match=complaint):
        mem.pin(user_id=user_id, text=text)

    assert [card.text for card in mem.pins(user_id=user_id)] == ["Prefers green tea"]


def test_a_pin_over_the_card_bounds_is_a_clear_error(mem: Memory, user_id: str) -> None:
    with pytest.raises(InvalidInputError, match="topic has 1,000,000 characters"):
        mem.pin(user_id=user_id, text="Prefers green tea", topic="t" * 1_000_000)
    with pytest.raises(InvalidInputError, match="21 tags"):
        mem.pin(user_id=user_id, text="Prefers green tea", tags=[f"t{n}" for n in range(21)])

    assert mem.pins(user_id=user_id) == []


def test_forget_everything_leaves_nothing(
    mem: Memory, user_id: str, cards_database: Database
) -> None:
    say(mem, user_id, "s1", ("We use Postgres.", "Ok."))
    mem.pin(user_id=user_id, text="Keep it short.")
    mem.end_session(user_id=user_id, session_id="s1")
    mem.prepare(user_id=user_id, session_id="s2", input="hi")

    mem.forget(user_id=user_id)

    tables = ("messages", "sessions", "session_summaries", "jobs", "cards")
    tables += ("card_terms", "archive_marks")
    assert user_rows(cards_database, user_id, tables) == dict.fromkeys(tables, 0)
    assert mem.history(user_id=user_id, session_id="s1") == []
    assert mem.search(user_id=user_id, query="Postgres") == []


def test_forget_one_session_or_card(mem: Memory, user_id: str) -> None:
    say(mem, user_id, "s1", ("We use Postgres.", "Ok."))
    say(mem, user_id, "s2", ("We use Redis.", "Ok."))
    mem.end_session(user_id=user_id, session_id="s1")
    mem.end_session(user_id=user_id, session_id="s2")

    mem.forget(user_id=user_id, session_id="s1")
    assert mem.history(user_id=user_id, session_id="s1") == []
    left = mem.search(user_id=user_id, query="We use", k=50)
    assert left and all(hit.card.session_id == "s2" for hit in left)

    mem.forget(user_id=user_id, card_id=left[0].card.id)
    assert left[0].card.id not in {
        h.card.id for h in mem.search(user_id=user_id, query="We use", k=50)
    }
    with pytest.raises(CardNotFoundError):
        mem.forget(user_id=user_id, card_id=left[0].card.id)
    with pytest.raises(ValueError):
        mem.forget(user_id=user_id, card_id=1, session_id="s2")


def test_end_session_in_background_mode_is_a_job(
    make_memory: Callable[..., Memory], user_id: str
) -> None:
    mem = make_memory(summary={"mode": "background", "debounce_seconds": 0})
    say(mem, user_id, "s1", ("We deploy on Fridays.", "Ok."))
    mem.end_session(user_id=user_id, session_id="s1")
    assert mem.search(user_id=user_id, query="deploy Fridays") == []

    mem.run_worker(until_idle=True)

    assert mem.search(user_id=user_id, query="deploy Fridays")


def test_disabled_cards_are_a_clear_error(make_memory: Callable[..., Memory], user_id: str) -> None:
    mem = make_memory(cards={"enabled": False})
    with pytest.raises(ConfigurationError, match=r"cards\.enabled"):
        mem.search(user_id=user_id, query="x")
    context = mem.prepare(user_id=user_id, session_id="s1", input="hi")
    assert context.report.recall is None


class _BrokenEmbedder(HashingEmbedder):
    def embed(self, texts: Any) -> list[list[float]]:
        raise OSError("the model is gone")


def test_recall_failure_never_fails_a_request(
    make_memory: Callable[..., Memory], user_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    mem = make_memory(embedder=_BrokenEmbedder(name=MINILM_NAME))
    with caplog.at_level(logging.ERROR, logger="memory.facade"):
        context = mem.prepare(user_id=user_id, session_id="s1", input="hello")
    assert context.messages[-1]["content"] == "hello"
    assert context.report.recall is not None and context.report.recall.failed
    assert mem.recall_failures == 1
    assert "recall failed" in caplog.text


@pytest.fixture(scope="module")
def minilm() -> OnnxEmbedder:
    """The default settings' embedder: MiniLM on ONNX Runtime."""
    embedder = default_embedder(CardSettings())
    assert isinstance(embedder, OnnxEmbedder)
    return embedder


def test_a_fact_of_session_one_is_recalled_in_session_two(
    make_memory: Callable[..., Memory], user_id: str, minilm: OnnxEmbedder
) -> None:
    mem = make_memory(embedder=minilm)
    say(
        mem,
        user_id,
        "s1",
        ("My daughter is called Lucía.", "What a lovely name."),
        ("We are moving to Porto in June.", "Exciting!"),
    )
    mem.end_session(user_id=user_id, session_id="s1")

    context = mem.prepare(user_id=user_id, session_id="s2", input="What is my daughter's name?")

    memories = context.messages[0]["content"]
    assert context.messages[0]["role"] == "system" and "Lucía" in memories
    report = context.report.recall
    assert report is not None and report.query == "What is my daughter's name?"
    assert report.cards and report.cards[0].score > 0
    assert minilm.runtime == "onnx"


def test_timestamps_are_stored_never_sent_and_date_turn_cards(mem: Memory, user_id: str) -> None:
    mem.record(
        user_id=user_id,
        session_id="s1",
        messages=[
            {"role": "user", "content": "I adopted a cat.", "timestamp": "2023-05-08T13:56:00Z"},
            {
                "role": "assistant",
                "content": "Congratulations!",
                "timestamp": datetime(2023, 5, 8, 13, 57),
            },
        ],
    )
    context = mem.prepare(
        user_id=user_id,
        session_id="s1",
        input={"role": "user", "content": "Thanks", "timestamp": "2023-05-08T14:00:00+00:00"},
    )
    assert all("timestamp" not in message for message in context.messages)
    stored = mem.history(user_id=user_id, session_id="s1")
    assert [m.created_at for m in stored] == [
        datetime(2023, 5, 8, 13, 56, tzinfo=UTC),
        datetime(2023, 5, 8, 13, 57, tzinfo=UTC),
        datetime(2023, 5, 8, 14, 0, tzinfo=UTC),
    ]
    mem.end_session(user_id=user_id, session_id="s1")
    [hit] = mem.search(user_id=user_id, query="adopted a cat", k=1, types=["turn"])
    assert hit.card.text.startswith("[8 May 2023] User: I adopted a cat.")
    assert hit.card.observed_at == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    in_may = mem.search(
        user_id=user_id,
        query="cat",
        k=10,
        since=datetime(2023, 5, 1, tzinfo=UTC),
        until=datetime(2023, 6, 1, tzinfo=UTC),
    )
    assert in_may
    assert mem.search(user_id=user_id, query="cat", since=datetime(2024, 1, 1, tzinfo=UTC)) == []


def test_a_bad_timestamp_is_refused(mem: Memory, user_id: str) -> None:
    with pytest.raises(InvalidHistoryError, match="ISO 8601"):
        mem.record(
            user_id=user_id,
            session_id="s1",
            messages=[{"role": "user", "content": "hi", "timestamp": "yesterday"}],
        )
    assert mem.history(user_id=user_id, session_id="s1") == []


def _long_chat(mem: Memory, user_id: str, turns: int) -> None:
    for index in range(turns):
        mem.record(
            user_id=user_id,
            session_id="s1",
            messages=[
                {"role": "user", "content": f"Note {index}: the code word is zebra{index}."},
                {"role": "assistant", "content": f"Noted zebra{index}."},
            ],
        )


def test_messages_folded_out_of_the_window_become_turn_cards_inline(
    make_memory: Callable[..., Memory], user_id: str
) -> None:
    mem = make_memory(context_window=1_500, max_output=300)
    _long_chat(mem, user_id, 30)
    mem.prepare(user_id=user_id, session_id="s1", input="What was the first code word?")

    summary = mem.summary(user_id=user_id, session_id="s1")
    assert summary is not None and summary.boundary_seq > 2
    hits = mem.search(user_id=user_id, query="zebra0", k=3, types=["turn"])
    assert any("zebra0." in hit.card.text for hit in hits)


@pytest.mark.slow
def test_a_consolidation_job_archives_what_it_folds_once(
    make_memory: Callable[..., Memory], user_id: str
) -> None:
    mem = make_memory(
        context_window=1_500, max_output=300, summary={"mode": "background", "debounce_seconds": 0}
    )
    _long_chat(mem, user_id, 30)
    mem.prepare(user_id=user_id, session_id="s1", input="What was the first code word?")
    mem.run_worker(until_idle=True)
    summary = mem.summary(user_id=user_id, session_id="s1")
    assert summary is not None and summary.boundary_seq > 2
    count = len(mem.search(user_id=user_id, query="zebra", k=500))

    # A retried job (the same work again) adds nothing.
    mem._parts.longterm.archiver.archive(user_id, "s1", 0, summary.boundary_seq)  # type: ignore[union-attr]

    assert len(mem.search(user_id=user_id, query="zebra", k=500)) == count
    assert any("zebra1." in h.card.text for h in mem.search(user_id=user_id, query="zebra1", k=3))

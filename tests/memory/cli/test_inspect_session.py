"""``stratamem inspect --user U --session S``: a stored session and its next request."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from cli_fixtures import MemoryFactory, clean_environment, memory_factory
from sqlalchemy import text

from memory import Memory
from memory.cli import main
from memory.cli.views import card_state
from storage import Card, CardFilter, Database


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, database_url: str) -> str:
    url = clean_environment(monkeypatch, database_url)
    monkeypatch.setenv("STRATAMEM_CONTEXT_WINDOW", "4096")
    monkeypatch.setenv("STRATAMEM_CARDS__K", "0")  # no search: MiniLM is not loaded
    return url


@pytest.fixture
def make_memory(database: Database) -> MemoryFactory:
    return memory_factory(database)


def talk_until_summarised(mem: Memory, user_id: str, session_id: str) -> None:
    for turn in range(400):
        mem.prepare(
            user_id=user_id,
            session_id=session_id,
            input=f"I moved the Lisbon office to floor {turn}. Question {turn} " * 3,
        )
        mem.record(
            user_id=user_id,
            session_id=session_id,
            messages=[{"role": "assistant", "content": f"Noted, floor {turn}."}],
        )
        if mem.summary(user_id=user_id, session_id=session_id) is not None:
            return
    raise AssertionError("no summary was ever written")


def test_it_shows_messages_summary_cards_pins_and_the_next_request(
    cli_env: str,
    make_memory: MemoryFactory,
    database: Database,
    user_id: str,
    session_id: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    mem = make_memory(context_window=4_096)
    talk_until_summarised(mem, user_id, session_id)
    pin = mem.pin(user_id=user_id, text="Answer in British English.")
    summary = mem.summary(user_id=user_id, session_id=session_id)
    assert summary is not None
    history = mem.history(user_id=user_id, session_id=session_id)
    longterm = mem._parts.longterm
    assert longterm is not None
    cards = longterm.store.list_cards(user_id, CardFilter(session_id=session_id))
    old, new = cards[0], cards[-1]
    with database.transaction() as session:  # as if a later card had replaced the first one
        session.execute(
            text("UPDATE cards SET superseded_by = :new, valid_to = now() WHERE id = :old"),
            {"new": new.id, "old": old.id},
        )

    assert main(["inspect", "--user", user_id, "--session", session_id, "--messages", "6"]) == 0

    out = capsys.readouterr().out
    tokens = sum(m.tokens for m in history)
    assert f"{len(history):,} message(s), {tokens:,} tokens stored" in out
    assert f"Messages (the newest 6; {len(history) - 6:,} older not shown)" in out
    last = history[-1]
    assert re.search(rf"{last.seq}\s+assistant\s+{last.tokens}\s+window\s+Noted, floor", out)
    assert f"Summary ({summary.kind}): messages up to seq {summary.boundary_seq} folded in" in out
    assert summary.content.splitlines()[0][:40] in out
    assert f"Cards from this session ({len(cards)})" in out
    assert re.search(rf"{old.id}\s+turn\s+\S+ \S+\s+superseded by #{new.id} since ", out)
    assert re.search(rf"{new.id}\s+turn\s+\S+ \S+\s+current\s+", out)
    assert re.search(rf"Pins of the user \(1\).*\n(.*\n)*.*{pin.id}\s+fact.*pinned", out)
    assert "Next request: " in out and "-token budget" in out
    assert re.search(r"memories\s+\d+\s+1 pin\(s\), 0 recalled card\(s\)", out)
    assert re.search(rf"summary\s+\d+\s+{summary.kind}, covers {summary.covered:,} message", out)
    assert re.search(r"window\s+\d+\s+recent messages", out)
    assert len(mem.history(user_id=user_id, session_id=session_id)) == len(history)


def test_an_unknown_session_says_nothing_is_stored(
    cli_env: str, user_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["inspect", "--user", user_id, "--session", "nope"]) == 0
    out = capsys.readouterr().out
    assert "0 message(s), 0 tokens stored" in out
    assert "Nothing is stored for this session." in out


def test_open_tool_calls_are_named_instead_of_a_next_request(
    cli_env: str,
    make_memory: MemoryFactory,
    user_id: str,
    session_id: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    mem = make_memory()
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    mem.record(
        user_id=user_id,
        session_id=session_id,
        messages=[
            {"role": "user", "content": "Look it up."},
            {"role": "assistant", "content": None, "tool_calls": [call]},
        ],
    )

    assert main(["inspect", "--user", user_id, "--session", session_id]) == 0

    out = capsys.readouterr().out
    assert "lookup()" in out
    assert "Next request: none can be assembled yet" in out
    assert "Traceback" not in out


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["inspect"], "give a transcript FILE, or --user and --session"),
        (["inspect", "t.json", "--user", "u"], "not both"),
        (["inspect", "t.json"], "needs --budget"),
        (["inspect", "--user", "u"], "both --user and --session"),
    ],
)
def test_the_two_ways_are_not_mixed(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert expected in capsys.readouterr().err


def test_card_states() -> None:
    when = datetime(2024, 5, 6, 9, 30, tzinfo=UTC)
    fields = {
        "id": 3,
        "user_id": "u",
        "type": "fact",
        "text": "t",
        "topic": None,
        "tags": [],
        "session_id": None,
        "source_message_ids": [],
        "source_client_ids": [],
        "observed_at": when,
        "occurred_at": None,
        "valid_from": when,
        "valid_to": None,
        "superseded_by": None,
        "pinned": False,
        "created_at": when,
    }
    assert card_state(Card(**fields)) == "current"
    assert card_state(Card(**fields | {"pinned": True})) == "pinned"
    replaced = Card(**fields | {"superseded_by": 9, "valid_to": when})
    assert card_state(replaced) == "superseded by #9 since 2024-05-06 09:30"
    assert card_state(Card(**fields | {"valid_to": when})) == "ended 2024-05-06 09:30"

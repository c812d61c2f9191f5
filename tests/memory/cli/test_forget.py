"""``Memory.forget`` counts what it deletes; ``stratamem forget`` deletes for real, confirmed."""

from __future__ import annotations

import io

import pytest
from cli_fixtures import MemoryFactory, clean_environment, memory_factory
from sqlalchemy import text

from memory import Memory
from memory.cli import main
from memory.facade import Forgotten
from storage import CardFilter, Database


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, database_url: str) -> str:
    return clean_environment(monkeypatch, database_url)


@pytest.fixture
def make_memory(database: Database) -> MemoryFactory:
    return memory_factory(database)


def chat_in(mem: Memory, user_id: str, session_id: str, turns: int = 1) -> None:
    for turn in range(turns):
        mem.record(
            user_id=user_id,
            session_id=session_id,
            messages=[
                {"role": "user", "content": f"I live in Lisbon and work at Acme, turn {turn}."},
                {"role": "assistant", "content": f"Noted, turn {turn}."},
            ],
        )


def cards_of(mem: Memory, user_id: str, session_id: str | None = None) -> int:
    longterm = mem._parts.longterm
    assert longterm is not None
    where = CardFilter(session_id=session_id, include_superseded=True)
    return len(longterm.store.list_cards(user_id, where))


def terms_of(mem: Memory, user_id: str, session_id: str) -> int:
    """The keyword terms of the session's cards (rows of ``card_terms``)."""
    with mem._database.engine.connect() as connection:
        return int(
            connection.scalar(
                text(
                    "SELECT count(*) FROM card_terms WHERE user_id = :u AND card_id IN "
                    "(SELECT id FROM cards WHERE user_id = :u AND session_id = :s)"
                ),
                {"u": user_id, "s": session_id},
            )
        )


def fill_until_folded(mem: Memory, user_id: str, session_id: str) -> None:
    """Prepare turns until the session has a summary (inline) or a queued job (background)."""
    trigger = mem._parts.fold_policy.trigger_tokens
    for turn in range(400):
        context = mem.prepare(user_id=user_id, session_id=session_id, input=f"question {turn} " * 8)
        if context.report.tokens.window + context.report.tokens.input > trigger:
            return  # background: the job is queued
        if mem.summary(user_id=user_id, session_id=session_id) is not None:
            return  # inline: folded
    raise AssertionError("the trigger was never reached")


def test_forget_a_session_says_how_many_messages_summaries_cards_and_jobs_went(
    make_memory: MemoryFactory, user_id: str
) -> None:
    mem = make_memory(context_window=4_096)
    chat_in(mem, user_id, "kept", turns=2)
    mem.end_session(user_id=user_id, session_id="kept")
    fill_until_folded(mem, user_id, "gone")
    mem.end_session(user_id=user_id, session_id="gone")
    assert mem.summary(user_id=user_id, session_id="gone") is not None
    messages = len(mem.history(user_id=user_id, session_id="gone"))
    cards = cards_of(mem, user_id, "gone")
    assert cards > 0
    kept_cards = cards_of(mem, user_id, "kept")

    terms = terms_of(mem, user_id, "gone")
    reports = len(mem.kept_reports(user_id=user_id, session_id="gone", limit=1_000))
    assert reports > 0  # each prepare kept its report

    gone = mem.forget(user_id=user_id, session_id="gone")

    assert gone == Forgotten(
        messages=messages,
        summaries=1,
        cards=cards,
        jobs=0,
        card_terms=terms,
        archive_marks=1,
        sessions=1,
        reports=reports,
    )
    assert mem.history(user_id=user_id, session_id="gone") == []
    assert len(mem.history(user_id=user_id, session_id="kept")) == 4
    assert cards_of(mem, user_id, "kept") == kept_cards
    assert gone.describe() == (
        f"{messages:,} messages, 1 summary, {cards} cards ({terms} keyword terms), 0 jobs, "
        f"1 archive mark, 1 session, {reports} kept reports"
    )


def test_forget_counts_queued_jobs_and_one_card(make_memory: MemoryFactory, user_id: str) -> None:
    mem = make_memory(context_window=4_096, summary={"debounce_seconds": 3_600})
    fill_until_folded(mem, user_id, "s")  # background mode: a consolidation job is queued
    pin = mem.pin(user_id=user_id, text="Answer in British English.")

    messages = len(mem.history(user_id=user_id, session_id="s"))
    reports = len(mem.kept_reports(user_id=user_id, session_id="s", limit=1_000))

    assert mem.forget(user_id=user_id, card_id=pin.id) == Forgotten(0, 0, 1, 0, card_terms=3)
    assert mem.forget(user_id=user_id) == Forgotten(
        messages=messages, summaries=0, cards=0, jobs=1, sessions=1, reports=reports
    )
    assert mem.forget(user_id=user_id) == Forgotten(0, 0, 0, 0)


def test_the_command_forgets_a_session_with_yes_and_says_what_went(
    cli_env: str, make_memory: MemoryFactory, user_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    mem = make_memory()
    chat_in(mem, user_id, "s1", turns=3)
    chat_in(mem, user_id, "s2")
    mem.end_session(user_id=user_id, session_id="s1")
    cards = cards_of(mem, user_id, "s1")

    assert main(["forget", "--user", user_id, "--session", "s1", "--yes"]) == 0

    out = capsys.readouterr().out
    assert f"Forgot session 's1' of user '{user_id}': 6 messages, 0 summaries, {cards} cards" in out
    assert mem.history(user_id=user_id, session_id="s1") == []
    assert len(mem.history(user_id=user_id, session_id="s2")) == 2


class Terminal(io.StringIO):
    """Typed answers, as from a terminal."""

    def isatty(self) -> bool:
        return True


def test_without_a_terminal_and_without_yes_nothing_is_deleted(
    cli_env: str,
    make_memory: MemoryFactory,
    user_id: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mem = make_memory()
    chat_in(mem, user_id, "s1")
    monkeypatch.setattr("sys.stdin", io.StringIO("yes\n"))  # a pipe: not a confirmation

    assert main(["forget", "--user", user_id]) == 2

    captured = capsys.readouterr()
    assert "refusing to forget everything of user" in captured.err
    assert "pass --yes" in captured.err
    assert "Traceback" not in captured.err
    assert len(mem.history(user_id=user_id, session_id="s1")) == 2


@pytest.mark.parametrize(("answer", "deleted"), [("n\n", False), ("", False), ("Yes\n", True)])
def test_the_command_asks_at_a_terminal(
    cli_env: str,
    make_memory: MemoryFactory,
    user_id: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    answer: str,
    deleted: bool,
) -> None:
    mem = make_memory()
    chat_in(mem, user_id, "s1")
    monkeypatch.setattr("sys.stdin", Terminal(answer))

    assert main(["forget", "--user", user_id, "--session", "s1"]) == 0

    out = capsys.readouterr().out
    assert f"Forget session 's1' of user '{user_id}'? This cannot be undone. [y/N]" in out
    left = mem.history(user_id=user_id, session_id="s1")
    if deleted:
        assert "Forgot session 's1'" in out and left == []
    else:
        assert "Nothing was deleted." in out and len(left) == 2


def test_the_command_forgets_one_card_or_says_there_is_none(
    cli_env: str, make_memory: MemoryFactory, user_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    mem = make_memory()
    pin = mem.pin(user_id=user_id, text="Call me Sam.")

    assert main(["forget", "--user", user_id, "--card", str(pin.id), "--yes"]) == 0
    assert f"Forgot card {pin.id} of user '{user_id}': 0 messages, 0 summaries, 1 card" in (
        capsys.readouterr().out
    )
    assert mem.pins(user_id=user_id) == []

    assert main(["forget", "--user", user_id, "--card", str(pin.id), "--yes"]) == 1
    assert f"has no card {pin.id}" in capsys.readouterr().err


def test_a_session_and_a_card_at_once_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["forget", "--user", "u", "--session", "s", "--card", "1"])
    assert caught.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err

"""``stratamem chat``: the loop against a streaming fake server, slash commands, failures."""

from __future__ import annotations

import io
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from cli_fixtures import MemoryFactory, clean_environment, memory_factory
from fake_openai import Reply, Status
from fake_streaming import StreamingFakeOpenAI
from rich.console import Console

from memory import Memory
from memory.cli import main
from memory.cli.chat import Chat, ChatOptions
from storage import Database, MessageStore


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, database_url: str) -> str:
    return clean_environment(monkeypatch, database_url)


@pytest.fixture
def make_memory(database: Database) -> MemoryFactory:
    return memory_factory(database)


@pytest.fixture
def fake() -> Iterator[StreamingFakeOpenAI]:
    with StreamingFakeOpenAI() as server:
        yield server


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


class Session:
    """A chat wired to a fake endpoint, its console captured."""

    def __init__(self, mem: Memory, base_url: str, user_id: str, session_id: str) -> None:
        self.mem = mem
        self.screen = io.StringIO()
        client = openai.OpenAI(base_url=base_url, api_key="sk-test", max_retries=0, timeout=30)
        options = ChatOptions(user_id, session_id, "gpt-4o-mini", "Be brief.", base_url)
        self.chat = Chat(mem, client, options, Console(file=self.screen, width=160))

    def type(self, *lines: str) -> str:
        """Run the chat on these lines; what it wrote."""
        assert self.chat.run(io.StringIO("".join(line + "\n" for line in lines))) == 0
        return self.screen.getvalue()


@pytest.mark.slow
def test_a_reply_is_streamed_shown_and_recorded(
    make_memory: MemoryFactory, fake: StreamingFakeOpenAI, user_id: str, session_id: str
) -> None:
    mem = make_memory()
    fake.script(Reply("Hello Sam, nice to meet you."))

    screen = Session(mem, fake.base_url, user_id, session_id).type("Hi, I am Sam.", "/quit")

    [request] = fake.requests
    assert request["stream"] is True
    assert request["model"] == "gpt-4o-mini"
    assert request["messages"][0] == {"role": "system", "content": "Be brief."}
    assert request["messages"][-1] == {"role": "user", "content": "Hi, I am Sam."}
    assert "assistant> Hello Sam, nice to meet you." in screen
    stored = [m.payload for m in mem.history(user_id=user_id, session_id=session_id)]
    assert stored == [
        {"role": "user", "content": "Hi, I am Sam."},
        {"role": "assistant", "content": "Hello Sam, nice to meet you."},
    ]


def test_the_next_message_sends_the_history(
    make_memory: MemoryFactory, fake: StreamingFakeOpenAI, user_id: str, session_id: str
) -> None:
    mem = make_memory()
    fake.script(Reply("Noted."), Reply("Your name is Sam."))

    Session(mem, fake.base_url, user_id, session_id).type("I am Sam.", "What is my name?")

    second = fake.requests[1]["messages"]
    assert second[-3:] == [
        {"role": "user", "content": "I am Sam."},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "What is my name?"},
    ]


def test_pins_search_summary_report_and_help(
    make_memory: MemoryFactory, fake: StreamingFakeOpenAI, user_id: str, session_id: str
) -> None:
    mem = make_memory()
    fake.script(Reply("Sure."))
    session = Session(mem, fake.base_url, user_id, session_id)

    screen = session.type(
        "/report",
        "/pin Answer in British English.",
        "/pins",
        "Tell me about colour.",
        "/report",
        "/summary",
        "/search British English",
        "/search",
        "/frobnicate",
        "/help",
    )

    [pin] = mem.pins(user_id=user_id)
    assert "No request was sent yet in this chat." in screen
    assert f"Pinned as card #{pin.id}: always in the prompt" in screen
    assert re.search(rf"{pin.id}\s+fact\s+\S+ \S+\s+pinned\s+Answer in British English\.", screen)
    # The pin went into the request, first among the memories.
    assert "Answer in British English." in fake.requests[0]["messages"][1]["content"]
    assert "Last request:" in screen and "1 pin(s), 0 recalled card(s)" in screen
    assert "No summary yet: every message is still in the window." in screen
    assert "Cards matching 'British English'" in screen
    assert "error: /search needs a query" in screen
    assert "error: unknown command /frobnicate: /help lists the commands" in screen
    assert "/unpin ID" in screen

    screen = session.type(f"/unpin {pin.id}", "/unpin sixteen", "/unpin 0")
    assert f"Unpinned card #{pin.id}" in screen
    assert "error: /unpin needs a card number, not 'sixteen'" in screen
    assert "has no card 0" in screen
    assert mem.pins(user_id=user_id) == []


def test_a_new_session_recalls_what_the_user_said_before(
    make_memory: MemoryFactory, fake: StreamingFakeOpenAI, user_id: str
) -> None:
    mem = make_memory()
    fake.script(Reply("Noted: Acme in Lisbon."), Reply("You work at Acme."))
    session = Session(mem, fake.base_url, user_id, "first")

    screen = session.type("I work at Acme Corp in Lisbon.", "/new", "Where do I work?")

    new_session = session.chat.session
    assert new_session.startswith("first-")
    assert f"New session '{new_session}'; session 'first' is archived as cards" in screen
    asked = fake.requests[1]["messages"]
    assert [m["role"] for m in asked] == ["system", "system", "user"]  # memories, no history
    assert "Acme Corp in Lisbon" in asked[1]["content"]
    assert len(mem.history(user_id=user_id, session_id=new_session)) == 2


def test_forget_asks_first_and_says_what_it_deleted(
    make_memory: MemoryFactory, fake: StreamingFakeOpenAI, user_id: str, session_id: str
) -> None:
    mem = make_memory()
    fake.script(Reply("Noted."))
    session = Session(mem, fake.base_url, user_id, session_id)

    screen = session.type("My locker code is 4471.", "/forget", "no", "/forget")
    assert f"Forget session '{session_id}'? This cannot be undone. [y/N]" in screen
    assert "Nothing was deleted." in screen
    assert len(mem.history(user_id=user_id, session_id=session_id)) == 2

    mem.pin(user_id=user_id, text="Call me Sam.")
    screen = session.type("/forget", "y", "/forget all", "yes", "/pins")
    assert (
        f"Forgot session '{session_id}': 2 messages, 0 summaries, 0 cards (0 keyword terms), "
        "0 jobs, 0 archive marks, 1 session, 1 kept report." in screen
    )
    assert f"Forgot everything of user '{user_id}': 0 messages, 0 summaries, 1 card" in screen
    assert "No pins." in screen
    assert mem.history(user_id=user_id, session_id=session_id) == []


def test_an_unreachable_model_is_one_clear_line_and_the_message_is_kept(
    make_memory: MemoryFactory, user_id: str, session_id: str
) -> None:
    mem = make_memory()
    session = Session(mem, f"http://127.0.0.1:{closed_port()}/v1", user_id, session_id)

    screen = session.type("Are you there?", "/quit")

    assert re.search(
        r"error: cannot reach http://127\.0\.0\.1:\d+/v1: .*Connection refused", screen
    )
    assert "your message is stored" in screen
    assert "Traceback" not in screen
    assert [m.payload["content"] for m in mem.history(user_id=user_id, session_id=session_id)] == [
        "Are you there?"
    ]


def test_a_failing_model_keeps_the_message_and_the_chat_goes_on(
    make_memory: MemoryFactory, fake: StreamingFakeOpenAI, user_id: str, session_id: str
) -> None:
    mem = make_memory()
    fake.script(Status(503, "overloaded"), Reply("Back again."))

    screen = Session(mem, fake.base_url, user_id, session_id).type("Hello?", "Hello again?")

    assert "error: " in screen and "answered HTTP 503: overloaded" in screen
    assert "assistant> Back again." in screen
    contents = [m.payload["content"] for m in mem.history(user_id=user_id, session_id=session_id)]
    assert contents == ["Hello?", "Hello again?", "Back again."]


def test_a_message_too_long_for_the_window_is_an_error_line_and_the_chat_goes_on(
    make_memory: MemoryFactory, fake: StreamingFakeOpenAI, user_id: str, session_id: str
) -> None:
    mem = make_memory(context_window=4_096)
    fake.script(Reply("Short answer."))

    screen = Session(mem, fake.base_url, user_id, session_id).type("word " * 5_000, "Short?")

    assert "error: the mandatory context needs" in screen
    assert "assistant> Short answer." in screen
    contents = [m.payload["content"] for m in mem.history(user_id=user_id, session_id=session_id)]
    assert contents == ["Short?", "Short answer."]


def test_the_command_needs_a_configured_model(
    cli_env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["chat"]) == 2
    err = capsys.readouterr().err
    assert "no model is configured: set OPENAI_BASE_URL" in err
    assert "Traceback" not in err


def test_the_command_says_when_no_model_is_reachable(
    cli_env: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{closed_port()}/v1")
    assert main(["chat"]) == 3
    err = capsys.readouterr().err
    assert re.search(r"stratamem: error: cannot reach http://127\.0\.0\.1:\d+/v1", err)
    assert "Traceback" not in err


@pytest.mark.slow
def test_the_command_chats_over_stdin_with_its_own_worker(
    cli_env: str,
    fresh_data_dir: Path,
    fake: StreamingFakeOpenAI,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A database of its own: the chat's worker thread would run other tests' queued jobs.
    monkeypatch.delenv("STRATAMEM_DATABASE_URL")
    monkeypatch.setenv("STRATAMEM_DATA_DIR", str(fresh_data_dir))
    monkeypatch.setenv("STRATAMEM_CARDS__K", "0")  # nothing to search: MiniLM is not loaded
    monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
    monkeypatch.setattr("sys.stdin", io.StringIO("Hello!\n/report\n"))
    fake.script(Reply("Hi! How can I help?"))

    assert main(["chat", "--user", "ana", "--session", "s", "--model", "gpt-4.1-mini"]) == 0

    out = capsys.readouterr().out
    assert "stratamem chat: gpt-4.1-mini at " in out
    assert "assistant> Hi! How can I help?" in out
    assert "Last request:" in out
    [request] = fake.requests
    assert request["model"] == "gpt-4.1-mini" and request["stream"] is True
    with Database.open(None, data_dir=fresh_data_dir) as database:
        contents = [m.payload["content"] for m in MessageStore(database).history("ana", "s")]
    assert contents == ["Hello!", "Hi! How can I help?"]

"""Tests of the ``Memory`` facade in one process, against the real embedded Postgres.

The API as the issue writes it, the bounded cost of ``prepare`` (rows read do not grow with the
history, and never cross the summary boundary), and invalid input: each refused with a clear
error and nothing stored. Cards are embedded with the hashing fake (named as MiniLM, the model
the shared test database records): no test here is about recall, and MiniLM would embed every
archived turn (minutes for the 2,000-message test under load).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from databases import drop_pending_jobs, last_job_id
from sqlalchemy import event

import storage.messages.store
from memory import (
    Budget,
    BudgetError,
    ConfigurationError,
    ContextOverflowError,
    InvalidHistoryError,
    Memory,
    RecordConflictError,
    Settings,
    count_tokens,
    validate_history,
)
from memory.testing import ScriptedChatModel
from retrieval import MINILM_NAME, HashingEmbedder
from storage import Database, MessageStore, NewMessage, StoredMessage
from storage.messages.store import WindowRead

#: A window small enough that a few dozen messages overflow it.
SMALL_WINDOW = {"context_window": 1_500, "max_output": 300}


@pytest.fixture(scope="module")
def facade_database(database_url: str) -> Iterator[Database]:
    """This module's own handle on the shared database, so no test disposes the shared one."""
    with Database.open(database_url) as opened:
        yield opened


@pytest.fixture
def make_memory(facade_database: Database) -> Iterator[Callable[..., Memory]]:
    """Build a ``Memory`` on this module's database with the given settings.

    Consolidation jobs are due at once (no debounce), so a test that queues one can run the
    worker until idle. What a test leaves queued is deleted after it: a later test's worker
    would run it (the job queue is global).
    """
    before = last_job_id(facade_database)

    def make(**settings: Any) -> Memory:
        settings = {"summary": {"debounce_seconds": 0}, **settings}
        return Memory(
            facade_database, Settings(**settings), embedder=HashingEmbedder(name=MINILM_NAME)
        )

    yield make
    drop_pending_jobs(facade_database, after=before)


@pytest.fixture
def mem(make_memory: Callable[..., Memory]) -> Memory:
    """A ``Memory`` with gpt-4o-mini's full window."""
    return make_memory()


@pytest.fixture
def small(make_memory: Callable[..., Memory]) -> Memory:
    """A ``Memory`` whose history budget is about a thousand tokens."""
    return make_memory(**SMALL_WINDOW)


def tool_call(call_id: str, name: str = "weather") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}
        ],
    }


def tool_result(call_id: str, content: str = "18°C, sunny") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def conversation(length: int) -> list[dict[str, Any]]:
    """``length`` alternating user and assistant messages, each the same for its role.

    Identical messages make two sessions of different lengths end alike, so whatever
    ``prepare`` reads for one it must read for the other.
    """
    filler = "the quick brown fox jumps over the lazy dog " * 2
    return [
        {"role": "user", "content": f"question: {filler}"}
        if index % 2 == 0
        else {"role": "assistant", "content": f"answer: {filler}"}
        for index in range(length)
    ]


def contents(history: list[StoredMessage]) -> list[Any]:
    return [message.payload.get("content") for message in history]


# The API, as the issue writes it.


@pytest.mark.slow
def test_prepare_stores_the_input_and_returns_a_plain_openai_context(
    mem: Memory, user_id: str, session_id: str
) -> None:
    context = mem.prepare(
        user_id=user_id, session_id=session_id, input="Capital of France?", system="Be terse."
    )

    assert context.messages == [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "Capital of France?"},
    ]
    assert validate_history(context.messages) == []
    [stored] = mem.history(user_id=user_id, session_id=session_id)
    assert (stored.seq, stored.role, stored.client_id, stored.metadata) == (1, "user", None, {})
    assert stored.payload == {"role": "user", "content": "Capital of France?"}
    assert stored.tokens > 0
    report = context.report
    assert report.budget == mem.budget.history
    assert report.tokens.total == count_tokens(context.messages) <= report.budget
    assert report.tokens.system > 0
    assert report.tokens.input > 0
    assert (report.tokens.summary, report.tokens.memories, report.tokens.window) == (0, 0, 0)
    assert (report.dropped, report.cut_tool_results, report.summary) == ((), (), None)


def test_client_ids_and_metadata_come_back_from_history_but_never_reach_the_model(
    mem: Memory, user_id: str, session_id: str
) -> None:
    asked = {"role": "user", "content": "Book a table", "id": "u-1", "metadata": {"via": "web"}}
    mem.prepare(user_id=user_id, session_id=session_id, input=asked)
    reply = {"role": "assistant", "content": "Done.", "id": "a-1", "metadata": {"trace": [1, 2]}}
    [stored] = mem.record(user_id=user_id, session_id=session_id, messages=[reply])

    context = mem.prepare(user_id=user_id, session_id=session_id, input="Thanks")

    history = mem.history(user_id=user_id, session_id=session_id)
    assert [(m.client_id, m.metadata) for m in history] == [
        ("u-1", {"via": "web"}),
        ("a-1", {"trace": [1, 2]}),
        (None, {}),
    ]
    assert history[1] == stored
    assert context.messages == [
        {"role": "user", "content": "Book a table"},
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": "Thanks"},
    ]
    assert context.messages == [m.payload for m in history]


def test_recording_the_same_client_id_again_stores_it_once(
    mem: Memory, user_id: str, session_id: str
) -> None:
    asked = {"role": "user", "content": "Hi", "id": "u-1"}
    reply = {"role": "assistant", "content": "Hello!", "id": "a-1"}
    mem.prepare(user_id=user_id, session_id=session_id, input=asked)
    first = mem.record(user_id=user_id, session_id=session_id, messages=[reply])

    again = mem.record(user_id=user_id, session_id=session_id, messages=[reply])
    # A batch that is partly stored is neither new nor a replay: refused whole.
    follow_up = {"role": "user", "content": "How are you?", "id": "u-2"}
    with pytest.raises(RecordConflictError, match="'a-1' is already stored"):
        mem.record(user_id=user_id, session_id=session_id, messages=[reply, follow_up])
    mem.prepare(user_id=user_id, session_id=session_id, input=follow_up)
    mem.prepare(user_id=user_id, session_id=session_id, input=follow_up)  # a retried input

    assert again == first
    history = mem.history(user_id=user_id, session_id=session_id)
    assert [(m.seq, m.client_id) for m in history] == [(1, "u-1"), (2, "a-1"), (3, "u-2")]


def test_prepare_without_input_continues_the_tool_loop(
    mem: Memory, user_id: str, session_id: str
) -> None:
    mem.prepare(user_id=user_id, session_id=session_id, input="Weather in Paris?")
    mem.record(user_id=user_id, session_id=session_id, messages=[tool_call("call_1")])

    # The call still waits for its result: no chat API would accept this context.
    with pytest.raises(InvalidHistoryError, match="call_1"):
        mem.prepare(user_id=user_id, session_id=session_id)

    mem.record(user_id=user_id, session_id=session_id, messages=[tool_result("call_1")])
    context = mem.prepare(user_id=user_id, session_id=session_id, system="You report weather.")

    assert context.messages == [
        {"role": "system", "content": "You report weather."},
        {"role": "user", "content": "Weather in Paris?"},
        tool_call("call_1"),
        tool_result("call_1"),
    ]
    assert context.report.tokens.window == 0
    assert context.report.tokens.input == context.report.tokens.total - (
        context.report.tokens.system + 3  # reply priming
    )
    assert len(mem.history(user_id=user_id, session_id=session_id)) == 3


@pytest.mark.slow
def test_a_long_conversation_is_archived_before_the_cap_would_drop_any_of_it(
    small: Memory, user_id: str, session_id: str
) -> None:
    small.record(user_id=user_id, session_id=session_id, messages=conversation(120))

    context = small.prepare(
        user_id=user_id, session_id=session_id, input="And now?", system="Be brief."
    )

    report = context.report
    assert report.budget == small.budget.history
    assert report.tokens.total == count_tokens(context.messages) <= report.budget
    # Offline and background mode, no worker: what the window cannot hold is archived raw.
    summary = small.summary(user_id=user_id, session_id=session_id)
    assert summary is not None and summary.kind == "raw"
    assert report.archived == summary.covered == summary.boundary_seq > 0
    assert not [drop for drop in report.dropped if drop.layer in ("window", "recent")]
    assert validate_history(context.messages) == []
    history = small.history(user_id=user_id, session_id=session_id)
    assert context.messages[0] == {"role": "system", "content": "Be brief."}
    assert context.messages[1]["content"].startswith("Summary of the earlier conversation")
    # Then every message after the boundary, the newest part of the conversation.
    assert context.messages[2:] == [m.payload for m in history[summary.boundary_seq :]]
    assert context.messages[-1] == {"role": "user", "content": "And now?"}

    # The session passed the summary trigger, so a consolidation was queued; it finds the
    # archive in place and nothing more due.
    small.run_worker(until_idle=True)
    assert small.summary(user_id=user_id, session_id=session_id) == summary


def test_a_tool_result_larger_than_the_window_is_stored_whole_and_cut_in_context(
    small: Memory, user_id: str, session_id: str
) -> None:
    log = "".join(f"line {n}: all good\n" for n in range(2_000))
    small.prepare(user_id=user_id, session_id=session_id, input="Read the log")
    small.record(
        user_id=user_id,
        session_id=session_id,
        messages=[tool_call("call_1"), tool_result("call_1", log)],
    )

    context = small.prepare(user_id=user_id, session_id=session_id)

    assert small.history(user_id=user_id, session_id=session_id)[-1].payload["content"] == log
    [cut] = context.report.cut_tool_results
    assert cut.tool_call_id == "call_1"
    assert cut.tokens_after < cut.tokens_before
    assert context.report.tokens.total == count_tokens(context.messages) <= context.report.budget
    assert validate_history(context.messages) == []
    small.run_worker(until_idle=True)


@pytest.mark.slow
def test_open_without_a_url_uses_the_embedded_database_in_the_data_dir(
    fresh_data_dir: Path, monkeypatch: pytest.MonkeyPatch, user_id: str, session_id: str
) -> None:
    monkeypatch.setenv("STRATAMEM_DATA_DIR", str(fresh_data_dir))
    monkeypatch.delenv("STRATAMEM_DATABASE_URL", raising=False)

    with Memory.open() as mem:
        assert mem.settings.database_url is None
        assert mem.settings.data_dir == fresh_data_dir
        mem.prepare(user_id=user_id, session_id=session_id, input="hello")

    assert (fresh_data_dir / "pg" / "PG_VERSION").is_file()
    # Opened again, the folder holds the same database.
    with Memory.open() as again:
        assert contents(again.history(user_id=user_id, session_id=session_id)) == ["hello"]


def test_open_with_a_url_uses_that_server(
    database_url: str, facade_database: Database, user_id: str, session_id: str
) -> None:
    with Memory.open(database_url, context_window=4_000, max_output=500) as mem:
        assert mem.settings.database_url == database_url
        assert mem.budget == Budget(4_000, 500, 80)
        context = mem.prepare(user_id=user_id, session_id=session_id, input="hi")

    assert context.report.budget == 4_000 - 500 - 80
    assert contents(MessageStore(facade_database).history(user_id, session_id)) == ["hi"]


def test_settings_come_from_the_environment_once_in_open(
    monkeypatch: pytest.MonkeyPatch,
    database_url: str,
    facade_database: Database,
    user_id: str,
    session_id: str,
) -> None:
    monkeypatch.setenv("STRATAMEM_DATABASE_URL", database_url)
    monkeypatch.setenv("STRATAMEM_MODEL", "gpt-4")
    monkeypatch.setenv("STRATAMEM_CONTEXT_WINDOW", "6000")
    monkeypatch.setenv("STRATAMEM_MAX_OUTPUT", "1000")
    monkeypatch.setenv("STRATAMEM_RECENT_MESSAGES", "2")

    # An argument wins over the environment.
    with Memory.open(max_output=500) as mem:
        # Read once: changing the environment afterwards changes nothing.
        monkeypatch.setenv("STRATAMEM_CONTEXT_WINDOW", "100")
        monkeypatch.setenv("STRATAMEM_MODEL", "no-such-model")
        context = mem.prepare(user_id=user_id, session_id=session_id, input="hi")

        assert (mem.settings.model, mem.settings.recent_messages) == ("gpt-4", 2)
        assert mem.budget == Budget(6_000, 500, 120)
        assert context.report.budget == 6_000 - 500 - 120
    assert contents(MessageStore(facade_database).history(user_id, session_id)) == ["hi"]


# Bounded cost: what prepare reads does not grow with the history.


@pytest.fixture
def message_rows(facade_database: Database, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The number of messages each read of the messages table returned, as they run.

    Plain SELECTs are counted on the wire; the window's one statement (which also returns the
    summary and may store the input) by the messages it returned.
    """
    rows: list[int] = []

    def count(_conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and re.search(
            r"\bFROM messages\b", statement
        ):
            rows.append(cursor.rowcount)

    run_window_statement = storage.messages.store.run_window_statement

    def count_window(*args: Any) -> Any:
        read = run_window_statement(*args)
        rows.append(len(read.recent) + (read.input is not None))
        return read

    monkeypatch.setattr(storage.messages.store, "run_window_statement", count_window)
    event.listen(facade_database.engine, "after_cursor_execute", count)
    yield rows
    event.remove(facade_database.engine, "after_cursor_execute", count)


@pytest.fixture
def walks(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, list[int]]]:
    """Every walk back over a session: its ``after_seq`` and the seqs its caller consumed.

    The window's walks too: with the summary read in the same statement (after its boundary),
    and with the input stored first (the input is the first message consumed).
    """
    seen: list[tuple[int, list[int]]] = []

    def spied(after_seq: int, records: Iterator[StoredMessage]) -> Iterator[StoredMessage]:
        consumed: list[int] = []
        seen.append((after_seq, consumed))
        for message in records:
            consumed.append(message.seq)
            yield message

    walk_back = MessageStore.walk_back

    def spy(
        store: MessageStore, user_id: str, session_id: str, *, after_seq: int = 0, batch: int = 64
    ) -> Iterator[StoredMessage]:
        records = walk_back(store, user_id, session_id, after_seq=after_seq, batch=batch)
        yield from spied(after_seq, records)

    walk_back_after_summary = MessageStore.walk_back_after_summary

    def spied_read(read: WindowRead) -> WindowRead:
        after_seq = max(read.floor, read.summary.boundary_seq if read.summary else 0)
        return replace(read, messages=spied(after_seq, read.messages))

    def spy_after_summary(
        store: MessageStore,
        user_id: str,
        session_id: str,
        *,
        held: StoredMessage | None = None,
        batch: int = 64,
    ) -> WindowRead:
        return spied_read(
            walk_back_after_summary(store, user_id, session_id, held=held, batch=batch)
        )

    append_input = MessageStore.append_input

    def spy_append_input(
        store: MessageStore,
        user_id: str,
        session_id: str,
        message: NewMessage,
        *,
        held: StoredMessage | None = None,
        batch: int = 64,
    ) -> tuple[StoredMessage, WindowRead] | None:
        appended = append_input(store, user_id, session_id, message, held=held, batch=batch)
        if appended is None:
            return None
        return appended[0], spied_read(appended[1])

    monkeypatch.setattr(MessageStore, "walk_back", spy)
    monkeypatch.setattr(MessageStore, "walk_back_after_summary", spy_after_summary)
    monkeypatch.setattr(MessageStore, "append_input", spy_append_input)
    return seen


@pytest.mark.slow
def test_prepare_reads_as_many_rows_for_2000_messages_as_for_200(
    small: Memory,
    user_id: str,
    message_rows: list[int],
    walks: list[tuple[int, list[int]]],
) -> None:
    rows_read: dict[int, int] = {}
    consumed: dict[int, int] = {}
    contexts: dict[int, list[dict[str, Any]]] = {}
    for length in (200, 2_000):
        session_id = f"session-{uuid.uuid4()}"
        small.record(user_id=user_id, session_id=session_id, messages=conversation(length))
        # The first request archives the backlog the window cannot hold (once, in one step);
        # from then on every request reads only what is new after the boundary.
        small.prepare(user_id=user_id, session_id=session_id, input="First?")
        small.record(user_id=user_id, session_id=session_id, messages=conversation(2)[1:])
        boundary = small.summary(user_id=user_id, session_id=session_id)
        assert boundary is not None
        message_rows.clear()
        walks.clear()

        contexts[length] = small.prepare(
            user_id=user_id, session_id=session_id, input="Next?"
        ).messages[1:]  # after the summary, which names how many messages it covers

        rows_read[length] = sum(message_rows)
        [(after_seq, seqs)] = walks
        # The window cached by the first request is extended by the two new rows only.
        assert boundary.boundary_seq < after_seq == length + 1
        assert seqs == list(range(length + 3, length + 3 - len(seqs), -1))
        consumed[length] = len(seqs)

    assert rows_read[200] == rows_read[2_000] < 200
    assert consumed[200] == consumed[2_000] < 200
    assert contexts[200] == contexts[2_000]
    small.run_worker(until_idle=True)


def test_prepare_never_reads_past_the_summary_boundary(
    small: Memory,
    user_id: str,
    session_id: str,
    message_rows: list[int],
    walks: list[tuple[int, list[int]]],
) -> None:
    small.record(user_id=user_id, session_id=session_id, messages=conversation(300))
    summary = small.consolidate(user_id=user_id, session_id=session_id)
    assert summary is not None
    assert summary.kind == "raw"  # no model configured: the offline raw archive
    boundary = summary.boundary_seq
    assert 0 < boundary < 300
    message_rows.clear()
    walks.clear()

    context = small.prepare(user_id=user_id, session_id=session_id)

    # What is after the boundary fits the budget: the walk reads it all and stops there.
    assert walks == [(boundary, list(range(300, boundary, -1)))]
    assert sum(message_rows) == 300 - boundary
    assert context.report.summary is not None
    assert (context.report.summary.kind, context.report.summary.covered) == ("raw", boundary)
    assert context.messages[0]["role"] == "system"
    assert context.messages[0]["content"].startswith("Summary of the earlier conversation")
    # Then the window: the newest messages after the boundary (the raw archive is long, and
    # the oldest window units go before the summary is shortened).
    history = small.history(user_id=user_id, session_id=session_id)
    kept = context.messages[1:]
    assert 0 < len(kept) <= 300 - boundary
    assert kept == [m.payload for m in history[-len(kept) :]]
    assert context.report.tokens.total == count_tokens(context.messages) <= context.report.budget


# Invalid input: a clear error, and nothing stored.


MALFORMED = [
    pytest.param({"content": "no role"}, "role", id="missing-role"),
    pytest.param({"role": "robot", "content": "beep"}, "role", id="unknown-role"),
    pytest.param({"role": "user", "content": 42}, "content", id="content-an-int"),
    pytest.param(["user", "hi"], "expected a dict", id="not-a-dict"),
    pytest.param({"role": "user", "content": "hi", "id": 7}, "id must be a string", id="int-id"),
    pytest.param(
        {"role": "user", "content": "hi", "metadata": ["x"]},
        "metadata must be a dict",
        id="list-metadata",
    ),
    pytest.param(
        {"role": "assistant", "tool_calls": [{"id": "c1", "function": {}}]},
        "tool_calls",
        id="call-without-name",
    ),
]


@pytest.mark.parametrize(("message", "problem"), MALFORMED)
def test_a_malformed_message_is_refused_naming_it_and_nothing_is_stored(
    mem: Memory, user_id: str, session_id: str, message: Any, problem: str
) -> None:
    mem.prepare(user_id=user_id, session_id=session_id, input="first")

    with pytest.raises(InvalidHistoryError) as caught:
        mem.record(
            user_id=user_id,
            session_id=session_id,
            messages=[{"role": "assistant", "content": "fine"}, message],
        )

    assert "message 1" in str(caught.value)
    assert problem in str(caught.value)
    assert contents(mem.history(user_id=user_id, session_id=session_id)) == ["first"]


@pytest.mark.parametrize("given", [{"role": "robot", "content": "hi"}, 42, {"content": "hi"}])
def test_a_malformed_input_to_prepare_is_refused_and_nothing_is_stored(
    mem: Memory, user_id: str, session_id: str, given: Any
) -> None:
    with pytest.raises(InvalidHistoryError, match="message 0"):
        mem.prepare(user_id=user_id, session_id=session_id, input=given)

    assert mem.history(user_id=user_id, session_id=session_id) == []


def test_an_orphan_tool_result_is_refused_and_nothing_is_stored(
    mem: Memory, user_id: str, session_id: str
) -> None:
    mem.prepare(user_id=user_id, session_id=session_id, input="hi")
    mem.record(
        user_id=user_id, session_id=session_id, messages=[{"role": "assistant", "content": "hello"}]
    )

    with pytest.raises(InvalidHistoryError, match="call_1"):
        mem.record(user_id=user_id, session_id=session_id, messages=[tool_result("call_1")])
    with pytest.raises(InvalidHistoryError, match="cannot come first"):
        mem.record(
            user_id=user_id, session_id=f"{session_id}-new", messages=[tool_result("call_1")]
        )

    assert contents(mem.history(user_id=user_id, session_id=session_id)) == ["hi", "hello"]
    assert mem.history(user_id=user_id, session_id=f"{session_id}-new") == []


def test_a_result_for_an_unknown_call_is_refused_and_nothing_is_stored(
    mem: Memory, user_id: str, session_id: str
) -> None:
    mem.prepare(user_id=user_id, session_id=session_id, input="Weather?")
    mem.record(user_id=user_id, session_id=session_id, messages=[tool_call("call_1")])

    with pytest.raises(InvalidHistoryError, match="call_2"):
        mem.record(user_id=user_id, session_id=session_id, messages=[tool_result("call_2")])

    assert len(mem.history(user_id=user_id, session_id=session_id)) == 2
    # The right result is still accepted.
    mem.record(user_id=user_id, session_id=session_id, messages=[tool_result("call_1")])
    assert len(mem.history(user_id=user_id, session_id=session_id)) == 3


def test_a_user_message_recorded_while_calls_are_open_is_refused_and_nothing_is_stored(
    mem: Memory, user_id: str, session_id: str
) -> None:
    mem.prepare(user_id=user_id, session_id=session_id, input="Weather?")
    mem.record(user_id=user_id, session_id=session_id, messages=[tool_call("call_1")])

    # Only a new input through prepare closes open calls (see test_open_tool_calls.py).
    with pytest.raises(InvalidHistoryError, match="close_open_calls"):
        mem.record(
            user_id=user_id, session_id=session_id, messages=[{"role": "user", "content": "Hm?"}]
        )

    assert [m.role for m in mem.history(user_id=user_id, session_id=session_id)] == [
        "user",
        "assistant",
    ]


@pytest.mark.parametrize(
    "last",
    [
        pytest.param({"role": "robot", "content": "x"}, id="malformed"),
        pytest.param(tool_result("call_9"), id="unanswerable"),
        pytest.param({"role": "assistant", "content": "x " * 20_000}, id="too-large"),
    ],
)
def test_a_batch_whose_last_message_is_invalid_stores_none_of_it(
    small: Memory, user_id: str, session_id: str, last: dict[str, Any]
) -> None:
    small.prepare(user_id=user_id, session_id=session_id, input="Go")
    batch = [tool_call("call_1"), tool_result("call_1"), {"role": "assistant", "content": "Done"}]

    with pytest.raises((InvalidHistoryError, ContextOverflowError), match="message 3"):
        small.record(user_id=user_id, session_id=session_id, messages=[*batch, last])

    assert contents(small.history(user_id=user_id, session_id=session_id)) == ["Go"]


def test_a_client_id_twice_in_one_batch_is_refused_and_nothing_is_stored(
    mem: Memory, user_id: str, session_id: str
) -> None:
    twice = [
        {"role": "user", "content": "a", "id": "same"},
        {"role": "assistant", "content": "b", "id": "same"},
    ]

    with pytest.raises(ValueError, match="same"):
        mem.record(user_id=user_id, session_id=session_id, messages=twice)

    assert mem.history(user_id=user_id, session_id=session_id) == []


def test_another_users_session_is_out_of_reach_everywhere(
    mem: Memory, user_id: str, session_id: str
) -> None:
    mem.prepare(user_id=user_id, session_id=session_id, input="mine")
    intruder = f"intruder-{uuid.uuid4()}"

    # The same session id names the intruder's own, empty session: nothing of ours shows.
    assert mem.history(user_id=intruder, session_id=session_id) == []
    assert mem.summary(user_id=intruder, session_id=session_id) is None
    assert mem.consolidate(user_id=intruder, session_id=session_id) is None
    context = mem.prepare(user_id=intruder, session_id=session_id, input="let me in")
    assert "mine" not in str(context.messages)
    mem.record(
        user_id=intruder, session_id=session_id, messages=[{"role": "assistant", "content": "x"}]
    )

    assert contents(mem.history(user_id=user_id, session_id=session_id)) == ["mine"]
    assert contents(mem.history(user_id=intruder, session_id=session_id)) == ["let me in", "x"]


@pytest.mark.parametrize(
    "values",
    [
        {"context_window": -5},
        {"context_window": 0},
        {"max_output": -1},
        {"safety_margin": -1},
        {"recent_messages": -1},
        {"tool_result_max_tokens": 0},
    ],
)
def test_negative_budgets_are_refused_before_connecting(values: dict[str, Any]) -> None:
    # Nothing listens at this address: the settings must fail before any connection is tried.
    unreachable = "postgresql+psycopg://nobody@127.0.0.1:9/nothing"

    with pytest.raises(ConfigurationError, match=next(iter(values))):
        Memory.open(unreachable, **values)


@pytest.mark.parametrize(
    ("values", "problem"),
    [
        ({"context_window": 1_000, "max_output": 1_000}, "leaves no room"),
        ({"context_window": 1_000, "max_output": 950}, "leaves no room"),
        ({"context_window": 1_000, "safety_margin": 800}, "leaves no room"),
        ({"model": "my-own-model"}, "unknown model"),
    ],
)
def test_budgets_that_leave_no_room_are_refused_at_open(
    database_url: str, facade_database: Database, values: dict[str, Any], problem: str
) -> None:
    with pytest.raises(BudgetError, match=problem):
        Memory.open(database_url, **values)
    with pytest.raises(BudgetError, match=problem):
        Memory(facade_database, Settings(**values))


def test_a_message_larger_than_the_whole_window_is_refused_with_its_numbers(
    small: Memory, user_id: str, session_id: str
) -> None:
    small.prepare(user_id=user_id, session_id=session_id, input="hello")
    huge = "word " * 3_000

    attempts: list[Callable[[], object]] = [
        lambda: small.prepare(user_id=user_id, session_id=session_id, input=huge),
        lambda: small.record(
            user_id=user_id,
            session_id=session_id,
            messages=[{"role": "assistant", "content": huge}],
        ),
    ]
    for attempt in attempts:
        with pytest.raises(ContextOverflowError) as caught:
            attempt()
        error = caught.value
        assert error.budget == small.budget.history
        assert error.required > error.budget
        assert f"{error.required} tokens" in str(error)
        assert f"budget is {error.budget}" in str(error)

    assert contents(small.history(user_id=user_id, session_id=session_id)) == ["hello"]


def test_an_input_that_fits_alone_but_not_with_the_system_message_is_not_stored(
    small: Memory, user_id: str, session_id: str
) -> None:
    small.prepare(user_id=user_id, session_id=session_id, input="hello")
    system = "rule " * (small.budget.history // 2)
    question = "why " * (small.budget.history // 2)

    with pytest.raises(ContextOverflowError, match="with the system message") as caught:
        small.prepare(user_id=user_id, session_id=session_id, input=question, system=system)

    assert caught.value.required > small.budget.history
    assert contents(small.history(user_id=user_id, session_id=session_id)) == ["hello"]
    context = small.prepare(user_id=user_id, session_id=session_id, input=question)
    assert context.messages[-1]["content"] == question


def test_recording_nothing_creates_no_session(mem: Memory, user_id: str, session_id: str) -> None:
    assert mem.record(user_id=user_id, session_id=session_id, messages=[]) == []

    mem.prepare(user_id="another-user", session_id=session_id, input="mine")

    assert mem.history(user_id=user_id, session_id=session_id) == []


@pytest.mark.slow
def test_a_backlog_is_folded_in_bounded_summariser_calls(
    facade_database: Database, user_id: str, session_id: str
) -> None:
    # One call per fold for the summary and the cards (long-term memory is on).
    replies = [json.dumps({"summary": f"summary {n}", "cards": []}) for n in range(50)]
    chat = ScriptedChatModel(replies)
    settings = Settings(context_window=2_000, max_output=200)
    memory = Memory(
        facade_database, settings, chat=chat, embedder=HashingEmbedder(name=MINILM_NAME)
    )
    for turn in range(60):  # recorded with no prepare and no worker: a backlog builds up
        memory.record(
            user_id=user_id,
            session_id=session_id,
            messages=[
                {"role": "user", "content": f"question {turn} " * 10},
                {"role": "assistant", "content": f"answer {turn} " * 10},
            ],
        )
    trigger = memory._parts.fold_policy.trigger_tokens
    history = memory.history(user_id=user_id, session_id=session_id)

    summary = memory.consolidate(user_id=user_id, session_id=session_id)

    assert summary is not None and summary.version == len(chat.requests) > 1
    assert summary.covered == summary.boundary_seq
    folded = [m for m in history if m.seq <= summary.boundary_seq]
    assert sum(m.tokens for m in folded) > 2 * trigger
    for request in chat.requests:
        prompt = request.messages[-1]["content"]
        in_prompt = [m for m in folded if f"{m.payload['content'].strip()}" in prompt]
        assert 0 < sum(m.tokens for m in in_prompt) <= 2 * trigger


def test_a_broken_batch_names_stored_messages_by_their_seq_and_client_id(
    mem: Memory, user_id: str, session_id: str
) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "track", "arguments": "{}"}}
    mem.prepare(user_id=user_id, session_id=session_id, input="Where is my order?")
    mem.record(
        user_id=user_id,
        session_id=session_id,
        messages=[{"role": "assistant", "content": None, "tool_calls": [call], "id": "a-1"}],
    )

    with pytest.raises(InvalidHistoryError) as caught:
        mem.record(
            user_id=user_id,
            session_id=session_id,
            messages=[{"role": "tool", "tool_call_id": "c9", "content": "?"}],
        )

    assert str(caught.value.problems[0]).startswith("message 0: unknown tool_call_id 'c9'")
    assert "stored message seq 2 (id 'a-1') made no such call" in str(caught.value.problems[0])


@pytest.mark.slow
def test_each_step_of_a_backlog_reads_only_its_bounded_increment(
    facade_database: Database,
    user_id: str,
    session_id: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    chat = ScriptedChatModel([f"summary {n}" for n in range(200)])
    settings = Settings(context_window=2_000, max_output=200)
    memory = Memory(
        facade_database, settings, chat=chat, embedder=HashingEmbedder(name=MINILM_NAME)
    )
    for turn in range(200):  # recorded with no prepare and no worker: a long backlog
        memory.record(
            user_id=user_id,
            session_id=session_id,
            messages=[
                {"role": "user", "content": f"question {turn} " * 10},
                {"role": "assistant", "content": f"answer {turn} " * 10},
            ],
        )
    policy = memory._parts.fold_policy
    backlog = sum(m.tokens for m in memory.history(user_id=user_id, session_id=session_id))
    reads: list[int] = []  # tokens each read returned
    for name in ("read_increment", "between"):
        original = getattr(MessageStore, name)

        def spy(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
            rows = _original(*args, **kwargs)
            reads.append(sum(row.tokens for row in rows))
            return rows

        monkeypatch.setattr(MessageStore, name, spy)

    memory.consolidate(user_id=user_id, session_id=session_id)

    assert len(chat.requests) > 5  # many steps
    # No read grows with the backlog: each is at most a step plus what the policy keeps.
    assert max(reads) <= 3 * policy.trigger_tokens + 200 < backlog / 4

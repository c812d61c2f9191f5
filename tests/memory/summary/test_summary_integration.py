"""The rolling summary end to end: ``Memory`` over Postgres, its summariser reached through the
real ``openai`` client at a local fake server that replies, fails and hangs on purpose."""

from __future__ import annotations

import functools
import itertools
import re
import signal
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from child_process import Child, Spawn
from databases import own_database
from fake_openai import Behaviour, Empty, FakeOpenAI, Hang, Reply, Status
from sqlalchemy import text
from summary_child import SETTINGS, settings

from memory import AssembledContext, Memory, Settings, SummaryState
from memory.context.parts import quote_summary
from memory.context.tokens import TiktokenCounter
from memory.context.units import validate_history
from memory.llm import OpenAIChatModel
from memory.session.incoming import parse_input
from memory.summary.policy import FoldPolicy
from memory.summary.summarizer import SummaryEvent
from storage import Database, SummaryRecord, SummaryStore

CHILD = Path(__file__).with_name("summary_child.py")
SYSTEM = "You are a travel assistant."
#: A bound for waits on things that happen within a second; reached only when a test fails.
WAIT_S = 30.0


# --- the database, the server and the memory -----------------------------------------------


@pytest.fixture(scope="module")
def private_database(database: Database) -> Iterator[Database]:
    """A database of this module's own on the shared server.

    The job queue is global: a worker claims any session's due job and
    ``run_worker(until_idle=True)`` waits for every pending one, so jobs that other test modules
    leave behind would otherwise reach these workers (and their fake servers).
    """
    with own_database(database, "summary") as opened:
        yield opened


@pytest.fixture
def db(private_database: Database) -> Database:
    """The module's database, with an empty job queue."""
    with private_database.transaction() as session:
        session.execute(text("DELETE FROM jobs"))
    return private_database


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


def open_memory(
    database: Database,
    server: FakeOpenAI,
    events: list[SummaryEvent] | None = None,
    **overrides: Any,
) -> Memory:
    """Inline consolidation unless overridden; not closed (that would dispose ``database``)."""
    return Memory(
        database,
        settings(server.base_url, **{"summary_mode": "inline", **overrides}),
        chat=OpenAIChatModel(base_url=server.base_url, api_key="test"),
        on_summary_event=None if events is None else events.append,
    )


def numbered_summaries() -> Callable[[dict[str, Any]], Behaviour]:
    """A responder whose n-th reply is summary number n."""
    numbers = itertools.count(1)
    return lambda body: Reply(f"Summary number {next(numbers)}: a trip to Lisbon in May.")


def hang_and_signal(notify: Callable[[], object]) -> Callable[[dict[str, Any]], Behaviour]:
    """A responder that calls ``notify`` when a request arrives, then holds it until ``release``."""

    def respond(body: dict[str, Any]) -> Behaviour:
        notify()
        return Hang()

    return respond


# --- the conversation ----------------------------------------------------------------------


def line(seq: int) -> str:
    """The text of the session's message ``seq``, tagged so a test can find it in requests."""
    return f"[m{seq:03d}] notes on the Lisbon trip: dates, budget, the hotel by the river, Sintra."


def tags(text_: str) -> list[int]:
    """The seqs of the messages whose text appears in ``text_``, in order."""
    return [int(seq) for seq in re.findall(r"\[m(\d{3})\]", text_)]


def next_seq(memory: Memory, user_id: str, session_id: str) -> int:
    return len(memory.history(user_id=user_id, session_id=session_id)) + 1


def record_exchange(memory: Memory, user_id: str, session_id: str) -> None:
    """Store one user message and its answer and nothing else: no fold, unlike ``record``.

    ``Memory.record`` folds by itself once the session is past the trigger; these tests build
    that state first, then fold the way each test says. So the exchange goes to the session
    writer under ``record`` (the same validation and storage, without the fold check).
    """
    seq = next_seq(memory, user_id, session_id)
    messages = [
        {"role": "user", "content": line(seq)},
        {"role": "assistant", "content": line(seq + 1)},
    ]
    batch = [
        memory._parts.writer.new_message(i, *parse_input(i, data))
        for i, data in enumerate(messages)
    ]
    memory._parts.writer.record(user_id, session_id, batch)


def prepare_turn(memory: Memory, user_id: str, session_id: str) -> AssembledContext:
    """Prepare the next user message (consolidating inline when due), then record the answer."""
    seq = next_seq(memory, user_id, session_id)
    context = memory.prepare(user_id=user_id, session_id=session_id, input=line(seq), system=SYSTEM)
    answer = {"role": "assistant", "content": line(seq + 1)}
    memory.record(user_id=user_id, session_id=session_id, messages=[answer])
    return context


def trigger_tokens(memory: Memory) -> int:
    return FoldPolicy.for_history_budget(memory.budget.history).trigger_tokens


def fill_past(memory: Memory, user_id: str, session_id: str, tokens: int) -> None:
    """Record exchanges until the messages after the summary boundary exceed ``tokens``."""
    summary = memory.summary(user_id=user_id, session_id=session_id)
    boundary = summary.boundary_seq if summary else 0
    while (
        sum(
            m.tokens
            for m in memory.history(user_id=user_id, session_id=session_id)
            if m.seq > boundary
        )
        <= tokens
    ):
        record_exchange(memory, user_id, session_id)


def fill_past_trigger(memory: Memory, user_id: str, session_id: str) -> None:
    fill_past(memory, user_id, session_id, trigger_tokens(memory))


def archive(memory: Memory, user_id: str, session_id: str, first: int, last: int) -> str:
    """The raw archive of messages ``first..last``: one ``role: text`` line each."""
    return "\n".join(
        f"{message.role}: {message.payload['content']}"
        for message in memory.history(user_id=user_id, session_id=session_id)
        if first <= message.seq <= last
    )


def prompt(body: dict[str, Any]) -> str:
    """The material of a summary request (the user message after the instructions)."""
    content = body["messages"][1]["content"]
    assert isinstance(content, str)
    return content


def new_messages(body: dict[str, Any]) -> str:
    """The transcript part of a summary request."""
    return prompt(body).split("\nNew messages:\n", 1)[1]


def jobs_of(database: Database, session_id: str) -> list[tuple[str, int]]:
    """``(status, attempts)`` of the session's jobs, oldest first."""
    with database.engine.connect() as connection:
        rows = connection.execute(
            text("SELECT status, attempts FROM jobs WHERE session_id = :s ORDER BY id"),
            {"s": session_id},
        )
        return [(status, attempts) for status, attempts in rows]


def assert_covers_from_start(summary: SummaryRecord) -> None:
    # Every message from seq 1 up to the boundary is folded exactly once.
    assert summary.covered == summary.boundary_seq


# --- inline consolidation ------------------------------------------------------------------


def run_inline_conversation(
    memory: Memory, user_id: str, session_id: str, turns: int
) -> tuple[list[SummaryRecord], AssembledContext]:
    """Prepare ``turns`` turns; return each new summary version and the last context."""
    versions: list[SummaryRecord] = []
    context = None
    for _ in range(turns):
        context = prepare_turn(memory, user_id, session_id)
        summary = memory.summary(user_id=user_id, session_id=session_id)
        if summary is not None and (not versions or summary.version != versions[-1].version):
            versions.append(summary)
    assert context is not None
    return versions, context


@pytest.mark.slow
def test_inline_prepare_folds_old_messages_into_a_versioned_summary(
    db: Database, server: FakeOpenAI, user_id: str, session_id: str
) -> None:
    server.responder = numbered_summaries()
    memory = open_memory(db, server)

    versions, _ = run_inline_conversation(memory, user_id, session_id, 40)

    assert len(versions) >= 2
    assert [summary.version for summary in versions] == list(range(1, len(versions) + 1))
    assert len(server.requests) == len(versions)  # one summary call per consolidation
    previous_boundary = 0
    for summary, body in zip(versions, server.requests, strict=True):
        assert summary.kind == "llm"
        assert summary.content.startswith(f"Summary number {summary.version}:")
        folded = tags(new_messages(body))
        assert folded == list(range(previous_boundary + 1, summary.boundary_seq + 1))
        assert_covers_from_start(summary)
        previous_boundary = summary.boundary_seq

    context = prepare_turn(memory, user_id, session_id)
    latest = memory.summary(user_id=user_id, session_id=session_id)
    assert latest is not None
    assert context.messages[0] == {"role": "system", "content": SYSTEM}
    label = context.messages[1]
    assert label["role"] == "system"
    assert label["content"].startswith(
        f"Summary of the earlier conversation ({latest.covered} messages; LLM summary)."
    )
    assert label["content"].endswith("\n" + quote_summary(latest.content))
    history = memory.history(user_id=user_id, session_id=session_id)
    # The window goes on right after the boundary.
    assert context.messages[2] == history[latest.boundary_seq].payload
    assert context.report.summary == SummaryState("llm", latest.covered, False, False)

    assert [message.seq for message in history] == list(range(1, len(history) + 1))
    assert [message.payload["content"] for message in history] == [
        line(message.seq) for message in history
    ]
    assert len(history) > latest.boundary_seq


@pytest.mark.slow
def test_the_summariser_sees_each_message_once_and_only_the_increment(
    db: Database, server: FakeOpenAI, user_id: str, session_id: str
) -> None:
    server.responder = numbered_summaries()
    memory = open_memory(db, server)

    versions, _ = run_inline_conversation(memory, user_id, session_id, 70)

    requests = server.requests
    assert len(versions) >= 4
    last = versions[-1]
    sent = list(itertools.chain.from_iterable(tags(new_messages(body)) for body in requests))
    assert sorted(sent) == list(range(1, last.boundary_seq + 1))  # each exactly once
    assert "Current summary: (none yet)" in prompt(requests[0])
    for summary, body in zip(versions, requests[1:], strict=False):
        assert f"Current summary:\n{summary.content}\n\nNew messages:\n" in prompt(body)

    # The cost of a call follows its increment (bounded by the trigger), not the history.
    counter = TiktokenCounter(memory.settings.model)
    history = memory.history(user_id=user_id, session_id=session_id)
    assert sum(message.tokens for message in history) > 3 * trigger_tokens(memory)
    for body in requests:
        assert counter.count_text(new_messages(body)) <= trigger_tokens(memory)
    sizes = [counter.count_text(prompt(body)) for body in requests]
    assert max(sizes[1:]) < 1.5 * min(sizes[1:])


# --- degradation ---------------------------------------------------------------------------


def test_the_fallback_model_takes_over_when_the_primary_keeps_failing(
    db: Database, server: FakeOpenAI, user_id: str, session_id: str
) -> None:
    events: list[SummaryEvent] = []
    memory = open_memory(
        db,
        server,
        events,
        summary_fallback_model="fallback-1",
        summary_retries=2,
        summary_fallback_retries=2,
    )
    fill_past_trigger(memory, user_id, session_id)
    server.script(Status(500), Status(503), Reply("Fallback summary: Lisbon in May."))

    # prepare alone: recording the answer may be due a fold of its own (record folds too).
    seq = next_seq(memory, user_id, session_id)
    context = memory.prepare(user_id=user_id, session_id=session_id, input=line(seq), system=SYSTEM)

    assert [body["model"] for body in server.requests] == [
        "summariser-1",
        "summariser-1",
        "fallback-1",
    ]
    assert [(event.kind, event.model) for event in events] == [
        ("attempt", "summariser-1"),
        ("retry", "summariser-1"),
        ("attempt", "summariser-1"),
        ("degrade", "summariser-1"),
        ("attempt", "fallback-1"),
        ("success", "fallback-1"),
    ]
    summary = memory.summary(user_id=user_id, session_id=session_id)
    assert summary is not None
    assert (summary.kind, summary.content, summary.version) == (
        "llm",
        "Fallback summary: Lisbon in May.",
        1,
    )
    assert context.report.summary == SummaryState("llm", summary.covered, False, False)


def test_when_every_model_fails_the_summary_is_a_raw_archive(
    db: Database, server: FakeOpenAI, user_id: str, session_id: str
) -> None:
    events: list[SummaryEvent] = []
    memory = open_memory(
        db, server, events, summary_fallback_model="fallback-1", summary_fallback_retries=1
    )
    fill_past_trigger(memory, user_id, session_id)
    server.script(Status(500), Status(500), Status(500), Status(500))

    context = prepare_turn(memory, user_id, session_id)  # does not raise

    assert len(server.requests) == 4
    assert events[-1].kind == "degrade"
    summary = memory.summary(user_id=user_id, session_id=session_id)
    assert summary is not None
    assert summary.kind == "raw"
    assert summary.content == archive(memory, user_id, session_id, 1, summary.boundary_seq)
    assert_covers_from_start(summary)
    assert context.report.summary == SummaryState("raw", summary.covered, True, False)
    assert "raw archive of the earlier messages, degraded" in context.messages[1]["content"]


def test_a_failed_merge_keeps_the_previous_summary_and_appends_the_archive(
    db: Database, server: FakeOpenAI, user_id: str, session_id: str
) -> None:
    memory = open_memory(db, server, summary_retries=2, summary_fallback_retries=0)
    fill_past_trigger(memory, user_id, session_id)
    server.script(Reply("Summary one: Lisbon in May."))
    prepare_turn(memory, user_id, session_id)
    first = memory.summary(user_id=user_id, session_id=session_id)
    assert first is not None and first.kind == "llm"

    fill_past_trigger(memory, user_id, session_id)
    server.script(Status(500), Status(500))
    context = prepare_turn(memory, user_id, session_id)

    summary = memory.summary(user_id=user_id, session_id=session_id)
    assert summary is not None
    increment = archive(memory, user_id, session_id, first.boundary_seq + 1, summary.boundary_seq)
    # The model was down: nobody read the increment, its block starts with no try.
    assert summary.content == (
        "Summary one: Lisbon in May.\n\n[raw archive; summariser tries: 0]\n" + increment
    )
    assert (summary.kind, summary.version) == ("raw", 2)
    assert summary.boundary_seq > first.boundary_seq
    assert_covers_from_start(summary)
    assert context.report.summary == SummaryState("raw", summary.covered, True, False)


def test_empty_and_far_too_long_replies_are_never_stored(
    db: Database, server: FakeOpenAI, user_id: str, session_id: str
) -> None:
    memory = open_memory(db, server, summary_retries=3, summary_fallback_retries=0)
    fill_past_trigger(memory, user_id, session_id)
    server.script(Empty(), Reply(None), Reply(" ".join(["rambling"] * 5_000)))

    context = prepare_turn(memory, user_id, session_id)

    assert len(server.requests) == 3
    summary = memory.summary(user_id=user_id, session_id=session_id)
    assert summary is not None
    assert summary.kind == "raw"
    # The model read the increment (its last reply was refused): that is its first try.
    assert summary.content == "[raw archive; summariser tries: 1]\n" + archive(
        memory, user_id, session_id, 1, summary.boundary_seq
    )
    assert context.report.summary == SummaryState("raw", summary.covered, True, False)


def test_a_slightly_too_long_reply_is_stored_cut_to_its_limit(
    db: Database, server: FakeOpenAI, user_id: str, session_id: str
) -> None:
    # The request's max_tokens is the limit plus the tolerated overshoot (50%): reply between
    # them, at about 1.25 times the limit ("Noted." is three tokens after the first).
    def slightly_too_long(body: dict[str, Any]) -> Behaviour:
        return Reply(". ".join(["Noted"] * int(body["max_tokens"] / 1.5 * 1.25 / 3)))

    server.responder = slightly_too_long
    memory = open_memory(db, server)
    fill_past_trigger(memory, user_id, session_id)

    prepare_turn(memory, user_id, session_id)

    (body,) = server.requests
    limit = body["max_tokens"] / 1.5
    summary = memory.summary(user_id=user_id, session_id=session_id)
    assert summary is not None
    assert summary.kind == "llm"
    counter = TiktokenCounter(memory.settings.model)
    reply = slightly_too_long(body)
    assert isinstance(reply, Reply) and reply.text is not None
    assert limit < counter.count_text(reply.text) <= body["max_tokens"]
    assert counter.count_text(summary.content) <= limit
    kept, _, marker = summary.content.rpartition("\n")
    assert reply.text.startswith(kept)
    assert marker.endswith("tokens cut by stratamem …]")


def test_offline_summaries_are_raw_archives_and_not_degraded(
    db: Database, monkeypatch: pytest.MonkeyPatch, user_id: str, session_id: str
) -> None:
    for name in (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "STRATAMEM_LLM_API_KEY",
        "STRATAMEM_LLM_BASE_URL",
    ):
        monkeypatch.delenv(name, raising=False)
    offline = {name: value for name, value in SETTINGS.items() if not name.startswith("llm_")}
    offline["summary"] = {**SETTINGS["summary"], "mode": "inline"}
    memory = Memory(db, Settings(**offline))
    assert not memory.settings.llm_configured

    fill_past_trigger(memory, user_id, session_id)
    context = prepare_turn(memory, user_id, session_id)
    first = memory.summary(user_id=user_id, session_id=session_id)
    assert first is not None
    assert first.kind == "raw"
    assert context.report.summary == SummaryState("raw", first.covered, False, False)
    assert context.messages[1]["content"].startswith(
        f"Summary of the earlier conversation ({first.covered} messages; "
        "raw archive of the earlier messages). "
    )

    fill_past_trigger(memory, user_id, session_id)
    prepare_turn(memory, user_id, session_id)
    second = memory.summary(user_id=user_id, session_id=session_id)
    assert second is not None
    # A raw archive grows line by line: the whole of it is every folded message, in order.
    assert second.content == archive(memory, user_id, session_id, 1, second.boundary_seq)
    assert (second.kind, second.version) == ("raw", 2)
    assert_covers_from_start(second)


# --- concurrency ---------------------------------------------------------------------------


@pytest.mark.parametrize("earlier", [False, True], ids=["first-summary", "next-summary"])
@pytest.mark.slow
def test_two_concurrent_consolidations_store_exactly_one_version(
    db: Database, server: FakeOpenAI, user_id: str, session_id: str, earlier: bool
) -> None:
    first, second = open_memory(db, server), open_memory(db, server)
    if earlier:
        fill_past_trigger(first, user_id, session_id)
        server.script(Reply("Summary one: Lisbon in May."))
        assert first.consolidate(user_id=user_id, session_id=session_id) is not None
    before = first.summary(user_id=user_id, session_id=session_id)
    fill_past_trigger(first, user_id, session_id)
    arrived = threading.Semaphore(0)
    server.responder = hang_and_signal(arrived.release)

    with ThreadPoolExecutor(2) as pool:
        try:
            futures = [
                pool.submit(memory.consolidate, user_id=user_id, session_id=session_id)
                for memory in (first, second)
            ]
            # Both summary requests are in flight before either may answer.
            assert arrived.acquire(timeout=WAIT_S) and arrived.acquire(timeout=WAIT_S)
        finally:
            server.release()
        results = [future.result(timeout=WAIT_S) for future in futures]

    stored = [result for result in results if result is not None]
    assert len(stored) == 1
    summary = first.summary(user_id=user_id, session_id=session_id)
    assert summary == stored[0]
    assert summary.version == (before.version if before else 0) + 1
    racing = server.requests[-2:]
    folded = tags(new_messages(racing[0]))
    assert tags(new_messages(racing[1])) == folded  # both read the same increment
    assert folded[0] == (before.boundary_seq if before else 0) + 1
    assert summary.boundary_seq == folded[-1]
    assert summary.covered == (before.covered if before else 0) + len(folded)
    assert_covers_from_start(summary)

    # The next consolidation starts right after the stored boundary.
    server.responder = numbered_summaries()
    fill_past_trigger(second, user_id, session_id)
    after = second.consolidate(user_id=user_id, session_id=session_id)
    assert after is not None and after.version == summary.version + 1
    assert tags(new_messages(server.requests[-1]))[0] == summary.boundary_seq + 1
    assert_covers_from_start(after)


# --- background mode -----------------------------------------------------------------------


def test_background_prepare_queues_one_job_that_the_worker_runs(
    db: Database, server: FakeOpenAI, user_id: str, session_id: str
) -> None:
    server.responder = numbered_summaries()
    memory = open_memory(db, server, summary_mode="background")
    fill_past_trigger(memory, user_id, session_id)

    for _ in range(3):
        context = prepare_turn(memory, user_id, session_id)
        assert context.report.summary is None

    assert server.requests == []  # prepare never waits for the summariser
    assert jobs_of(db, session_id) == [("pending", 0)]  # debounced: one job per session

    memory.run_worker(until_idle=True)

    assert len(server.requests) == 1
    assert jobs_of(db, session_id) == [("done", 1)]
    summary = memory.summary(user_id=user_id, session_id=session_id)
    assert summary is not None
    assert (summary.kind, summary.version) == ("llm", 1)
    assert_covers_from_start(summary)
    context = prepare_turn(memory, user_id, session_id)
    assert context.messages[1]["content"].endswith("\n" + quote_summary(summary.content))
    assert context.report.summary == SummaryState("llm", summary.covered, False, False)
    assert len(server.requests) == 1


def test_a_worker_thread_runs_jobs_until_close(
    db: Database, server: FakeOpenAI, user_id: str, session_id: str
) -> None:
    server.responder = numbered_summaries()
    succeeded = threading.Event()
    memory = Memory.open(
        db.url,
        on_summary_event=lambda event: succeeded.set() if event.kind == "success" else None,
        **{
            **SETTINGS,
            "llm_base_url": server.base_url,
            "summary": {**SETTINGS["summary"], "mode": "background"},
        },
    )
    fill_past_trigger(memory, user_id, session_id)
    prepare_turn(memory, user_id, session_id)
    assert jobs_of(db, session_id) == [("pending", 0)]
    before = set(threading.enumerate())

    memory.run_worker()
    workers = [thread for thread in threading.enumerate() if thread not in before]
    assert succeeded.wait(WAIT_S)
    memory.close()

    # The worker's thread, and maybe (by then) the lease keeper of the job it claimed.
    assert [t.name for t in workers if not t.name.startswith("lease-")] == ["stratamem-worker"]
    assert not any(thread.is_alive() for thread in workers)
    assert jobs_of(db, session_id) == [("done", 1)]
    summary = SummaryStore(db).get(user_id, session_id)
    assert summary is not None and summary.content.startswith("Summary number 1:")


@pytest.mark.slow
def test_what_the_window_cannot_hold_before_the_job_runs_is_archived_then_upgraded(
    db: Database, server: FakeOpenAI, user_id: str, session_id: str
) -> None:
    memory = open_memory(db, server, summary_mode="background")
    fill_past(memory, user_id, session_id, 2 * memory.budget.history)

    context = prepare_turn(memory, user_id, session_id)

    # No model call on the request path: the archive is written in milliseconds, raw.
    assert server.requests == []
    archived = memory.summary(user_id=user_id, session_id=session_id)
    assert archived is not None and archived.kind == "raw"
    assert context.report.archived == archived.covered == archived.boundary_seq > 0
    assert context.report.summary == SummaryState("raw", archived.covered, True, False)
    assert not [d for d in context.report.dropped if d.layer in ("window", "recent")]
    assert validate_history(context.messages) == []
    assert context.report.tokens.total <= memory.budget.history
    # Every message is in the archive or in the request, in order.
    sent = [tag for message in context.messages[2:] for tag in tags(message["content"])]
    assert tags(archived.content)[-1] == archived.boundary_seq
    assert sent == list(range(archived.boundary_seq + 1, sent[-1] + 1))
    assert jobs_of(db, session_id) == [("pending", 0)]

    server.responder = numbered_summaries()
    memory.run_worker(until_idle=True)

    upgraded = memory.summary(user_id=user_id, session_id=session_id)
    assert upgraded is not None and upgraded.kind == "llm"
    assert upgraded.content.startswith("Summary number")
    # From the same boundary, over the very messages the archive held (no summary before it).
    assert (upgraded.boundary_seq, upgraded.covered) == (archived.boundary_seq, archived.covered)
    folded = [tag for body in server.requests for tag in tags(new_messages(body))]
    assert folded == list(range(1, archived.boundary_seq + 1))
    assert jobs_of(db, session_id) == [("done", 1)]
    after = prepare_turn(memory, user_id, session_id)
    assert after.report.summary == SummaryState("llm", archived.covered, False, False)


@pytest.mark.slow
def test_when_every_model_fails_the_upgrade_keeps_the_archive(
    db: Database, server: FakeOpenAI, user_id: str, session_id: str
) -> None:
    memory = open_memory(db, server, summary_mode="background")
    fill_past(memory, user_id, session_id, 2 * memory.budget.history)
    prepare_turn(memory, user_id, session_id)
    archived = memory.summary(user_id=user_id, session_id=session_id)
    assert archived is not None and archived.kind == "raw"
    server.responder = lambda body: Status(500, "the model is down")

    memory.run_worker(until_idle=True)

    assert server.requests  # the upgrade was tried
    assert memory.summary(user_id=user_id, session_id=session_id) == archived
    assert jobs_of(db, session_id) == [("done", 1)]


@pytest.mark.slow
def test_in_a_fast_loop_with_no_worker_no_message_leaves_the_context_unsummarised(
    db: Database, server: FakeOpenAI, user_id: str, session_id: str
) -> None:
    """An agent loop faster than any background job, and no worker at all."""
    memory = open_memory(db, server, summary_mode="background")
    archives = 0

    for _ in range(120):
        context = prepare_turn(memory, user_id, session_id)

        summary = memory.summary(user_id=user_id, session_id=session_id)
        boundary = summary.boundary_seq if summary else 0
        assert not [d for d in context.report.dropped if d.layer in ("window", "recent")]
        window = context.messages[1:]
        if summary is not None:
            # The summary message comes first, and its archive ends at the boundary.
            assert context.report.summary is not None
            assert tags(window[0]["content"])[-1] == boundary
            window = window[1:]
        sent = [tag for message in window for tag in tags(message["content"])]
        # Everything after the boundary is in the request, up to the input just stored.
        input_seq = next_seq(memory, user_id, session_id) - 2
        assert sent == list(range(boundary + 1, input_seq + 1))
        archives += context.report.archived > 0

    assert archives >= 2  # the window outgrew the budget more than once
    assert server.requests == []  # and no request waited for a model
    assert [status for status, _ in jobs_of(db, session_id)] == ["pending"]


# --- SIGKILL -------------------------------------------------------------------------------


@pytest.fixture
def spawn(spawn: Spawn) -> Callable[..., Child]:
    """Start summary_child.py children through the shared ``spawn`` fixture."""
    return functools.partial(spawn, CHILD)


@pytest.mark.parametrize("moment", ["consolidate", "die-before-commit"])
@pytest.mark.slow
def test_a_consolidation_killed_midway_leaves_summary_and_messages_intact(
    db: Database,
    server: FakeOpenAI,
    spawn: Callable[..., Child],
    user_id: str,
    session_id: str,
    moment: str,
) -> None:
    memory = open_memory(db, server)
    fill_past_trigger(memory, user_id, session_id)
    server.script(Reply("Summary one: Lisbon in May."))
    assert memory.consolidate(user_id=user_id, session_id=session_id) is not None
    fill_past_trigger(memory, user_id, session_id)
    before = memory.summary(user_id=user_id, session_id=session_id)
    history = memory.history(user_id=user_id, session_id=session_id)
    assert before is not None

    arrived = threading.Event()
    if moment == "consolidate":
        # Killed while its summary request hangs at the server.
        server.responder = hang_and_signal(arrived.set)
        child = spawn(moment, db.url, server.base_url, user_id, session_id)
        assert arrived.wait(WAIT_S), "the child's summary request never arrived"
    else:
        # Killed after the model answered, with the new summary written but not committed.
        server.script(Reply("Summary from the child."))
        child = spawn(moment, db.url, server.base_url, user_id, session_id)
        child.expect("committing")
    assert child.kill() == -signal.SIGKILL
    server.release()

    with Database.open(db.url, pool_size=2) as reopened_database:
        reopened = open_memory(reopened_database, server)
        assert reopened.summary(user_id=user_id, session_id=session_id) == before
        assert reopened.history(user_id=user_id, session_id=session_id) == history

        server.responder = None
        server.script(Reply("Summary two: Lisbon in May, by train."))
        after = reopened.consolidate(user_id=user_id, session_id=session_id)

    assert after is not None
    assert (after.content, after.kind, after.version) == (
        "Summary two: Lisbon in May, by train.",
        "llm",
        before.version + 1,
    )
    folded = tags(new_messages(server.requests[-1]))
    assert folded == list(range(before.boundary_seq + 1, after.boundary_seq + 1))
    assert_covers_from_start(after)


@pytest.mark.slow
def test_a_job_held_by_a_killed_worker_is_taken_over_once_its_lease_expires(
    db: Database,
    server: FakeOpenAI,
    spawn: Callable[..., Child],
    user_id: str,
    session_id: str,
) -> None:
    memory = open_memory(db, server, summary_mode="background")
    fill_past_trigger(memory, user_id, session_id)
    prepare_turn(memory, user_id, session_id)
    arrived = threading.Event()
    server.responder = hang_and_signal(arrived.set)

    child = spawn("work", db.url, server.base_url, user_id, session_id)
    assert arrived.wait(WAIT_S), "the child worker's summary request never arrived"
    assert child.kill() == -signal.SIGKILL
    server.release()

    assert jobs_of(db, session_id) == [("running", 1)]
    memory.run_worker(until_idle=True)  # the lease still holds: nothing to take over
    assert jobs_of(db, session_id) == [("running", 1)]
    assert len(server.requests) == 1

    # Stand in for the lease running out (300 s) rather than wait for it.
    with db.transaction() as session:
        session.execute(
            text("UPDATE jobs SET lease_until = now() WHERE session_id = :s"), {"s": session_id}
        )
    server.responder = None
    server.script(Reply("Summary after the takeover."))
    memory.run_worker(until_idle=True)

    assert jobs_of(db, session_id) == [("done", 2)]
    summary = memory.summary(user_id=user_id, session_id=session_id)
    assert summary is not None
    assert (summary.content, summary.version) == ("Summary after the takeover.", 1)
    assert_covers_from_start(summary)
    assert len(memory.history(user_id=user_id, session_id=session_id)) > summary.boundary_seq

"""Tests of ``Memory`` shared by threads and processes: concurrent turns, SIGKILL, first open.

Children are ``facade_child.py`` processes spoken to over pipes; nothing waits on a clock.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from child_process import Child, Spawn
from facade_child import answer, batch, question, turn_problems, write_turns

from memory import Memory
from retrieval import MINILM_NAME, HashingEmbedder
from storage import Database, MessageStore

CHILD = Path(__file__).with_name("facade_child.py")
THREADS = [f"t{n}" for n in range(8)]
TURNS = 10


@pytest.fixture
def spawn(spawn: Spawn) -> Callable[..., Child]:
    """Start facade_child.py children, without this process's ``STRATAMEM_*`` variables and with
    extra environment variables given as keywords, through the shared ``spawn`` fixture."""
    base = {key: value for key, value in os.environ.items() if not key.startswith("STRATAMEM_")}

    def start(*args: str, **env: str) -> Child:
        return spawn(CHILD, *args, env={**base, **env})

    return start


def run_writers(mem: Memory, user_id: str, session_id: str, *, own_input: bool) -> list[str]:
    """Run one ``write_turns`` per thread, all started at once; return their problems."""
    start = threading.Barrier(len(THREADS))

    def write(writer: str) -> list[str]:
        start.wait()
        return write_turns(mem, user_id, session_id, writer, TURNS, own_input=own_input)

    with ThreadPoolExecutor(len(THREADS)) as pool:
        futures = [pool.submit(write, writer) for writer in THREADS]
        return [problem for future in futures for problem in future.result()]


@pytest.mark.slow
def test_eight_threads_writing_turns_to_one_session(
    database_url: str, user_id: str, session_id: str
) -> None:
    with Memory.open(database_url, embedder=HashingEmbedder(name=MINILM_NAME)) as mem:
        problems = run_writers(mem, user_id, session_id, own_input=True)
        history = mem.history(user_id=user_id, session_id=session_id)

    assert problems == []
    assert turn_problems(history, THREADS, TURNS) == []


@pytest.mark.slow
def test_eight_threads_on_a_small_window_with_inline_summaries(
    database_url: str, user_id: str, session_id: str
) -> None:
    # Every prepare past the trigger consolidates in the request: the threads race on the
    # summary's compare-and-set as well as on the session.
    with Memory.open(
        database_url,
        embedder=HashingEmbedder(name=MINILM_NAME),
        context_window=1_000,
        max_output=200,
        summary={"mode": "inline"},
    ) as mem:
        problems = run_writers(mem, user_id, session_id, own_input=False)
        history = mem.history(user_id=user_id, session_id=session_id)
        summary = mem.summary(user_id=user_id, session_id=session_id)

    assert problems == []
    assert turn_problems(history, THREADS, TURNS) == []
    assert summary is not None
    # Each folded message was counted exactly once, however the consolidations raced.
    assert 0 < summary.boundary_seq == summary.covered < len(history)


@pytest.mark.slow
def test_two_processes_writing_turns_to_one_session(
    spawn: Callable[..., Child],
    database: Database,
    database_url: str,
    user_id: str,
    session_id: str,
) -> None:
    writers = ["p1", "p2"]
    children = [spawn("turns", database_url, user_id, session_id, w, str(TURNS)) for w in writers]
    for child in children:
        assert child.read() == "ready"
    for child in children:
        child.tell("go")

    for child in children:
        assert child.read() == "done"
        assert child.finish() == 0

    history = MessageStore(database).history(user_id, session_id)
    assert turn_problems(history, writers, TURNS) == []


@pytest.mark.parametrize("stage", ["statement", "validate", "commit"])
@pytest.mark.slow
def test_a_record_killed_midway_stores_none_of_its_batch_and_keeps_the_rest(
    spawn: Callable[..., Child], database_url: str, user_id: str, session_id: str, stage: str
) -> None:
    size = 400
    child = spawn("die-in-record", database_url, user_id, session_id, stage, str(size))
    assert child.read() == "paused"

    child.kill()

    earlier = [m["id"] for i in range(3) for m in (question("earlier", i), answer("earlier", i))]
    batch_ids = [message["id"] for message in batch(size)]
    with Memory.open(database_url, embedder=HashingEmbedder(name=MINILM_NAME)) as mem:
        stored = [m.client_id for m in mem.history(user_id=user_id, session_id=session_id)]
        # All or nothing; killed before its commit, the batch left nothing.
        assert stored in (earlier, earlier + batch_ids)
        assert stored == earlier
        # The dead transaction's lock is gone: the same batch, retried, is stored whole.
        retried = mem.record(user_id=user_id, session_id=session_id, messages=batch(size))
        assert [m.seq for m in retried] == list(range(7, 7 + size))
        history = mem.history(user_id=user_id, session_id=session_id)
    assert [m.client_id for m in history] == earlier + batch_ids


@pytest.mark.slow
def test_two_processes_opening_memory_on_a_new_data_folder_at_once(
    fresh_data_dir: Path, spawn: Callable[..., Child], user_id: str, session_id: str
) -> None:
    writers = ["p1", "p2"]
    children = [
        spawn("open-embedded", user_id, session_id, w, STRATAMEM_DATA_DIR=str(fresh_data_dir))
        for w in writers
    ]
    for child in children:
        assert child.read() == "ready"
    for child in children:
        child.tell("go")
    for child in children:
        assert child.read() == "opened"

    for child in children:
        child.tell("read")

    # Both wrote to, and read from, the one server in the folder.
    assert [child.read() for child in children] == ["seen p1-q0,p2-q0"] * 2
    for child in children:
        assert child.finish() == 0

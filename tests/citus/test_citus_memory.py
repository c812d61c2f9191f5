"""stratamem on a Citus cluster: the same behaviour as on one server, every user on one shard.

Run against the cluster of ``conftest.py`` (built and started by ``scripts/citus``), or the
coordinator ``STRATAMEM_DATABASE_URL`` names.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest
from placements import WRITTEN, placements

from memory import Memory, Settings
from storage import Database, JobQueue, SessionErasedError

REPO = Path(__file__).resolve().parents[2]


def _settings(**changes: object) -> Settings:
    values: dict[str, object] = {
        "context_window": 1_200,
        "max_output": 100,
        "cards": {"embedder": "hashing", "debounce_seconds": 0},
        "summary": {"debounce_seconds": 0},
    }
    return Settings(**(values | changes))


def _user() -> str:
    return f"u-{uuid.uuid4()}"


def test_record_prepare_search_and_pins_keep_a_user_on_one_node(
    citus_database: Database,
) -> None:
    mem = Memory(citus_database, _settings())
    user = _user()
    for turn in range(4):
        mem.prepare(user_id=user, session_id="s1", input=f"My cat Miso is {turn + 2} years old.")
        mem.record(
            user_id=user,
            session_id="s1",
            messages=[{"role": "assistant", "content": f"Miso is {turn + 2}. " * 10}],
        )
    mem.run_worker(until_idle=True)
    pin = mem.pin(user_id=user, text="The user is allergic to peanuts.")
    context = mem.prepare(user_id=user, session_id="s2", input="How old is Miso?")
    found = mem.search(user_id=user, query="Miso the cat")
    mem.kept_reports(user_id=user, session_id="s2")

    assert [card.id for card in mem.pins(user_id=user)] == [pin.id]
    assert found and all(hit.card.user_id == user for hit in found)
    assert "peanuts" in str(context.messages)
    assert len(mem.history(user_id=user, session_id="s1")) == 8
    placed = placements(citus_database, user)
    assert set(placed) == set(WRITTEN)
    # Co-located: the user's rows of every table are on one node.
    assert len(set().union(*placed.values())) == 1, placed


def test_a_forget_in_another_process_erases_the_user_everywhere(
    citus_database: Database, citus_url: str
) -> None:
    mem = Memory(citus_database, _settings(summary={"mode": "inline"}))
    user = _user()
    context = mem.prepare(user_id=user, session_id="s1", input="Remember my locker code 4471.")
    mem.pin(user_id=user, text="Locker code is 4471.")
    environment = {k: v for k, v in os.environ.items() if not k.startswith("STRATAMEM_")}
    done = subprocess.run(
        [sys.executable, "-m", "memory.cli", "forget", "--user", user, "--yes"],
        capture_output=True,
        text=True,
        env=environment | {"STRATAMEM_DATABASE_URL": citus_url},
        cwd=REPO,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr

    # The reply to a context read before the erasure is refused, and nothing is left.
    with pytest.raises(SessionErasedError):
        mem.record(
            user_id=user,
            session_id="s1",
            messages=[{"role": "assistant", "content": "Noted."}],
            reply_to=context,
        )
    assert mem.pins(user_id=user) == []
    assert placements(citus_database, user) == {}


def test_the_worker_summarises_and_archives_each_session(citus_database: Database) -> None:
    mem = Memory(citus_database, _settings())
    users = [_user() for _ in range(3)]
    for user in users:
        for turn in range(8):
            mem.record(
                user_id=user,
                session_id="s1",
                messages=[
                    {"role": "user", "content": f"Turn {turn}: I like hiking in the Alps."},
                    {"role": "assistant", "content": f"Alps, turn {turn}. " * 15},
                ],
            )
    run = mem.run_worker(until_idle=True)

    assert run.failures == 0
    for user in users:
        assert mem.summary(user_id=user, session_id="s1") is not None
        assert mem.search(user_id=user, query="hiking in the Alps")


def test_concurrent_writers_of_one_session_and_many_users_lose_nothing(
    citus_database: Database,
) -> None:
    mem = Memory(citus_database, _settings(reports={"enabled": False}))
    shared = _user()
    others = [_user() for _ in range(4)]
    errors: list[BaseException] = []

    def write(user: str, writer: int) -> None:
        try:
            for turn in range(10):
                mem.record(
                    user_id=user,
                    session_id="s1",
                    messages=[{"role": "user", "content": f"writer {writer} turn {turn}"}],
                )
        except BaseException as error:  # reported below, with the test's assertion
            errors.append(error)

    threads = [threading.Thread(target=write, args=(shared, n)) for n in range(4)]
    threads += [threading.Thread(target=write, args=(user, 9)) for user in others]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    stored = mem.history(user_id=shared, session_id="s1")
    assert [m.seq for m in stored] == list(range(1, 41))
    assert sorted(m.payload["content"] for m in stored) == sorted(
        f"writer {w} turn {t}" for w in range(4) for t in range(10)
    )
    for user in others:
        assert len(mem.history(user_id=user, session_id="s1")) == 10


def test_concurrent_workers_claim_each_job_of_every_user_once(citus_database: Database) -> None:
    # The queue spans users: it stays on the coordinator, where SKIP LOCKED works as on one
    # server (storage.citus). A kind of this test's own keeps other tests' jobs out.
    queue = JobQueue(citus_database)
    kind = f"test-{uuid.uuid4().hex[:8]}"
    users = [_user() for _ in range(20)]
    for user in users:
        assert queue.enqueue(kind, user, "s1")
    claimed: list[list[str]] = [[], []]
    start = threading.Barrier(2)

    def claim_all(index: int) -> None:
        start.wait()
        while (job := queue.claim(f"worker-{index}", kinds=[kind])) is not None:
            claimed[index].append(job.user_id)
            assert queue.complete(job)

    threads = [threading.Thread(target=claim_all, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(claimed[0] + claimed[1]) == sorted(users)


def test_the_input_is_in_the_prompt_once_warm_and_cold(citus_database: Database) -> None:
    # Citus runs the input's statement in steps (its CTEs as subplans), each with a snapshot
    # of its own: a window read after the input was inserted saw it, and the prompt held the
    # input twice. The window's read leaves out what the same statement stored.
    user = _user()
    warm = Memory(citus_database, _settings(context_window=8_000, max_output=500))
    for turn in range(3):
        context = warm.prepare(user_id=user, session_id="s1", input=f"question {turn}")
        said = [m["content"] for m in context.messages if m["role"] == "user"]
        assert said == [f"question {t}" for t in range(turn + 1)]
        warm.record(
            user_id=user, session_id="s1", messages=[{"role": "assistant", "content": "ok"}]
        )
    cold = Memory(citus_database, _settings(context_window=8_000, max_output=500))
    context = cold.prepare(user_id=user, session_id="s1", input="question cold")
    said = [m["content"] for m in context.messages if m["role"] == "user"]
    assert said == ["question 0", "question 1", "question 2", "question cold"]
    stored = [m.payload["content"] for m in cold.history(user_id=user, session_id="s1")]
    assert stored.count("question cold") == 1

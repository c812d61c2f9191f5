"""The embedded database goes away under a running app or worker: its next use starts it again,
and nothing stored before is lost."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from databases import crash_embedded, postmaster

from memory import Memory
from storage.engine import stop_embedded

#: A bound for waits on things that happen within a few seconds; reached only when a test fails.
WAIT_S = 60.0


def wait_until(condition: Callable[[], bool], what: str) -> None:
    """Wait (on an event, not a clock assertion) until ``condition`` holds."""
    tick = threading.Event()
    for _ in range(int(WAIT_S / 0.05)):
        if condition():
            return
        tick.wait(0.05)
    raise AssertionError(f"timed out waiting until {what}")


def talk(mem: Memory, text: str) -> None:
    """One turn: the user's input, prepared, and the assistant's answer, recorded."""
    mem.prepare(user_id="u", session_id="s", input=text)
    mem.record(
        user_id="u", session_id="s", messages=[{"role": "assistant", "content": f"ok: {text}"}]
    )


def contents(mem: Memory) -> list[object]:
    return [m.payload["content"] for m in mem.history(user_id="u", session_id="s")]


@pytest.mark.parametrize("how", ["stop", "immediate", "kill"])
@pytest.mark.slow
def test_the_next_request_after_the_server_went_away_starts_it_and_keeps_every_message(
    fresh_data_dir: Path, how: str
) -> None:
    folder = (fresh_data_dir / "pg").resolve()
    with Memory.open(
        data_dir=fresh_data_dir, summary={"mode": "inline"}, cards={"enabled": False}
    ) as mem:
        for turn in range(3):
            talk(mem, f"question {turn}")

        if how == "stop":
            stop_embedded(folder)
        else:
            crash_embedded(folder, how)
        context = mem.prepare(user_id="u", session_id="s", input="after the restart")

        assert contents(mem) == [
            "question 0",
            "ok: question 0",
            "question 1",
            "ok: question 1",
            "question 2",
            "ok: question 2",
            "after the restart",
        ]
        assert context.messages[-1]["content"] == "after the restart"
        assert [m["content"] for m in context.messages[:2]] == ["question 0", "ok: question 0"]


@pytest.mark.parametrize("how", ["immediate", "kill"])
@pytest.mark.slow
def test_a_worker_thread_starts_the_server_again_and_runs_the_next_jobs(
    fresh_data_dir: Path, how: str
) -> None:
    folder = (fresh_data_dir / "pg").resolve()
    with Memory.open(
        data_dir=fresh_data_dir,
        context_window=2_000,
        max_output=200,
        summary={"mode": "background", "debounce_seconds": 0},
        cards={"enabled": False},
    ) as mem:
        run = mem.run_worker()
        said: list[str] = []

        def until_a_job_ran() -> bool:
            said.append(f"turn {len(said)}: " + "words " * 60)
            talk(mem, said[-1])
            return len(run.outcomes) > jobs_before

        jobs_before = 0
        wait_until(until_a_job_ran, "the worker folded a session")
        old = crash_embedded(folder, how)

        # Nothing but the worker uses the database now: its next poll starts the server.
        wait_until(lambda: postmaster(folder) is not None, "the worker started the server")
        assert postmaster(folder).pid != old  # type: ignore[union-attr]
        jobs_before = len(run.outcomes)
        wait_until(until_a_job_ran, "the worker folded the session again")

        assert run.failures == 0
        expected = [text for said_text in said for text in (said_text, f"ok: {said_text}")]
        assert contents(mem) == expected
        assert mem.summary(user_id="u", session_id="s") is not None

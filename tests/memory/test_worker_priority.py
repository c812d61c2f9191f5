"""The ``stratamem worker`` process runs at ``jobs.worker_niceness``, every thread of it, so a
worker embedding cards gives the cores to requests; nothing else is lowered.

Linux only (``/proc``, niceness per thread). What is lowered runs in a child process, never in
the test's own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from memory import Settings
from memory.jobs.worker import lower_process_priority
from storage import Database

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="/proc and per-thread niceness")

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 120.0


def thread_niceness(pid: int) -> dict[int, int]:
    """Each thread of process ``pid`` and its niceness (``/proc/<pid>/task/<tid>/stat``)."""
    found = {}
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{task}/stat").read_text()
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        # After the command's closing parenthesis: field 3 (state) onwards; nice is field 19.
        found[int(task)] = int(stat.rpartition(")")[2].split()[16])
    return found


def test_the_default_worker_niceness_is_ten() -> None:
    assert Settings().jobs.worker_niceness == 10


def test_every_thread_of_the_process_is_lowered_and_the_threads_started_after_too() -> None:
    code = textwrap.dedent(
        """
        import os, threading
        from memory.jobs.worker import lower_process_priority

        def nice():
            return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

        seen, started, go = {}, threading.Event(), threading.Event()
        def before():
            started.set(); go.wait(); seen["before"] = nice()
        thread = threading.Thread(target=before); thread.start(); started.wait()
        lower_process_priority(7)
        go.set(); thread.join()
        after = threading.Thread(target=lambda: seen.__setitem__("after", nice()))
        after.start(); after.join()
        print(nice(), seen["before"], seen["after"])
        """
    )
    parent = os.getpriority(os.PRIO_PROCESS, 0)
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
        timeout=DEADLINE_S,
    ).stdout

    assert [int(n) for n in out.split()] == [max(7, parent)] * 3


@pytest.fixture
def database(fresh_data_dir: Path) -> Iterator[Database]:
    """The embedded database the child worker shares (not the session's: no other jobs)."""
    with Database.open(None, data_dir=fresh_data_dir) as opened:
        yield opened


@pytest.mark.slow
@pytest.mark.parametrize("niceness", [0, 7])
def test_stratamem_worker_runs_every_thread_at_the_settings_niceness(
    database: Database, fresh_data_dir: Path, niceness: int
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STRATAMEM_", "OPENAI_"))}
    worker = subprocess.Popen(
        [sys.executable, "-m", "memory.cli", "worker"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
        env=env
        | {
            "PYTHONPATH": str(ROOT),
            "STRATAMEM_DATA_DIR": str(fresh_data_dir),
            "STRATAMEM_CARDS__ENABLED": "false",
            "STRATAMEM_JOBS__WORKER_NICENESS": str(niceness),
        },
    )
    try:
        assert worker.stdout is not None
        while "stratamem worker running" not in (line := worker.stdout.readline()):
            assert line, f"the worker exited ({worker.wait()}) before it ran"
        threads = thread_niceness(worker.pid)
    finally:
        worker.terminate()
        try:
            worker.wait(DEADLINE_S)
        except subprocess.TimeoutExpired:
            worker.kill()  # not left running beside the rest of the suite
            worker.wait()
            raise

    parent = os.getpriority(os.PRIO_PROCESS, 0)
    assert len(threads) >= 2  # the main thread and the worker's, at least
    assert set(threads.values()) == {max(niceness, parent)}
    assert os.getpriority(os.PRIO_PROCESS, 0) == parent  # this process is left alone


def test_where_lowering_is_refused_the_worker_says_so_and_runs_as_it_is(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def refused(which: int, who: int, niceness: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "setpriority", refused)
    before = os.getpriority(os.PRIO_PROCESS, 0)

    lower_process_priority(19)  # no exception: the worker goes on at its priority

    assert "could not lower its priority to niceness 19" in caplog.text
    assert os.getpriority(os.PRIO_PROCESS, 0) == before


def test_a_thread_that_ended_meanwhile_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    lowered: list[int] = []

    def gone_first(which: int, who: int, niceness: int) -> None:
        if who == 101:
            raise ProcessLookupError(3, "No such process")
        lowered.append(who)

    monkeypatch.setattr(os, "listdir", lambda path: ["101", "102", "103"])
    monkeypatch.setattr(os, "getpriority", lambda which, who: 0)
    monkeypatch.setattr(os, "setpriority", gone_first)

    lower_process_priority(5)

    assert lowered == [102, 103]  # the first thread was gone; every other one was lowered

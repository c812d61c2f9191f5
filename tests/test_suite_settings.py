"""How the suite itself runs: CI's hypothesis profile, the ``slow`` marker of the quick loop,
scripts/check's worker processes (pytest-xdist), and no job left queued from one module to the
next."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import hypothesis
import pytest
from databases import drop_pending_jobs, last_job_id, own_database
from sqlalchemy import text

from storage import Database, JobQueue

ROOT = Path(__file__).resolve().parents[1]


def test_ci_runs_property_tests_derandomized_and_without_a_deadline() -> None:
    ci = hypothesis.settings.get_profile("ci")
    assert ci.deadline is None
    assert ci.derandomize


def test_the_ci_profile_is_the_one_loaded_when_ci_is_set() -> None:
    # A process of its own: the profile is chosen once, when tests/conftest.py is imported.
    script = (
        "import hypothesis, pytest\n"
        "class Report:\n"
        "    def pytest_sessionfinish(self, session):\n"
        "        d = hypothesis.settings.default\n"
        "        print('PROFILE', d.deadline, d.derandomize)\n"
        "pytest.main(['-q', '--collect-only', '-p', 'no:cacheprovider', "
        "'tests/test_design_doc.py'], plugins=[Report()])\n"
    )
    env = {"PATH": "/usr/bin:/bin", "CI": "true"}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert "PROFILE None True" in done.stdout, done.stdout + done.stderr


def test_the_slow_marker_is_registered_and_documented() -> None:
    markers = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"][
        "pytest"
    ]["ini_options"]["markers"]
    assert any(marker.startswith("slow:") for marker in markers)
    assert 'pytest -m "not slow"' in (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_runs_shared_server_does_not_wait_for_the_disk(database: Database) -> None:
    with database.engine.connect() as connection:
        assert connection.execute(text("SHOW fsync")).scalar_one() == "off"
        # Commits still wait for their WAL to be written: only the disk flush is left out.
        assert connection.execute(text("SHOW synchronous_commit")).scalar_one() == "on"


# A plugin for a pytest run of its own: which worker each test was sent to and the user cache
# folder it ran with. With PROBE_ONLY_SEND set, the workers run nothing: no test's fixture
# (a Citus cluster) is started, only where each test was sent is said.
_PROBE = """
import os

import pytest


def _say(*fields):
    with open(os.environ["PROBE_FILE"], "a", encoding="utf-8") as said:
        said.write("|".join(fields) + "\\n")


class Probe:
    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item):
        if os.environ.get("PROBE_ONLY_SEND"):
            _say("sent", item.nodeid, os.environ["PYTEST_XDIST_WORKER"])
            return True
        return None

    def pytest_runtest_call(self, item):
        _say("ran", item.nodeid, os.environ["PYTEST_XDIST_WORKER"], os.environ["XDG_CACHE_HOME"])


def pytest_configure(config):
    config.pluginmanager.register(Probe())
"""


def probe_run(tmp_path: Path, *args: str, only_send: bool = False) -> list[list[str]]:
    """Run pytest with ``args`` in a process of its own; what the probe said, line by line."""
    (tmp_path / "suite_probe.py").write_text(_PROBE, encoding="utf-8")
    said = tmp_path / "said.txt"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path), "PROBE_FILE": str(said)}
    if only_send:
        env["PROBE_ONLY_SEND"] = "1"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "suite_probe", "-p", "no:cacheprovider",
         "--basetemp", str(tmp_path / "run"), *args],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [line.split("|") for line in said.read_text(encoding="utf-8").splitlines()]


def test_scripts_check_runs_the_tests_on_workers_a_module_to_a_worker() -> None:
    check = (ROOT / "scripts" / "check").read_text(encoding="utf-8")
    assert 'pytest -n "$workers" --dist loadfile --durations=15 "$@"' in check
    assert 'workers="${STRATAMEM_TEST_WORKERS:-' in check
    optional = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]
    assert any(requirement.startswith("pytest-xdist") for requirement in optional["dev"])


@pytest.mark.slow
def test_every_distributed_test_is_sent_to_one_worker(tmp_path: Path) -> None:
    # One worker starts the run's one cluster; each other module goes to a worker whole.
    said = probe_run(
        tmp_path, "-n", "2", "--dist", "loadfile", "tests/citus", "tests/test_design_doc.py",
        only_send=True,
    )  # fmt: skip
    sent = {test: worker for _, test, worker in said}
    distributed = {worker for test, worker in sent.items() if test.startswith("tests/citus/")}
    modules = {test.split("::")[0] for test in sent if test.startswith("tests/citus/")}
    assert len(modules) >= 4 and len(distributed) == 1
    assert len({worker for test, worker in sent.items() if "test_design_doc" in test}) == 1


@pytest.mark.slow
def test_the_workers_of_a_run_share_one_user_cache(tmp_path: Path) -> None:
    # MiniLM's ONNX export is built once per run, not once per worker.
    said = probe_run(tmp_path, "-n", "2", "--dist", "each", "tests/test_design_doc.py")
    ran = [line for line in said if line[0] == "ran"]
    assert {worker for _, _, worker, _ in ran} == {"gw0", "gw1"}
    assert {cache for _, _, _, cache in ran} == {str(tmp_path / "run" / "cache")}


def test_dropping_pending_jobs_leaves_those_a_worker_holds(database: Database) -> None:
    with own_database(database, "suite") as own:
        queue = JobQueue(own)
        assert queue.enqueue("kind-a", "u", "s1") and queue.enqueue("kind-a", "u", "s2")
        held = queue.claim("worker-1", kinds=["kind-a"])
        assert held is not None
        mark = last_job_id(own)
        assert queue.enqueue("kind-a", "u", "s3")

        assert drop_pending_jobs(own, after=mark) == 1  # s3 only: queued after the mark
        assert drop_pending_jobs(own) == 1  # then the one left before it
        assert queue.pending() == 0
        assert queue.complete(held)  # the worker's job is still there to finish


# Two modules of a run of their own, on the run's conftest: the first queues a job and leaves
# it; the second finds the queue empty.
_LEAVES = """
from storage import JobQueue


def test_queues_a_job_no_worker_runs(database):
    assert JobQueue(database).enqueue("left-behind", "u", "s")
"""
_FINDS = """
from storage import JobQueue


def test_finds_no_job_left(database):
    assert JobQueue(database).pending() == 0
"""


@pytest.mark.slow
def test_the_jobs_a_module_leaves_are_gone_when_the_next_one_starts(tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_a_leaves.py").write_text(_LEAVES, encoding="utf-8")
    (tests / "test_b_finds.py").write_text(_FINDS, encoding="utf-8")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), "--basetemp", str(tmp_path / "run"),
         str(tests / "test_a_leaves.py"), str(tests / "test_b_finds.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "2 passed" in done.stdout

"""Shared fixtures: one embedded Postgres per test run, started only when a test needs it."""

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hypothesis
import pytest
from child_process import Child, Spawn
from databases import drop_pending_jobs
from sqlalchemy import text

import storage.engine
from storage import Database

# CI (``CI`` set, as .ci/run does) runs the property tests derandomized and without a deadline:
# the same examples every run, and a loaded machine's slow example is not a failure. Locally
# they keep hypothesis's defaults (new examples each run); HYPOTHESIS_PROFILE picks either.
hypothesis.settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
hypothesis.settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "default")
)


#: Test folders whose tests pytest-xdist runs on one worker: a session fixture there starts
#: something once per worker process (tests/citus: a Citus cluster of three servers).
ONE_WORKER_FOLDERS = ("tests/citus/",)


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``--dist loadfile`` (as scripts/check runs the suite), send each test module to one
    worker, and every module of a folder of ``ONE_WORKER_FOLDERS`` to the same one.

    A module stays on one worker, so its module fixtures (databases and servers of its own)
    are made once. xdist's own ``loadgroup`` would do for the folders, but its groups do not
    reach the scheduler under pytest 9 (it renames ``item._nodeid``, which pytest 9 no longer
    reads), so the folder is matched by path here.
    """
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class ModuleScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            for folder in ONE_WORKER_FOLDERS:
                if nodeid.startswith(folder):
                    return folder
            return str(super()._split_scope(nodeid))

    return ModuleScheduling(config, log)


def stop_embedded(data_folder: Path) -> None:
    """Stop the embedded server in ``data_folder`` if it runs; a test that started one must."""
    storage.engine.stop_embedded(data_folder)


@pytest.fixture(scope="session", autouse=True)
def user_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The run's user cache folder (``XDG_CACHE_HOME``, child processes too): MiniLM's ONNX
    export is built at most once per run, and never into the tester's own cache.

    Under pytest-xdist the workers share one: the folder of the run above each worker's own
    (the export takes a file lock, so two workers asking at once build it once)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        folder = tmp_path_factory.getbasetemp().parent / "cache"
        folder.mkdir(exist_ok=True)
    else:
        folder = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(folder))
        yield folder


#: The run's shared database, once a test has asked for it.
_shared: list[Database] = []


@pytest.fixture(scope="session")
def database(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Database]:
    """An open, migrated embedded database shared by the whole test run (by each worker
    process's tests under pytest-xdist: every worker starts a server of its own)."""
    opened = Database.open(None, data_dir=tmp_path_factory.mktemp("stratamem"))
    _shared.append(opened)
    # The run's server is scratch: nothing on it must outlive a power cut, and on a shared disk
    # each commit's fsync took tens of milliseconds (half the wall time of the storage tests).
    # A crash of the server or of a client (the restart tests) still loses nothing: what was
    # written is in the kernel's cache. Servers a test starts of its own keep the defaults.
    with opened.engine.execution_options(isolation_level="AUTOCOMMIT").connect() as connection:
        connection.execute(text("ALTER SYSTEM SET fsync = off"))
        connection.execute(text("SELECT pg_reload_conf()"))
    yield opened
    _shared.remove(opened)
    opened.close()
    assert opened.data_folder is not None
    stop_embedded(opened.data_folder)


@pytest.fixture(scope="module", autouse=True)
def no_jobs_left_for_the_next_module() -> Iterator[None]:
    """When a test module ends, the jobs it left queued on the shared database are deleted.

    Most tests queue jobs that no worker runs (every recorded exchange queues its cards); a
    later module's ``run_worker(until_idle=True)`` on the same database would run them all
    (71 s for one test of tests/memory/test_facade.py in CI). Torn down after the module's
    own fixtures, so a worker of the module's own has stopped.
    """
    yield
    for shared in _shared:
        drop_pending_jobs(shared)


@pytest.fixture(scope="session")
def database_url(database: Database) -> str:
    """The URL of the shared database, for child processes."""
    return database.url


@pytest.fixture
def fresh_data_dir(tmp_path: Path) -> Iterator[Path]:
    """A data folder with no database yet; whatever server a test starts there is stopped."""
    data_dir = tmp_path / "data"
    yield data_dir
    if (data_dir / "pg").exists():
        stop_embedded((data_dir / "pg").resolve())


@pytest.fixture
def user_id() -> str:
    """A user id of its own, so tests sharing the database never see each other's rows."""
    return f"user-{uuid.uuid4()}"


@pytest.fixture
def session_id() -> str:
    """A fresh session id."""
    return f"session-{uuid.uuid4()}"


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    """Start child processes; any still alive when the test ends (it failed) is killed."""
    children: list[Child] = []

    def start(script: Path, *args: str, env: dict[str, str] | None = None) -> Child:
        children.append(Child(script, *args, env=env))
        return children[-1]

    yield start
    for child in children:
        if child.process.poll() is None:
            child.kill()

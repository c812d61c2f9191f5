"""Tests of storage shared by several processes: concurrent appends, SIGKILL, locks, first open."""

import functools
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from child_process import Child, Spawn
from filelock import FileLock, Timeout
from storage_samples import assert_complete_and_ordered, user

from storage import MIGRATIONS, Database, MessageStore
from storage.engine import embedded_lock_path

CHILD = Path(__file__).with_name("storage_child.py")


@pytest.fixture
def spawn(spawn: Spawn) -> Callable[..., Child]:
    """Start storage_child.py children through the shared ``spawn`` fixture."""
    return functools.partial(spawn, CHILD)


@pytest.mark.slow
def test_two_processes_appending_to_one_session(
    spawn: Callable[..., Child], database: Database, user_id: str, session_id: str
) -> None:
    assert database.data_folder is not None
    data_dir = str(database.data_folder.parent)
    per_writer = 30
    children = [
        spawn("append", data_dir, user_id, session_id, writer, str(per_writer))
        for writer in ("p1", "p2")
    ]
    for child in children:
        assert child.read() == "ready"
    for child in children:
        child.tell("go")
    for child in children:
        assert child.read() == "done"
        assert child.finish() == 0

    # Both children released the shared server on exit; it still serves this process.
    history = MessageStore(database).history(user_id, session_id)
    assert_complete_and_ordered(history, writers=2, per_writer=per_writer)


@pytest.mark.slow
def test_append_killed_before_commit_stores_all_or_nothing(
    spawn: Callable[..., Child], database_url: str, user_id: str, session_id: str
) -> None:
    child = spawn("die-before-commit", database_url, user_id, session_id, "500")
    assert child.read() == "committing"
    child.kill()

    with Database.open(database_url) as reopened:
        store = MessageStore(reopened)
        history = store.history(user_id, session_id)
        assert [m.client_id for m in history] == ["earlier-0", "earlier-1", "earlier-2"]
        # The dead transaction's lock on the session is gone: appending goes on from seq 4.
        [after] = store.append(user_id, session_id, [user("after the crash")])
        assert after.seq == 4


@pytest.mark.slow
def test_lock_file_left_by_a_killed_process_does_not_block_open(
    spawn: Callable[..., Child], fresh_data_dir: Path
) -> None:
    lock_path = embedded_lock_path(fresh_data_dir.resolve() / "pg")
    lock_path.parent.mkdir(parents=True)
    child = spawn("hold-lock", str(lock_path))
    assert child.read() == "locked"
    with pytest.raises(Timeout):
        FileLock(lock_path, timeout=0).acquire()

    child.kill()

    assert lock_path.exists()
    with Database.open(None, data_dir=fresh_data_dir) as database:
        assert MessageStore(database).history("u", f"s-{uuid.uuid4()}") == []


@pytest.mark.slow
def test_two_processes_opening_a_new_folder_at_once(
    spawn: Callable[..., Child], fresh_data_dir: Path
) -> None:
    children = [spawn("open", str(fresh_data_dir)) for _ in range(2)]
    for child in children:
        assert child.read() == "ready"
    for child in children:
        child.tell("go")

    answers = [child.read() for child in children]

    expected = "versions " + ",".join(str(m.version) for m in MIGRATIONS)
    assert answers == [expected, expected]
    for child in children:
        assert child.finish() == 0

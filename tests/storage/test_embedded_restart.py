"""An embedded server that goes away under open handles is started again by their next use.

Stopped, stopped with ``-m immediate`` or killed with SIGKILL: the next connection of a handle
opened on the data folder starts it again (once, whichever processes need it at the same
moment), and nothing stored before is lost. A handle opened by URL, or closed, never does.
"""

import functools
import threading
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from child_process import Child, Spawn
from databases import crash_embedded, postmaster
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from storage_samples import assert_complete_and_ordered, user, written

from storage import Database, DatabaseUnavailableError, MessageStore
from storage.engine import stop_embedded

CHILD = Path(__file__).with_name("storage_child.py")


@pytest.fixture
def spawn(spawn: Spawn) -> Callable[..., Child]:
    """Start storage_child.py children through the shared ``spawn`` fixture."""
    return functools.partial(spawn, CHILD)


def contents(database: Database, session_id: str = "s") -> list[object]:
    return [m.payload["content"] for m in MessageStore(database).history("u", session_id)]


def take_down(data_folder: Path, how: str) -> int:
    """Stop (as ``stop_embedded`` does), stop ``-m immediate`` or kill the server; its pid."""
    if how == "stop":
        running = postmaster(data_folder)
        assert running is not None
        stop_embedded(data_folder)
        return running.pid
    return crash_embedded(data_folder, how)


def servers_of(data_folder: Path) -> list[psutil.Process]:
    """The postmasters running in ``data_folder`` (postgres processes whose parent is none)."""
    resolved = data_folder.resolve()
    found = []
    for process in psutil.process_iter(["name"]):
        try:
            if process.info["name"] != "postgres" or Path(process.cwd()) != resolved:
                continue
            parent = process.parent()
            if parent is None or parent.name() != "postgres":
                found.append(process)
        except psutil.Error:
            continue
    return found


@pytest.mark.parametrize("how", ["stop", "immediate", "kill"])
@pytest.mark.slow
def test_the_next_use_of_a_handle_starts_the_server_again(fresh_data_dir: Path, how: str) -> None:
    with Database.open(None, data_dir=fresh_data_dir) as database:
        assert database.data_folder is not None
        MessageStore(database).append("u", "s", [user("before")])
        old = take_down(database.data_folder, how)

        MessageStore(database).append("u", "s", [user("after")])

        assert contents(database) == ["before", "after"]
        new = postmaster(database.data_folder)
        assert new is not None and new.pid != old
        assert [p.pid for p in servers_of(database.data_folder)] == [new.pid]


@pytest.mark.slow
def test_a_server_that_died_in_the_middle_of_a_statement_is_started_again(
    fresh_data_dir: Path,
) -> None:
    # A backend busy with a statement does not notice its postmaster's death until the
    # statement ends, and it holds the old server's shared memory: Postgres refuses to start
    # while it runs.
    with Database.open(None, data_dir=fresh_data_dir) as database:
        assert database.data_folder is not None
        MessageStore(database).append("u", "s", [user("before")])
        busy = threading.Thread(target=count_for_ever, args=(database,), daemon=True)
        busy.start()
        server = postmaster(database.data_folder)
        assert server is not None
        wait_for_a_busy_backend(database)
        orphans = server.children()
        server.kill()
        server.wait(30)

        MessageStore(database).append("u", "s", [user("after")])

        assert contents(database) == ["before", "after"]
        assert not any(orphan.is_running() for orphan in orphans)
        busy.join(30)
        assert not busy.is_alive()


def count_for_ever(database: Database) -> None:
    """Run a statement that would take hours; it ends when its server does (with an error)."""
    try:
        with database.engine.connect() as connection:
            connection.execute(text("SELECT count(*) FROM generate_series(1, 10000000000000)"))
    except DBAPIError:
        return  # the point: its server went away under it


def wait_for_a_busy_backend(database: Database) -> None:
    """Block until the statement of ``count_for_ever`` runs (asked of the server, no clock)."""
    query = text(
        "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
        "AND query LIKE 'SELECT count(*) FROM generate_series%'"
    )
    with database.engine.connect() as connection:
        while not connection.execute(query).scalar_one():
            connection.execute(text("SELECT pg_sleep(0.05)"))


@pytest.mark.slow
def test_processes_whose_server_died_start_one_server_and_lose_nothing(
    spawn: Callable[..., Child], fresh_data_dir: Path
) -> None:
    per_writer = 20
    with Database.open(None, data_dir=fresh_data_dir) as database:
        assert database.data_folder is not None
        children = [
            spawn("append", str(fresh_data_dir), "u", "s", writer, str(per_writer))
            for writer in ("p1", "p2")
        ]
        for child in children:
            assert child.read() == "ready"  # each has opened the database
        take_down(database.data_folder, "kill")

        for child in children:
            child.tell("go")  # both need the server at once
        store = MessageStore(database)
        for index in range(per_writer):
            store.append("u", "s", [written("parent", index)])
        for child in children:
            assert child.read() == "done"
            assert child.finish() == 0

        assert_complete_and_ordered(store.history("u", "s"), 3, per_writer)
        assert len(servers_of(database.data_folder)) == 1


@pytest.mark.slow
def test_a_handle_opened_by_url_does_not_start_the_server(fresh_data_dir: Path) -> None:
    with Database.open(None, data_dir=fresh_data_dir) as holder:
        assert holder.data_folder is not None
        with Database.open(holder.url) as by_url:
            MessageStore(by_url).append("u", "s", [user("before")])
            crash_embedded(holder.data_folder, "immediate")

            with pytest.raises(DatabaseUnavailableError):
                MessageStore(by_url).history("u", "s")

            assert postmaster(holder.data_folder) is None
            assert contents(holder) == ["before"]  # the holder starts it again
            assert contents(by_url) == ["before"]


@pytest.mark.slow
def test_a_closed_handle_does_not_start_the_server(fresh_data_dir: Path) -> None:
    with Database.open(None, data_dir=fresh_data_dir) as staying:
        assert staying.data_folder is not None
        closed = Database.open(None, data_dir=fresh_data_dir)
        closed.close()
        crash_embedded(staying.data_folder, "immediate")

        with pytest.raises(DatabaseUnavailableError):
            MessageStore(closed).history("u", "s")

        assert postmaster(staying.data_folder) is None


@pytest.mark.slow
def test_a_data_folder_that_is_gone_is_not_made_anew(fresh_data_dir: Path) -> None:
    database = Database.open(None, data_dir=fresh_data_dir)
    assert database.data_folder is not None
    MessageStore(database).append("u", "s", [user("before")])
    crash_embedded(database.data_folder, "immediate")
    moved = database.data_folder.rename(fresh_data_dir / "moved-away")

    try:
        with pytest.raises(DatabaseUnavailableError, match="is gone or not a database"):
            MessageStore(database).history("u", "s")
        assert not (database.data_folder / "PG_VERSION").exists()
    finally:
        moved.rename(database.data_folder)
        database.close()

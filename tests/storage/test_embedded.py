"""Tests of the embedded server: reachable by its owner only, and it survives stops and crashes.

Where the tests run as root, the server runs as the system account ``pgserver``, and the
"other local account" is ``nobody``, in a child process that drops to it.
"""

# Imported for the child of ``open_as_nobody``, which runs as ``nobody`` and may not be able to
# read this interpreter's standard library (it can live in root's home) to import them itself.
import ctypes.util  # noqa: F401
import email.parser  # noqa: F401
import functools
import json
import os
import pwd
import shutil
import signal
import stat
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from child_process import Child, Spawn
from sqlalchemy import text
from storage_samples import user

from storage import Database, DatabaseUnavailableError, MessageStore
from storage.embedded import programs as embedded_programs
from storage.engine import stop_embedded

CHILD = Path(__file__).with_name("storage_child.py")

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another account")


@pytest.fixture
def spawn(spawn: Spawn) -> Callable[..., Child]:
    """Start storage_child.py children through the shared ``spawn`` fixture."""
    return functools.partial(spawn, CHILD)


@pytest.fixture(params=["short", "long"])
def data_dir(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """A new data folder whose path is short, or about 120 characters long (too long for a
    socket address), inside a folder only its owner may enter."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    data_dir = private / "d"
    if request.param == "long":
        data_dir = private / ("x" * (119 - len(str(private / "pg"))))
        assert len(str(data_dir / "pg")) >= 119
    yield data_dir
    if (data_dir / "pg").exists():
        stop_embedded(data_dir / "pg")


def socket_folder(database: Database) -> str:
    return str(database.engine.url.query["host"])


def postmaster_pid(data_folder: Path) -> int:
    return int((data_folder / "postmaster.pid").read_text().split()[0])


def is_running(data_folder: Path) -> bool:
    pid_file = data_folder / "postmaster.pid"
    return pid_file.exists() and psutil.pid_exists(postmaster_pid(data_folder))


@as_root
@pytest.mark.slow
def test_another_account_cannot_connect(spawn: Callable[..., Child], data_dir: Path) -> None:
    with Database.open(None, data_dir=data_dir) as database:
        assert database.data_folder is not None
        hosts = [socket_folder(database), str(database.data_folder)]
        child = spawn("connect-as-nobody", *hosts)

        answers = [child.read() for _ in hosts]

        assert answers == [f"refused {host}" for host in hosts]
        assert child.finish() == 0
        # The owner still gets in, through the same socket.
        with database.engine.connect() as connection:
            assert connection.execute(text("SELECT 1")).scalar_one() == 1


@pytest.mark.slow
def test_the_socket_and_its_folder_are_private(data_dir: Path) -> None:
    with Database.open(None, data_dir=data_dir) as database:
        folder = Path(socket_folder(database))
        socket = folder / ".s.PGSQL.5432"

        for path in (folder, socket):
            mode = path.lstat().st_mode
            assert not mode & 0o077, f"{path} is {stat.filemode(mode)}"
        assert not stat.S_ISLNK(folder.lstat().st_mode)
        assert len(os.fsencode(socket)) < 104


@pytest.mark.slow
def test_opening_changes_no_permission_of_the_folders_above(data_dir: Path) -> None:
    above = [data_dir.parent, *data_dir.parent.parents]
    before = {path: path.stat().st_mode for path in above}

    with Database.open(None, data_dir=data_dir):
        during = {path: path.stat().st_mode for path in above}

    assert {path: path.stat().st_mode for path in above} == before == during


@as_root
@pytest.mark.slow
def test_a_socket_folder_of_another_account_is_refused(tmp_path: Path) -> None:
    # Too long a path for the socket to live in the data folder (over 107 bytes), and short
    # enough that the error, cut at MAX_MESSAGE_CHARS, still says why under a pytest-xdist
    # worker's longer tmp_path.
    data_dir = tmp_path / ("y" * 100)
    with Database.open(None, data_dir=data_dir) as database:
        squatted = Path(socket_folder(database))
    assert not squatted.exists()  # removed when the server stopped
    # Another account makes the folder where ours belongs, waiting for our next start.
    squatted.mkdir(mode=0o700)
    os.chown(squatted, pwd.getpwnam("nobody").pw_uid, -1)

    try:
        with pytest.raises(DatabaseUnavailableError, match="not a folder of the server's own"):
            Database.open(None, data_dir=data_dir)
    finally:
        shutil.rmtree(squatted)


@pytest.mark.slow
def test_reopening_after_the_server_was_stopped(fresh_data_dir: Path) -> None:
    with Database.open(None, data_dir=fresh_data_dir) as first:
        assert first.data_folder is not None
        MessageStore(first).append("u", "s", [user("before the stop")])
        os.kill(postmaster_pid(first.data_folder), signal.SIGINT)  # what pg_ctl stop does
        psutil.Process(postmaster_pid(first.data_folder)).wait(30)

        with Database.open(None, data_dir=fresh_data_dir) as second:
            history = MessageStore(second).history("u", "s")
            assert [m.payload["content"] for m in history] == ["before the stop"]
        # The first handle reconnects to the new server through the same socket.
        assert len(MessageStore(first).history("u", "s")) == 1


@pytest.mark.slow
def test_reopening_after_the_server_crashed(fresh_data_dir: Path) -> None:
    with Database.open(None, data_dir=fresh_data_dir) as first:
        assert first.data_folder is not None
        MessageStore(first).append("u", "s", [user("before the crash")])
        postmaster = psutil.Process(postmaster_pid(first.data_folder))
        children = postmaster.children()
        postmaster.kill()
        psutil.wait_procs([postmaster, *children], timeout=30)
        first.engine.dispose()

        with Database.open(None, data_dir=fresh_data_dir) as second:
            history = MessageStore(second).history("u", "s")
            assert [m.payload["content"] for m in history] == ["before the crash"]


@pytest.mark.parametrize("owner", ["another program", "another postgres server"])
@pytest.mark.slow
def test_a_stale_pid_file_naming_a_live_process_does_not_block_opening(
    fresh_data_dir: Path, database: Database, owner: str
) -> None:
    assert database.data_folder is not None
    live_pid = os.getpid() if owner == "another program" else postmaster_pid(database.data_folder)
    with Database.open(None, data_dir=fresh_data_dir) as database:
        assert database.data_folder is not None
        pid_file = database.data_folder / "postmaster.pid"
        left_behind = pid_file.read_text()
    assert not pid_file.exists()  # the last close stopped the server
    # As after a crash and a reboot: the pid in the file now belongs to another process.
    lines = left_behind.splitlines(keepends=True)
    pid_file.write_text("".join([f"{live_pid}\n", *lines[1:]]))

    with Database.open(None, data_dir=fresh_data_dir) as reopened:
        assert MessageStore(reopened).history("u", f"s-{uuid.uuid4()}") == []


@pytest.mark.slow
def test_the_last_close_stops_the_server_after_a_client_was_killed(
    spawn: Callable[..., Child], fresh_data_dir: Path
) -> None:
    child = spawn("open-and-wait", str(fresh_data_dir))
    assert child.read() == "open"
    child.kill()  # SIGKILL: its record of using the server stays behind
    data_folder = (fresh_data_dir / "pg").resolve()
    assert is_running(data_folder)

    first = Database.open(None, data_dir=fresh_data_dir)
    second = Database.open(None, data_dir=fresh_data_dir)
    first.close()
    assert is_running(data_folder)  # this process still has a handle
    second.close()

    assert not is_running(data_folder)


@pytest.mark.slow
def test_a_close_keeps_the_server_running_for_another_live_process(
    spawn: Callable[..., Child], fresh_data_dir: Path
) -> None:
    child = spawn("open-and-wait", str(fresh_data_dir))
    assert child.read() == "open"
    data_folder = (fresh_data_dir / "pg").resolve()

    Database.open(None, data_dir=fresh_data_dir).close()

    assert is_running(data_folder)
    child.kill()


@pytest.fixture(params=["short", "long"])
def nobody_dir(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A folder of the account ``nobody`` (0700) in /tmp, for a short or a ~120-character
    data path."""
    nobody = pwd.getpwnam("nobody")
    home = Path(tempfile.mkdtemp(prefix="stratamem-test-", dir="/tmp"))
    os.chown(home, nobody.pw_uid, nobody.pw_gid)
    data_dir = home / ("d" if request.param == "short" else "x" * (118 - len(str(home))))
    yield data_dir
    if (data_dir / "pg").exists():
        stop_embedded(data_dir / "pg")
    shutil.rmtree(home)


def open_as_nobody(data_dir: Path) -> dict[str, object]:
    """Open, use and close the embedded database in a forked child running as ``nobody``.

    A fork, not a new interpreter: the test's interpreter may live where ``nobody`` cannot
    run it. Returns what the child saw.
    """
    nobody = pwd.getpwnam("nobody")
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(reader)
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            seen = use_database(data_dir)
        except BaseException as error:
            seen = {"error": repr(error)}
        finally:
            os.write(writer, json.dumps(seen).encode())
            os._exit(0)
    os.close(writer)
    with os.fdopen(reader) as answer:
        said: dict[str, object] = json.loads(answer.read())
    os.waitpid(pid, 0)
    return said


def use_database(data_dir: Path) -> dict[str, object]:
    """Open the embedded database, connect, close; say who owns what."""
    with Database.open(None, data_dir=data_dir) as database:
        host = Path(socket_folder(database))
        with database.engine.connect() as connection:
            who = connection.execute(text("SELECT current_user")).scalar_one()
        seen: dict[str, object] = {
            "host": str(host),
            "who": who,
            "folder_owner": host.stat().st_uid,
            "folder_mode": stat.S_IMODE(host.stat().st_mode),
            "socket_mode": stat.S_IMODE((host / ".s.PGSQL.5432").stat().st_mode),
            "server_owner": psutil.Process(postmaster_pid(data_dir / "pg")).uids().real,
        }
    seen["stopped"] = not (data_dir / "pg" / "postmaster.pid").exists()
    return seen


@as_root
@pytest.mark.slow
def test_an_ordinary_account_runs_its_own_server(
    nobody_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uid = pwd.getpwnam("nobody").pw_uid
    # pgserver's own programs may be where only root can enter (a checkout in a 0700 folder);
    # ``nobody`` then runs them from root's copy, which every account can read.
    programs = embedded_programs.programs_folder(embedded_programs.server_account())
    monkeypatch.setattr(embedded_programs, "binaries_folder", lambda: programs)

    seen = open_as_nobody(nobody_dir)

    assert "error" not in seen, seen
    assert seen["who"] == "postgres"
    assert seen["server_owner"] == seen["folder_owner"] == uid
    assert seen["folder_mode"] == seen["socket_mode"] == 0o700
    in_data_folder = seen["host"] == str(nobody_dir / "pg")
    assert in_data_folder is (len(str(nobody_dir)) < 80)
    assert seen["stopped"] is True

"""As root, pgserver's programs run from a copy root owns and everyone may read, so stratamem
installed in a folder only root may enter (root's home, a ``mktemp -d`` folder) still starts
its server, with a data folder beneath such a folder too, and no folder's permissions change.
"""

import functools
import logging
import os
import pwd
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from child_process import Child, Spawn
from databases import postmaster
from sqlalchemy import text

from storage import Database, DatabaseUnavailableError
from storage.embedded import programs as embedded_programs
from storage.embedded.install import PROGRAM_FOLDERS, UnsafeFolderError, shared_copy

CHILD = Path(__file__).with_name("storage_child.py")

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0,
    reason="only root runs the server as another account (pgserver), which needs the copy",
)


@pytest.fixture
def spawn(spawn: Spawn) -> Callable[..., Child]:
    """Start storage_child.py children through the shared ``spawn`` fixture."""
    return functools.partial(spawn, CHILD)


def site_copy(mode: int) -> Iterator[Path]:
    """pgserver's program folders installed anew in a folder of ``mode`` in /tmp."""
    base = Path(tempfile.mkdtemp(prefix="stratamem-site-", dir="/tmp"))
    real = embedded_programs.binaries_folder().parents[2]
    for folder in PROGRAM_FOLDERS:
        if (real / folder).is_dir():
            shutil.copytree(real / folder, base / "site" / folder, symlinks=True)
    base.chmod(mode)
    yield base / "site"
    shutil.rmtree(base)


@pytest.fixture(scope="module")
def closed_site() -> Iterator[Path]:
    """pgserver installed in a folder only root may enter (0700, as ``mktemp -d`` makes)."""
    yield from site_copy(0o700)


@pytest.fixture(scope="module")
def open_site() -> Iterator[Path]:
    """pgserver installed where every account may read it."""
    yield from site_copy(0o755)


@pytest.fixture
def copies() -> Iterator[Path]:
    """A place for the copies of this test only (not yet made), in a folder of root's."""
    base = Path(tempfile.mkdtemp(prefix="stratamem-copies-", dir="/tmp"))
    base.chmod(0o755)
    yield base / "stratamem"
    shutil.rmtree(base)


def installed_in(monkeypatch: pytest.MonkeyPatch, site: Path, copies: Path) -> None:
    """Make stratamem find pgserver in ``site`` and keep its copies in ``copies``."""
    bin_folder = site / "pgserver" / "pginstall" / "bin"
    monkeypatch.setattr(embedded_programs, "binaries_folder", lambda: bin_folder)
    monkeypatch.setattr(embedded_programs, "SHARED_PROGRAMS_ROOT", copies)


def modes_up_to_root(path: Path) -> dict[Path, int]:
    return {folder: folder.stat().st_mode for folder in [path, *path.parents]}


@pytest.mark.slow
def test_installed_and_with_data_beneath_closed_folders_the_server_runs_from_the_copy(
    monkeypatch: pytest.MonkeyPatch, closed_site: Path, copies: Path, tmp_path: Path
) -> None:
    installed_in(monkeypatch, closed_site, copies)
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    data_dir = closed / "d"
    before = {**modes_up_to_root(closed_site), **modes_up_to_root(closed)}

    with Database.open(None, data_dir=data_dir) as database:
        assert database.data_folder is not None
        with database.engine.connect() as connection:
            assert connection.execute(text("SELECT 1")).scalar_one() == 1
        server = postmaster(database.data_folder)
        assert server is not None
        executable = Path(server.exe())

    assert copies in executable.parents
    assert {path: path.stat().st_mode for path in before} == before  # nothing opened up
    (copy,) = [path for path in copies.iterdir() if path.name.startswith("pgserver-")]
    for path in [copies, copy, *copy.rglob("*")]:
        found = path.lstat()
        assert found.st_uid == 0, path
        if not stat.S_ISLNK(found.st_mode):
            assert stat.S_IMODE(found.st_mode) in (0o755, 0o644), path
    assert stat.S_IMODE(executable.stat().st_mode) == 0o755


def test_the_copy_is_made_once_and_used_again(closed_site: Path, copies: Path) -> None:
    first = shared_copy(closed_site, "fingerprint", copies)
    made = first.stat().st_ino

    again = shared_copy(closed_site, "fingerprint", copies)

    assert again == first and again.stat().st_ino == made
    assert (again / "pgserver" / "pginstall" / "bin" / "postgres").is_file()
    assert sorted(path.name for path in copies.iterdir()) == [".copy.lock", "pgserver-fingerprint"]


def test_a_copy_cut_short_by_a_kill_is_made_again(closed_site: Path, copies: Path) -> None:
    copies.mkdir(mode=0o755)
    half = copies / ".pgserver-fingerprint.partial" / "pgserver" / "pginstall" / "bin"
    half.mkdir(parents=True)
    (half / "postgres").write_text("half a program")

    copy = shared_copy(closed_site, "fingerprint", copies)

    program = copy / "pgserver" / "pginstall" / "bin" / "postgres"
    assert program.read_bytes() == (closed_site / "pgserver/pginstall/bin/postgres").read_bytes()
    assert not (copies / ".pgserver-fingerprint.partial").exists()


@pytest.mark.slow
def test_processes_making_the_copy_at_once_make_one(
    spawn: Callable[..., Child], closed_site: Path, copies: Path
) -> None:
    children = [spawn("shared-copy", str(closed_site), "fingerprint", str(copies)) for _ in "ab"]
    for child in children:
        assert child.read() == "ready"

    for child in children:
        child.tell("go")
    made = {child.read() for child in children}

    assert made == {str(copies / "pgserver-fingerprint")}
    assert sorted(path.name for path in copies.iterdir()) == [".copy.lock", "pgserver-fingerprint"]
    assert all(child.finish() == 0 for child in children)


def nobody() -> tuple[int, int]:
    account = pwd.getpwnam("nobody")
    return account.pw_uid, account.pw_gid


def owned_by_nobody(copies: Path) -> None:
    copies.mkdir(mode=0o755)
    os.chown(copies, *nobody())


def writable_by_others(copies: Path) -> None:
    copies.mkdir(mode=0o755)
    copies.chmod(0o777)


def above_owned_by_nobody(copies: Path) -> None:
    os.chown(copies.parent, *nobody())


def copy_owned_by_nobody(copies: Path) -> None:
    (copies / "pgserver-fingerprint").mkdir(parents=True)
    os.chown(copies / "pgserver-fingerprint", *nobody())


def copy_is_a_symlink(copies: Path) -> None:
    copies.mkdir(mode=0o755)
    (copies / "elsewhere").mkdir(mode=0o755)
    (copies / "pgserver-fingerprint").symlink_to(copies / "elsewhere")


@pytest.mark.parametrize(
    "squat",
    [
        owned_by_nobody,
        writable_by_others,
        above_owned_by_nobody,
        copy_owned_by_nobody,
        copy_is_a_symlink,
    ],
)
def test_a_folder_of_the_copy_that_is_not_roots_alone_is_refused(
    closed_site: Path, copies: Path, squat: Callable[[Path], None]
) -> None:
    squat(copies)

    with pytest.raises(UnsafeFolderError):
        shared_copy(closed_site, "fingerprint", copies)


@pytest.mark.slow
def test_without_a_copy_the_programs_run_from_where_pgserver_put_them(
    monkeypatch: pytest.MonkeyPatch,
    open_site: Path,
    copies: Path,
    fresh_data_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    installed_in(monkeypatch, open_site, copies)
    owned_by_nobody(copies)

    with (
        caplog.at_level(logging.WARNING, logger="storage.embedded.programs"),
        Database.open(None, data_dir=fresh_data_dir) as database,
    ):
        assert database.data_folder is not None
        server = postmaster(database.data_folder)
        assert server is not None
        assert open_site in Path(server.exe()).parents

    assert any(
        "no copy for the 'pgserver' account" in record.getMessage() for record in caplog.records
    )


def test_with_neither_a_copy_nor_programs_it_can_reach_the_error_says_what_to_do(
    monkeypatch: pytest.MonkeyPatch, closed_site: Path, copies: Path, fresh_data_dir: Path
) -> None:
    installed_in(monkeypatch, closed_site, copies)
    owned_by_nobody(copies)

    with pytest.raises(DatabaseUnavailableError) as raised:
        Database.open(None, data_dir=fresh_data_dir)

    closed = closed_site.parent
    assert f"may not enter {closed} " in str(raised.value)
    assert f"chmod o+x {closed}," in str(raised.value)

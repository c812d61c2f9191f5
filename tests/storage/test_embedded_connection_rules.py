"""The embedded server's own configuration files lock it, not only the flags stratamem starts
it with: a server started by hand on its data folder refuses TCP and keeps its socket private.
"""

import os
import socket
import stat
from pathlib import Path

import psycopg
import pytest
from databases import postmaster
from sqlalchemy import text

from storage import Database
from storage.embedded.connection_rules import ACCESS_RULES, SERVER_SETTINGS, write_access_rules
from storage.embedded.programs import run_program, server_account

#: ``pg_hba.conf`` as ``initdb --auth=trust`` wrote it for older versions (comments left out).
TRUSTING_RULES = """\
local   all             all                                     trust
host    all             all             127.0.0.1/32            trust
host    all             all             ::1/128                 trust
local   replication     all                                     trust
host    replication     all             127.0.0.1/32            trust
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def start_by_hand(data_folder: Path, port: int) -> None:
    """``pg_ctl start -o "-p PORT -h 127.0.0.1"`` as the server's account, no other option."""
    options = f"-p {port} -h 127.0.0.1"
    run_program(server_account(), data_folder, "pg_ctl", "-w", "-l", "log", "-o", options, "start")


def connect_over_tcp(port: int) -> None:
    with psycopg.connect(
        host="127.0.0.1", port=port, user="postgres", dbname="postgres", connect_timeout=10
    ) as connection:
        connection.execute("SELECT 1")


def made_and_stopped(data_dir: Path) -> Path:
    """An initialised data folder whose server is stopped."""
    with Database.open(None, data_dir=data_dir) as database:
        assert database.data_folder is not None
        folder = database.data_folder
    assert postmaster(folder) is None
    return folder


def assert_locked_when_started_by_hand(folder: Path) -> None:
    port = free_port()
    start_by_hand(folder, port)

    with pytest.raises(psycopg.OperationalError, match=r"pg_hba\.conf rejects connection"):
        connect_over_tcp(port)
    # Its socket is in the data folder (0700), and the socket itself is 0700.
    found = (folder / f".s.PGSQL.{port}").lstat()
    assert stat.S_ISSOCK(found.st_mode)
    assert not found.st_mode & 0o077, stat.filemode(found.st_mode)
    # stratamem does not join a server started so: it stops it and starts its own.
    with Database.open(None, data_dir=folder.parent) as database:
        with database.engine.connect() as connection:
            assert connection.execute(text("SELECT 1")).scalar_one() == 1
        with pytest.raises(psycopg.OperationalError):
            connect_over_tcp(port)  # nothing listens there any more


@pytest.mark.slow
def test_a_server_started_by_hand_on_the_data_folder_refuses_tcp(fresh_data_dir: Path) -> None:
    assert_locked_when_started_by_hand(made_and_stopped(fresh_data_dir))


@pytest.mark.slow
def test_a_folder_made_by_an_older_version_is_locked_at_its_next_start(
    fresh_data_dir: Path,
) -> None:
    folder = made_and_stopped(fresh_data_dir)
    owner = (folder / "pg_hba.conf").stat()
    (folder / "pg_hba.conf").write_text(TRUSTING_RULES)  # in place: owner and mode kept
    conf = folder / "postgresql.conf"
    conf.write_text(conf.read_text().split("# --- stratamem")[0])

    made_and_stopped(fresh_data_dir)

    hba = (folder / "pg_hba.conf").stat()
    assert (folder / "pg_hba.conf").read_text() == ACCESS_RULES
    assert (hba.st_uid, hba.st_gid, stat.S_IMODE(hba.st_mode)) == (
        owner.st_uid,
        owner.st_gid,
        0o600,
    )
    expected = "".join(f"{name} = {value}\n" for name, value in SERVER_SETTINGS.items())
    assert conf.read_text().endswith(expected)
    assert_locked_when_started_by_hand(folder)


@pytest.mark.parametrize(
    "rules",
    [
        "local all all peer\n",
        "# only the socket\nlocal all postgres trust\nhost all all all reject\n",
    ],
)
def test_rules_that_admit_no_tcp_are_kept(tmp_path: Path, rules: str) -> None:
    (tmp_path / "pg_hba.conf").write_text(rules)
    (tmp_path / "postgresql.conf").write_text("shared_buffers = 128MB\n")

    write_access_rules(tmp_path, os.getuid(), os.getgid())
    write_access_rules(tmp_path, os.getuid(), os.getgid())  # twice: the block is not repeated

    assert (tmp_path / "pg_hba.conf").read_text() == rules
    conf = (tmp_path / "postgresql.conf").read_text()
    assert conf.startswith("shared_buffers = 128MB\n")
    assert conf.count("listen_addresses") == 1


@pytest.mark.parametrize(
    "rules",
    [
        "hostssl all all 0.0.0.0/0 scram-sha-256\n",
        "local all all trust\nhostnossl all all ::1/128 trust # a comment\n",
        "include_dir conf.d\n",
    ],
)
def test_rules_that_admit_tcp_are_replaced(tmp_path: Path, rules: str) -> None:
    (tmp_path / "pg_hba.conf").write_text(rules)
    (tmp_path / "postgresql.conf").write_text("")

    write_access_rules(tmp_path, os.getuid(), os.getgid())

    assert (tmp_path / "pg_hba.conf").read_text() == ACCESS_RULES

"""A child process for the multi-process storage tests; run as ``python storage_child.py MODE ...``.

Every mode talks to the parent over stdout lines (and reads ``go`` on stdin where it must start
at the same moment as a sibling), so the tests synchronise on pipes, never on sleeps.
"""

import os
import pwd
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import psycopg
from child_process import say, wait_for_go, wait_for_line
from filelock import FileLock
from sqlalchemy import event, text
from storage_samples import written

from storage import Database, MessageStore
from storage.embedded.install import shared_copy


def append(data_dir: str, user_id: str, session_id: str, writer: str, count: str) -> None:
    """Append ``count`` messages one by one to a session of the embedded database."""
    with Database.open(None, data_dir=Path(data_dir)) as database:
        store = MessageStore(database)
        wait_for_go()
        for index in range(int(count)):
            store.append(user_id, session_id, [written(writer, index)])
    say("done")


def die_before_commit(url: str, user_id: str, session_id: str, count: str) -> None:
    """Append a few messages, then a large batch that blocks just before its commit."""
    database = Database.open(url, pool_size=1)
    store = MessageStore(database)
    for index in range(3):
        store.append(user_id, session_id, [written("earlier", index)])

    def block(connection: object) -> None:
        # Every insert of the batch has been sent; the parent kills us here.
        say("committing")
        signal.pause()

    event.listen(database.engine, "commit", block)
    store.append(user_id, session_id, [written("batch", index) for index in range(int(count))])
    say("committed")  # never reached


def hold_lock(lock_path: str) -> None:
    """Take the lock file and keep it until killed."""
    with FileLock(lock_path):
        say("locked")
        signal.pause()


def open_database(data_dir: str) -> None:
    """Open (initialise, start, migrate) the embedded database together with a sibling."""
    wait_for_go()
    with Database.open(None, data_dir=Path(data_dir)) as database, database.engine.connect() as c:
        versions = c.execute(text("SELECT version FROM schema_migrations ORDER BY 1")).scalars()
        say("versions " + ",".join(str(v) for v in versions))
        # Stay open until the sibling has opened too, so both share the server at once.
        wait_for_line()


def connect_as_nobody(*hosts: str) -> None:
    """Become the account ``nobody``, then try to connect to each socket folder; say how it went."""
    account = pwd.getpwnam("nobody")
    os.setgroups([])
    os.setgid(account.pw_gid)
    os.setuid(account.pw_uid)
    for host in hosts:
        try:
            with psycopg.connect(host=host, user="postgres", dbname="postgres", connect_timeout=5):
                say(f"connected {host}")
        except psycopg.OperationalError:
            say(f"refused {host}")


def open_and_wait(data_dir: str) -> None:
    """Open the embedded database and keep it open until killed."""
    Database.open(None, data_dir=Path(data_dir))
    say("open")
    signal.pause()


def shared_copy_at_once(site: str, fingerprint: str, root: str) -> None:
    """Make (or find) the shared copy of pgserver's programs together with a sibling."""
    wait_for_go()
    say(str(shared_copy(Path(site), fingerprint, Path(root))))


MODES: dict[str, Callable[..., None]] = {
    "append": append,
    "die-before-commit": die_before_commit,
    "hold-lock": hold_lock,
    "open": open_database,
    "open-and-wait": open_and_wait,
    "connect-as-nobody": connect_as_nobody,
    "shared-copy": shared_copy_at_once,
}

if __name__ == "__main__":
    MODES[sys.argv[1]](*sys.argv[2:])

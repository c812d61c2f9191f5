"""The embedded Postgres: one private server per data folder, run from pgserver's binaries.

Who can reach it. The server listens on no TCP address, only on a Unix socket, and trusts
whoever connects there, so the socket is the lock:

- The socket lives in a folder only the server's account can enter (mode 0700): the data
  folder itself when the server runs as this process's account and the path is short enough
  for a socket address (about 100 bytes), else ``<tmp>/stratamem-<uid>-<hash of the data
  folder>``, made with ``mkdir`` (which never follows a symlink) and checked before every start
  (a real directory, owned by the server's account, no permission for group or others). A
  folder squatted by another account is refused.
- The socket itself is 0700 (``unix_socket_permissions``).
- Postgres refuses to run as root. Run as root, the server runs as the system account
  ``pgserver`` (the one pgserver itself uses, so existing data folders keep working). That
  account is given no way into the parents of the data folder: every command is started with
  the data folder as its working directory and ``-D /proc/self/cwd``, so no folder's
  permissions are ever changed (pgserver chmods every parent to 0755).
- The folder's own configuration files say the same (see
  ``storage.embedded.connection_rules``), so a server started by hand on it refuses TCP
  connections and keeps its socket private too.

When it runs. Every process that opens the folder is recorded (pid and start time) in a file
next to it; ``release`` removes the caller's record when its last handle closes, and the last
record removed stops the server. Records of dead processes (killed by SIGKILL) are pruned, so
they never keep the server running. Nothing is cached in memory: every ``acquire`` (and every
``restart``, which a handle calls when a connection fails) looks at ``postmaster.pid`` and the
process it names, and starts a server when there is none (it was stopped, it crashed, or the
pid in a stale file now belongs to an unrelated process). All of it under a file lock next to
the folder, so concurrent processes never start two servers.
"""

import atexit
import contextlib
import hashlib
import logging
import os
import shlex
import signal
import stat
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import psutil
from filelock import FileLock

from storage.embedded.clients import Clients
from storage.embedded.connection_rules import write_access_rules
from storage.embedded.programs import (
    START_TIMEOUT_SECONDS,
    Account,
    initdb,
    run_program,
    server_account,
)

__all__ = ["acquire", "lock_path", "release", "restart", "stop"]

logger = logging.getLogger(__name__)

_SOCKET_NAME = ".s.PGSQL.5432"
# sun_path is 108 bytes on Linux (104 on macOS), including the terminating NUL.
_MAX_SOCKET_PATH_BYTES = 103
_STOP_TIMEOUT_SECONDS = 60
# How long the backends of a server whose postmaster died may take to exit on their own (an
# idle one notices at once; one running a statement only when it ends) before they are ended.
_ORPHAN_GRACE_SECONDS = 5
# A pid no system hands out (Linux's pid_max is at most 2**22): writing it into a stale
# postmaster.pid makes Postgres treat the file as stale, while it still checks the old shared
# memory segment named in that file for orphaned backends before it starts.
_NO_SUCH_PID = 2**31 - 1

# This process's open handles per data folder. It is process-wide on purpose: the record next
# to the folder counts processes, so the handles of all threads of one process share one record.
_handles: dict[Path, int] = {}
_exit_hooks: set[Path] = set()
_handles_lock = threading.Lock()


@dataclass(frozen=True)
class _Postmaster:
    """What ``postmaster.pid`` says about the server of a data folder."""

    pid: int
    socket_dir: Path
    status: str


def lock_path(data_folder: Path) -> Path:
    """Return the lock file that serialises starting and stopping the server in ``data_folder``.

    Args:
        data_folder: The embedded server's data folder.

    Returns:
        A file next to the folder (inside it would race with its creation).
    """
    return data_folder.with_name(data_folder.name + ".lock")


def acquire(data_folder: Path, *, lock_timeout: float) -> Path:
    """Start the server in ``data_folder`` unless it runs, and count one more handle on it.

    Args:
        data_folder: The data folder (created and initialised when missing).
        lock_timeout: How long to wait for another process starting or stopping the server.

    Returns:
        The folder holding the server's socket, for the connection URL.

    Raises:
        filelock.Timeout: Another process held the lock longer than ``lock_timeout``.
        OSError, subprocess.SubprocessError, RuntimeError: The server could not be started.
    """
    data_folder.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with FileLock(lock_path(data_folder), timeout=lock_timeout):
        account = server_account()
        if not (data_folder / "PG_VERSION").exists():
            initdb(data_folder, account)
        socket_dir = _ensure_running(data_folder, account)
        with _handles_lock:
            _handles[data_folder] = _handles.get(data_folder, 0) + 1
            first = _handles[data_folder] == 1
        if first:
            Clients(data_folder).add(os.getpid())
            _release_at_exit(data_folder, lock_timeout)
    return socket_dir


def restart(data_folder: Path, *, lock_timeout: float) -> Path:
    """Start the server in ``data_folder`` again if it is not running (it was stopped or died).

    For a process that holds a handle (``acquire``) and could not connect: the handle count is
    unchanged. When the server runs, nothing is done. A data folder that is gone is not made
    anew (that would be an empty database in place of the lost one).

    Args:
        data_folder: A data folder this process acquired.
        lock_timeout: How long to wait for another process starting or stopping the server.

    Returns:
        The folder holding the server's socket.

    Raises:
        filelock.Timeout: Another process held the lock longer than ``lock_timeout``.
        OSError, subprocess.SubprocessError, RuntimeError: The server could not be started.
    """
    with FileLock(lock_path(data_folder), timeout=lock_timeout):
        if not (data_folder / "PG_VERSION").exists():
            raise RuntimeError(f"the data folder {data_folder} is gone or not a database")
        account = server_account()
        serving = _serving_socket(data_folder, account)
        if serving is not None:
            return serving  # another process restarted it while we waited for the lock
        logger.warning("the embedded database in %s was not running: starting it", data_folder)
        return _ensure_running(data_folder, account)


def release(data_folder: Path, *, lock_timeout: float) -> None:
    """Give back one handle; the last handle of the last process stops the server.

    Args:
        data_folder: A data folder this process acquired.
        lock_timeout: How long to wait for another process starting or stopping the server.
    """
    with FileLock(lock_path(data_folder), timeout=lock_timeout):
        with _handles_lock:
            count = _handles.get(data_folder, 0)
            if count == 0:
                return
            _handles[data_folder] = count - 1
            last = count == 1
        if last and Clients(data_folder).remove(os.getpid()) == 0:
            _stop_running(data_folder)


def _release_at_exit(data_folder: Path, lock_timeout: float) -> None:
    """Make sure a process that exits without closing every handle still gives them back."""
    with _handles_lock:
        if data_folder in _exit_hooks:
            return
        _exit_hooks.add(data_folder)
    atexit.register(_release_all, data_folder, lock_timeout)


def _release_all(data_folder: Path, lock_timeout: float) -> None:
    """Give back every handle this process still has on ``data_folder`` (at exit)."""
    with _handles_lock:
        remaining = _handles.get(data_folder, 0)
        if remaining:
            _handles[data_folder] = 1
    if remaining:
        release(data_folder, lock_timeout=lock_timeout)


def stop(data_folder: Path, *, lock_timeout: float) -> None:
    """Stop the server in ``data_folder`` now, whoever uses it (for tests and operators).

    Args:
        data_folder: The data folder.
        lock_timeout: How long to wait for another process starting or stopping the server.
    """
    with FileLock(lock_path(data_folder), timeout=lock_timeout):
        _stop_running(data_folder)


def _serving_socket(data_folder: Path, account: Account) -> Path | None:
    """The socket folder of the folder's server when it runs, ready and private; else None."""
    postmaster = _read_postmaster(data_folder)
    if postmaster is None or postmaster.status != "ready":
        return None
    if _is_our_server(data_folder, postmaster) and _is_private(postmaster.socket_dir, account):
        return postmaster.socket_dir
    return None


def _ensure_running(data_folder: Path, account: Account) -> Path:
    """Return the socket folder of the folder's server, starting a server when none runs."""
    postmaster = _read_postmaster(data_folder)
    if postmaster is not None and _is_our_server(data_folder, postmaster):
        if postmaster.status == "ready" and _is_private(postmaster.socket_dir, account):
            return postmaster.socket_dir
        # Starting or stopping (someone ran pg_ctl stop), or left listening on a socket
        # others can reach by an older version: stop it, then start it our way.
        _stop_process(postmaster.pid)
    elif postmaster is not None and psutil.pid_exists(postmaster.pid):
        _mark_stale(data_folder)
    _end_orphans(data_folder)
    # A folder made by an older version says trust for TCP: bring its files up to date.
    write_access_rules(data_folder, account.uid, account.gid)
    socket_dir = _socket_dir(data_folder, account)
    options = f"-h '' -k {shlex.quote(str(socket_dir))} -c unix_socket_permissions=0700"
    run_program(
        account,
        data_folder,
        "pg_ctl",
        "-w",
        "-t",
        str(START_TIMEOUT_SECONDS),
        "-l",
        "log",
        "-o",
        options,
        "start",
    )
    started = _read_postmaster(data_folder)
    if started is None or started.status != "ready":
        raise RuntimeError("the server did not report ready (see the log in the data folder)")
    return started.socket_dir


def _read_postmaster(data_folder: Path) -> _Postmaster | None:
    """Parse ``postmaster.pid``; None when there is none (no server was left running)."""
    try:
        lines = (data_folder / "postmaster.pid").read_text().splitlines()
    except FileNotFoundError:
        return None
    # Lines: pid, data folder, start time, port, socket folder, listen address, shared
    # memory key, status. A server still starting has written only the first ones.
    fields = [*lines, *[""] * 8][:8]
    try:
        pid = int(fields[0])
    except ValueError:
        return None  # not a file Postgres wrote; Postgres will say what is wrong with it
    return _Postmaster(pid, Path(fields[4].strip()), fields[7].strip())


def _is_our_server(data_folder: Path, postmaster: _Postmaster) -> bool:
    """Whether the process ``postmaster.pid`` names is that postmaster, not a reused pid."""
    # A postmaster works in its data folder (it changes into it at start), so a postgres
    # process there is this folder's server. The clock is no help: it may have been set since.
    try:
        process = psutil.Process(postmaster.pid)
        name, cwd = process.name(), process.cwd()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False
    return bool(name == "postgres" and Path(cwd) == data_folder.resolve())


def _end_orphans(data_folder: Path) -> None:
    """End the backends a dead postmaster left behind in ``data_folder``.

    They still hold its shared memory, and Postgres refuses to start while they do. Their
    sessions are lost anyway (a client sees its connection close and reconnects to the new
    server); what they committed is in the WAL the new server replays.
    """
    resolved = data_folder.resolve()
    orphans = []
    for process in psutil.process_iter(["name"]):
        with contextlib.suppress(psutil.Error):
            if process.info["name"] == "postgres" and Path(process.cwd()) == resolved:
                orphans.append(process)
    if not orphans:
        return
    for process in orphans:
        with contextlib.suppress(psutil.Error):
            process.send_signal(signal.SIGQUIT)  # what the postmaster sends at a crash
    _, alive = psutil.wait_procs(orphans, timeout=_ORPHAN_GRACE_SECONDS)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(alive, timeout=_STOP_TIMEOUT_SECONDS)


def _mark_stale(data_folder: Path) -> None:
    """Make Postgres see a ``postmaster.pid`` whose pid was reused as the stale file it is.

    Postgres refuses to start while the pid in the file is alive, whoever it is.
    """
    path = data_folder / "postmaster.pid"
    lines = path.read_text().splitlines(keepends=True)
    lines[0] = f"{_NO_SUCH_PID}\n"
    path.write_text("".join(lines))


def _stop_running(data_folder: Path) -> None:
    """Stop the folder's server if it runs."""
    postmaster = _read_postmaster(data_folder)
    if postmaster is not None and _is_our_server(data_folder, postmaster):
        _stop_process(postmaster.pid)
        if postmaster.socket_dir != data_folder:
            # The folder made for the socket (see ``_socket_dir``): empty once the server is
            # gone, and made again at the next start. Left alone if anything else is in it.
            with contextlib.suppress(OSError):
                postmaster.socket_dir.rmdir()


def _stop_process(pid: int) -> None:
    """Stop a postmaster (fast shutdown: sessions end, data is checkpointed) and wait."""
    try:
        process = psutil.Process(pid)
        # A signal, not pg_ctl: pg_ctl would need a path to the data folder (see ``run_program``).
        process.send_signal(signal.SIGINT)
        process.wait(timeout=_STOP_TIMEOUT_SECONDS)
    except psutil.NoSuchProcess:
        return
    except psutil.TimeoutExpired as error:
        raise RuntimeError(f"the server (pid {pid}) did not stop") from error


def _socket_dir(data_folder: Path, account: Account) -> Path:
    """Return a folder for the socket that only the server's account can enter.

    Raises:
        RuntimeError: The folder exists and belongs to another account, or is not a folder.
    """
    if account.name is None and _fits_a_socket(data_folder):
        return data_folder  # initdb made it 0700
    # Another account cannot reach the data folder by its path (see ``run_program``), and a long
    # path does not fit a socket address: a folder of the account's own in the temporary folder.
    name = hashlib.sha256(str(data_folder).encode()).hexdigest()[:16]
    base = Path(tempfile.gettempdir())
    if not _fits_a_socket(base / f"stratamem-{account.uid}-{name}"):
        base = Path("/tmp")
    folder = base / f"stratamem-{account.uid}-{name}"
    try:
        folder.mkdir(mode=0o700)
        if account.name is not None:
            os.chown(folder, account.uid, account.gid)
    except FileExistsError:
        pass
    found = folder.lstat()
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != account.uid:
        raise RuntimeError(f"{folder} is not a folder of the server's own; remove it")
    if found.st_mode & 0o077:
        folder.chmod(0o700)  # ours (checked above), only too open
    return folder


def _fits_a_socket(folder: Path) -> bool:
    """Whether the socket path in ``folder`` fits in a Unix socket address."""
    return len(os.fsencode(folder / _SOCKET_NAME)) <= _MAX_SOCKET_PATH_BYTES


def _is_private(socket_dir: Path, account: Account) -> bool:
    """Whether only the server's account can reach the socket in ``socket_dir``."""
    if not socket_dir.is_absolute():
        return False  # started by hand with the folder's own setting ('.'): not ours to join
    try:
        folder, socket = socket_dir.lstat(), (socket_dir / _SOCKET_NAME).lstat()
    except OSError:
        return False
    folder_closed = stat.S_ISDIR(folder.st_mode) and not folder.st_mode & 0o077
    socket_closed = stat.S_ISSOCK(socket.st_mode) and not socket.st_mode & 0o077
    owned = folder.st_uid == account.uid == socket.st_uid
    return folder_closed and socket_closed and owned

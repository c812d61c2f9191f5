"""The account the embedded server runs as and how its Postgres programs are run under it
(``initdb``, ``pg_ctl``), apart from ``storage.embedded.server`` because running a program as
another account, and explaining why it could not, is its own concern beside when the server runs.

As root the programs are run from a copy only root may change and everyone may read (see
``storage.embedded.install``); when that copy cannot be made they are run from where pgserver
installed them, with a warning.
"""

import functools
import hashlib
import importlib.metadata
import logging
import os
import pwd
import shlex
import stat
import subprocess
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

from storage.embedded.connection_rules import write_access_rules
from storage.embedded.install import PROGRAM_FOLDERS, content_fingerprint, shared_copy

__all__ = [
    "START_TIMEOUT_SECONDS",
    "Account",
    "binaries_folder",
    "initdb",
    "programs_folder",
    "run_program",
    "server_account",
]

logger = logging.getLogger(__name__)

_SERVER_ACCOUNT = "pgserver"
#: Where, as root, the copies of pgserver's programs live (see ``storage.embedded.install``).
SHARED_PROGRAMS_ROOT = Path("/var/cache/stratamem")
START_TIMEOUT_SECONDS = 60


@dataclass(frozen=True)
class Account:
    """The account the server runs as; ``name`` is None when it is this process's own."""

    uid: int
    gid: int
    name: str | None


def server_account() -> Account:
    """Return the account the server runs as: ours, or ``pgserver`` (created) when we are root."""
    if os.geteuid() != 0:
        return Account(os.geteuid(), os.getegid(), None)
    try:
        entry = pwd.getpwnam(_SERVER_ACCOUNT)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--user-group", "--no-create-home", _SERVER_ACCOUNT],
            check=True,
            capture_output=True,
        )
        entry = pwd.getpwnam(_SERVER_ACCOUNT)
    return Account(entry.pw_uid, entry.pw_gid, _SERVER_ACCOUNT)


def run_program(account: Account, data_folder: Path, program: str, *args: str) -> None:
    """Run a Postgres program on ``data_folder`` as the server's account.

    As another account the program starts inside the folder and names it ``/proc/self/cwd``:
    the kernel opens a working directory without checking the folders above it, so the
    account needs no permission on them.
    """
    binaries = programs_folder(account)
    other = account.name is not None
    pgdata = "/proc/self/cwd" if other else str(data_folder)
    with tempfile.TemporaryFile() as output:
        # A file, not a pipe: a server started by pg_ctl must not hold our pipe open.
        try:
            completed = subprocess.run(
                [str(binaries / program), "-D", pgdata, *args],
                cwd=data_folder,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                timeout=START_TIMEOUT_SECONDS + 30,
                user=account.uid if other else None,
                group=account.gid if other else None,
                extra_groups=[] if other else None,
                check=False,
            )
        except PermissionError as error:
            closed = _closed_folder(binaries, account) if other else None
            if closed is None:
                raise
            raise RuntimeError(
                f"as root the server runs as {account.name!r}, which may not enter {closed} "
                f"to run pgserver's programs: chmod o+x {shlex.quote(str(closed))}, or "
                "install stratamem where other accounts can read it (no copy of them could "
                f"be made in {SHARED_PROGRAMS_ROOT}: see the warning logged)"
            ) from error
        if completed.returncode != 0:
            output.seek(0)
            said = output.read().decode(errors="replace").strip().splitlines()
            reason = said[-1] if said else f"exit code {completed.returncode}"
            raise RuntimeError(f"{program} failed: {reason[:200]}")


def _closed_folder(path: Path, account: Account) -> Path | None:
    """Return the first folder on the way to ``path`` that ``account`` may not enter, if any.

    Only the mode bits are read (no ACLs): this explains a failure, it does not predict one.
    """
    for folder in [*reversed(path.parents), path]:
        found = folder.stat()
        if found.st_uid == account.uid:
            allowed = found.st_mode & stat.S_IXUSR
        elif found.st_gid == account.gid:
            allowed = found.st_mode & stat.S_IXGRP
        else:
            allowed = found.st_mode & stat.S_IXOTH
        if not allowed:
            return folder
    return None


def binaries_folder() -> Path:
    """The folder of pgserver's Postgres binaries."""
    # Imported here: pgserver is only needed for the embedded database, and importing it is
    # slow. Its platformdirs warning about XDG_RUNTIME_DIR is harmless.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
        from pgserver._commands import POSTGRES_BIN_PATH

    return Path(POSTGRES_BIN_PATH)


def programs_folder(account: Account) -> Path:
    """The folder of the Postgres programs to run as ``account``.

    pgserver's own for this process's account; for another account (we are root) a copy that
    account can reach whatever the permissions of the folders pgserver is installed in, or,
    when the copy cannot be made, pgserver's own (a warning says why).
    """
    installed = binaries_folder()
    if account.name is None:
        return installed
    site = installed.parents[2]  # bin -> pginstall -> pgserver -> site-packages
    try:
        copy = shared_copy(site, _pgserver_build(site), SHARED_PROGRAMS_ROOT)
    except OSError as error:
        logger.warning(
            "running pgserver's programs from %s: no copy for the %r account in %s: %s",
            installed,
            account.name,
            SHARED_PROGRAMS_ROOT,
            error,
        )
        return installed
    return copy / installed.relative_to(site)


@functools.cache
def _pgserver_build(site: Path) -> str:
    """pgserver's version and a hash of its programs: the hashes pip recorded, if it did."""
    distribution = importlib.metadata.distribution("pgserver")
    prefixes = tuple(f"{folder}/" for folder in PROGRAM_FOLDERS)
    recorded = sorted(
        f"{path} {path.hash.value}"
        for path in distribution.files or []
        if path.hash is not None and str(path).startswith(prefixes)
    )
    if recorded:
        content = hashlib.sha256("\n".join(recorded).encode()).hexdigest()[:16]
    else:
        content = content_fingerprint(site)
    return f"{distribution.version}-{content}"


def initdb(data_folder: Path, account: Account) -> None:
    """Create a new database cluster in ``data_folder`` (made 0700, owned by the account).

    Its configuration files refuse TCP connections and keep the socket private (see
    ``storage.embedded.connection_rules``), whoever starts the server later and how.
    """
    data_folder.mkdir(mode=0o700, exist_ok=True)
    if account.name is not None:
        os.chown(data_folder, account.uid, account.gid)
    run_program(
        account,
        data_folder,
        "initdb",
        "--auth-local=trust",
        "--auth-host=reject",
        "--encoding=utf8",
        "--username=postgres",
    )
    write_access_rules(data_folder, account.uid, account.gid, new=True)

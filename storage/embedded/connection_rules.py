"""Who may connect to an embedded server, written into its own configuration files.

The flags stratamem starts the server with (no TCP address, a private socket) bind only that
start. A server started by hand on the same data folder (``pg_ctl start -o "-h 127.0.0.1"``)
reads its configuration files instead, so they say the same: ``pg_hba.conf`` refuses every TCP
connection, whoever starts the server and on whatever address, and ``postgresql.conf`` listens
on no TCP address and keeps the socket (0700) in the data folder (itself 0700). The files are
written after ``initdb``, and a data folder made by an older stratamem (``trust`` for TCP) is
brought up to date before its next start.
"""

import contextlib
import os
from pathlib import Path

__all__ = ["ACCESS_RULES", "SERVER_SETTINGS", "write_access_rules"]

#: ``pg_hba.conf`` of an embedded server. The Unix socket is locked by its permissions (only
#: the server's account, and root, can open it), so whoever reaches it is trusted; TCP is
#: refused outright, so a server made to listen on an address by hand serves nobody there.
ACCESS_RULES = """\
# Written by stratamem. This server takes connections on its Unix socket only: the socket and
# its folder are open to the server's account alone (see the end of postgresql.conf), so that
# account (and root) is trusted there. Every TCP connection is refused, whatever address the
# server is started on.
# TYPE  DATABASE        USER            ADDRESS                 METHOD
local   all             all                                     trust
host    all             all             all                     reject
"""

#: Settings appended to ``postgresql.conf`` (the last occurrence of a setting wins there).
#: ``'.'`` is the data folder: a server started by hand puts its socket beside the data, not in
#: a shared folder such as ``/tmp``.
SERVER_SETTINGS = {
    "listen_addresses": "''",
    "unix_socket_directories": "'.'",
    "unix_socket_permissions": "0700",
}

_BLOCK_START = "# --- stratamem: who can connect (see pg_hba.conf); rewritten at every start ---"
_TCP_TYPES = frozenset({"host", "hostssl", "hostnossl", "hostgssenc", "hostnogssenc"})


def write_access_rules(data_folder: Path, uid: int, gid: int, *, new: bool = False) -> None:
    """Make the folder's configuration files refuse TCP and keep the socket private.

    ``pg_hba.conf`` is replaced by ``ACCESS_RULES`` in a new folder, and in an existing one when
    one of its rules lets a TCP connection in (rules that only say who may use the socket are
    left as they are); the settings block at the end of ``postgresql.conf`` is written when it
    is missing or says something else.

    Args:
        data_folder: An initialised data folder.
        uid: The server's account, which keeps owning the files.
        gid: The server account's group.
        new: Whether ``initdb`` has just made the folder.
    """
    hba = data_folder / "pg_hba.conf"
    if new or _admits_tcp(hba.read_text()):
        _replace(hba, ACCESS_RULES, uid, gid)
    conf = data_folder / "postgresql.conf"
    current = conf.read_text()
    kept = current.split(_BLOCK_START, 1)[0]
    settings = "".join(f"{name} = {value}\n" for name, value in SERVER_SETTINGS.items())
    wanted = f"{kept.rstrip()}\n\n{_BLOCK_START}\n{settings}"
    if wanted != current:
        _replace(conf, wanted, uid, gid)


def _admits_tcp(rules: str) -> bool:
    """Whether a rule of ``pg_hba.conf`` lets a TCP connection in (any method but reject)."""
    for line in rules.splitlines():
        fields = line.split("#", 1)[0].split()
        if fields and fields[0] in _TCP_TYPES and fields[-1] != "reject":
            return True
        if fields and fields[0].startswith("include"):
            return True  # rules from another file: ours replace them
    return False


def _replace(path: Path, text: str, uid: int, gid: int) -> None:
    """Write ``path`` anew (aside, then renamed: a crash leaves the old file or the new one)."""
    partial = path.with_name(path.name + ".stratamem-partial")
    # The folder belongs to the server's account: as root, never follow what it may have put
    # at this name (a symlink would make root write elsewhere).
    with contextlib.suppress(FileNotFoundError):
        partial.unlink()
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "w") as file:
        os.fchown(descriptor, uid, gid)
        file.write(text)
    partial.replace(path)

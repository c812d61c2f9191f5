"""A copy of pgserver's Postgres programs that the server's account can run, for root.

Run as root, the server runs as the account ``pgserver``, which must be able to run
``initdb``, ``pg_ctl`` and ``postgres`` and read their libraries and ``share`` files. pip puts
them inside the Python environment, which is often in a folder only root may enter (root's
home in many container images, a ``mktemp -d`` folder). So as root they are run from a copy in
``/var/cache/stratamem/pgserver-<version>-<hash>``, made once per pgserver build:

- It is written aside under a file lock and renamed into place, so concurrent first uses make
  one copy and no process ever sees half of one.
- It is owned by root and readable by everyone, writable by root only (modes are set, not left
  to the umask). The folder it lives in and every folder above must be owned by root and not
  writable by others (a sticky folder such as ``/tmp`` may be writable), and open to every
  account: a folder there that another account owns or may write is refused, never used.
- The copy keeps the layout below site-packages (``pgserver/pginstall/{bin,lib,share}`` and
  ``pgserver.libs``), which the programs find their libraries and data files by.
"""

import contextlib
import hashlib
import os
import shutil
import stat
from pathlib import Path

from filelock import FileLock

__all__ = ["PROGRAM_FOLDERS", "UnsafeFolderError", "content_fingerprint", "shared_copy"]

#: What is copied, relative to the site-packages folder pgserver is installed in: the programs,
#: their libraries (``pgserver.libs`` holds the libpq that ``initdb`` loads through
#: ``$ORIGIN/../../../pgserver.libs``) and the data files ``initdb`` and ``postgres`` read.
PROGRAM_FOLDERS = (
    "pgserver/pginstall/bin",
    "pgserver/pginstall/lib",
    "pgserver/pginstall/share",
    "pgserver.libs",
)
# Copying about 25 MB takes well under a second; a lock held far longer is a stuck process.
_LOCK_TIMEOUT_SECONDS = 300.0


class UnsafeFolderError(OSError):
    """A folder of the shared copy is owned or writable by an account other than root."""


def shared_copy(site: Path, fingerprint: str, root: Path) -> Path:
    """Return a root-owned, world-readable copy of pgserver's programs, made on first use.

    Args:
        site: The site-packages folder pgserver is installed in (holding ``PROGRAM_FOLDERS``).
        fingerprint: The pgserver build's version and content hash: the copy's name.
        root: The folder the copies live in (``/var/cache/stratamem``; made, mode 0755, when
            missing).

    Returns:
        The copy: the folder that holds ``pgserver/pginstall/bin``.

    Raises:
        UnsafeFolderError: ``root``, a folder above it or the copy is not root's alone.
        OSError: The copy could not be made (a read-only file system, a full disk, a lock
            held too long).
    """
    root.mkdir(mode=0o755, parents=True, exist_ok=True)
    _check_safe_path(root)
    copy = root / f"pgserver-{fingerprint}"
    if not copy.exists():
        with FileLock(root / ".copy.lock", timeout=_LOCK_TIMEOUT_SECONDS):
            if not copy.exists():  # another process may have made it while we waited
                _make_copy(site, copy)
    _check_owned_by_root(copy)
    return copy


def content_fingerprint(site: Path) -> str:
    """Hash the contents of ``PROGRAM_FOLDERS`` (for a pgserver installed without a RECORD)."""
    digest = hashlib.sha256()
    for folder in PROGRAM_FOLDERS:
        for path in sorted((site / folder).rglob("*")):
            digest.update(str(path.relative_to(site)).encode() + b"\0")
            if path.is_symlink():
                digest.update(os.readlink(path).encode() + b"\0")
            elif path.is_file():
                digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _make_copy(site: Path, copy: Path) -> None:
    """Copy the program folders into ``copy``: aside, made root's and readable, then renamed."""
    partial = copy.with_name(f".{copy.name}.partial")
    if partial.exists() or partial.is_symlink():
        shutil.rmtree(partial)  # left by a process killed while copying
    for folder in PROGRAM_FOLDERS:
        if (site / folder).is_dir():  # pgserver.libs exists only in wheels that need it
            shutil.copytree(site / folder, partial / folder, symlinks=True)
    for path in [partial, *partial.rglob("*")]:
        os.lchown(path, 0, 0)
        if path.is_symlink():
            continue
        found = path.stat().st_mode
        executable = stat.S_ISDIR(found) or found & stat.S_IXUSR
        path.chmod(0o755 if executable else 0o644)
    try:
        partial.rename(copy)
    except OSError:
        with contextlib.suppress(OSError):
            shutil.rmtree(partial)
        raise


def _check_safe_path(folder: Path) -> None:
    """Refuse ``folder`` unless it and every folder above are root's (see the module doc)."""
    resolved = folder.resolve()
    _check_owned_by_root(resolved)
    for parent in resolved.parents:
        found = parent.lstat()
        sticky = bool(found.st_mode & stat.S_ISVTX)
        if found.st_uid != 0 or (found.st_mode & 0o022 and not sticky):
            raise UnsafeFolderError(
                f"{parent} is owned or writable by an account other than root: "
                f"not keeping pgserver's programs below it"
            )
    for path in [*reversed(resolved.parents), resolved]:
        if not path.stat().st_mode & stat.S_IXOTH:
            raise PermissionError(f"other accounts may not enter {path}: no use for a copy there")


def _check_owned_by_root(folder: Path) -> None:
    """Refuse a folder that is not a real folder, owned by root and writable by root only."""
    found = folder.lstat()
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != 0 or found.st_mode & 0o022:
        raise UnsafeFolderError(
            f"{folder} is not a folder owned and writable by root only "
            f"({stat.filemode(found.st_mode)}, uid {found.st_uid}): remove it"
        )

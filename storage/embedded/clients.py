"""The processes using the embedded server of a data folder, recorded in a file next to it (pid
and start time, dead ones pruned): a small file format of its own, apart from
``storage.embedded.server``, which only adds, removes and counts."""

import json
from pathlib import Path

import psutil

__all__ = ["Clients"]

# See ``_alive``.
_START_TIME_SLACK_SECONDS = 2.0


class Clients:
    """The processes using the server of a data folder, recorded in a file next to it.

    Each record is a pid and the process's start time, so a pid reused by another process
    does not count. Callers hold the folder's lock.
    """

    def __init__(self, data_folder: Path) -> None:
        self._path = data_folder.with_name(data_folder.name + ".clients.json")

    def add(self, pid: int) -> None:
        """Record a process (pruning the records of dead ones)."""
        records = [r for r in self._live() if r[0] != pid]
        self._write([*records, (pid, psutil.Process(pid).create_time())])

    def remove(self, pid: int) -> int:
        """Drop a process's record (pruning dead ones); return how many processes remain."""
        records = [r for r in self._live() if r[0] != pid]
        self._write(records)
        return len(records)

    def _live(self) -> list[tuple[int, float]]:
        try:
            records = json.loads(self._path.read_text())
        except (FileNotFoundError, ValueError):
            return []
        return [(int(pid), float(created)) for pid, created in records if _alive(pid, created)]

    def _write(self, records: list[tuple[int, float]]) -> None:
        # Written aside and renamed: a process killed mid-write never leaves half a file.
        partial = self._path.with_name(self._path.name + ".partial")
        partial.write_text(json.dumps(records))
        partial.replace(self._path)


def _alive(pid: int, created: float) -> bool:
    """Whether the process recorded as (pid, start time) still runs."""
    try:
        now_created = float(psutil.Process(pid).create_time())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False
    # Start times are derived from the boot time, which moves when the clock is set: allow a
    # little. A pid reused within seconds of the recorded start is what this lets through.
    return abs(now_created - created) <= _START_TIME_SLACK_SECONDS

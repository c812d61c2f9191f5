"""How busy the machine was while a benchmark ran: load average and CPU steal.

This machine is a virtual one: when the host runs other guests, it takes the CPU away from
this one (Linux counts that time as ``steal``), and every latency measured meanwhile grows
(the same search, unchanged, measured 6 ms and 11 ms an hour apart; a ``prepare`` 26 and 59 ms
with 100% steal seen in ``top``). The load average does not show it. Benchmarks print both, so
a number can be told from the machine it was measured on.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CpuSteal", "machine_state"]

_STAT = Path("/proc/stat")


class CpuSteal:
    """The share of CPU time stolen by the host since this object was made (Linux only)."""

    def __init__(self) -> None:
        self._start = _cpu_times()

    def share(self) -> float | None:
        """Stolen time / all time since the start, or None where ``/proc/stat`` is missing."""
        now = _cpu_times()
        if self._start is None or now is None:
            return None
        total = sum(now) - sum(self._start)
        stolen = now[7] - self._start[7] if len(now) > 7 else 0
        return stolen / total if total > 0 else 0.0


def machine_state(steal: CpuSteal | None = None) -> str:
    """``load average L`` and, with a ``CpuSteal``, ``, CPU steal S%`` since it started."""
    text = f"load average {os.getloadavg()[0]:.1f}"
    share = steal.share() if steal is not None else None
    return text if share is None else f"{text}, CPU steal {100 * share:.1f}%"


def _cpu_times() -> list[int] | None:
    """The first line of ``/proc/stat``: user, nice, system, idle, iowait, irq, softirq,
    steal, ... in clock ticks."""
    try:
        first = _STAT.read_text().splitlines()[0].split()
    except OSError:
        return None
    return [int(value) for value in first[1:]]

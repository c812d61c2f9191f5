"""The CPU one warm ``prepare`` with recall costs, by thread and in Postgres, against an older tree.

    python -m benchmarks.prepare_cpu --against FOLDER [--prepares 150] [--data-dir DIR]

A ``prepare`` runs on several threads (the query embedding and ONNX Runtime's own, the recall's
read-ahead, the vector ranking, the report writer) and in Postgres; on a machine of two cores
their sum, not one thread's, decides how many requests fit. On ``benchmarks.prepare``'s user (run
that first: its ``--data-dir`` holds 10,000+ cards), a new session of 100 messages gets ten warm
turns, then ``--prepares`` prepares per tree of a new input each (no ``record``: what is timed is
``prepare`` alone). ``--against FOLDER`` (``git archive COMMIT | tar -x -C FOLDER``) imports that
tree's packages as a second copy (``benchmarks.prepare_phases``) and the two alternate prepare by
prepare, so both see the same machine. A prepare's CPU is every thread's (``/proc``, named by
``threading``) and the embedded server's, from its start to the next one's, after a pause in
which the report writer and the read-ahead finish. The clock tick is 10 ms: the averages need a
hundred prepares or more.

Run from the repository root.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

from benchmarks.machine import CpuSteal, machine_state
from benchmarks.prepare import SYSTEM, USER
from benchmarks.prepare_phases import SETTINGS, open_variants
from benchmarks.scripted_turns import turn_messages
from memory import Memory

_TICK_MS = 1e3 / os.sysconf("SC_CLK_TCK")
# After each prepare: the report writer and the read-ahead threads finish their work.
_PAUSE_S = 0.03


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/stratamem-bench-prepare"))
    parser.add_argument("--prepares", type=int, default=150)
    parser.add_argument("--against", type=Path, help="an older tree, alternated call by call")
    args = parser.parse_args()
    if not (args.data_dir / "pg").is_dir():
        sys.exit(f"no benchmark user in {args.data_dir}: run python -m benchmarks.prepare first")
    with Memory.open(data_dir=args.data_dir, **SETTINGS) as memory:
        variants, sessions = open_variants(memory, args.against)
        for turn in range(10):
            user, *rest = turn_messages(10_000 + turn)
            for name, variant in variants.items():
                session = sessions[name]
                variant.prepare(
                    user_id=USER, session_id=session, input=str(user["content"]), system=SYSTEM
                )
                variant.record(user_id=USER, session_id=session, messages=rest)
        server = args.data_dir / "pg" / "postmaster.pid"
        print(f"start: {machine_state()}", flush=True)
        steal = CpuSteal()
        spent: dict[str, defaultdict[str, float]] = {name: defaultdict(float) for name in variants}
        walls: dict[str, list[float]] = {name: [] for name in variants}
        for turn in range(args.prepares):
            text = str(turn_messages(20_000 + turn)[0]["content"])
            for name in list(variants) if turn % 2 == 0 else list(variants)[::-1]:
                threads, postgres = _threads(), _server(server)
                started = time.perf_counter()
                variants[name].prepare(
                    user_id=USER, session_id=sessions[name], input=text, system=SYSTEM
                )
                walls[name].append((time.perf_counter() - started) * 1e3)
                time.sleep(_PAUSE_S)
                for thread, (label, cpu) in _threads().items():
                    spent[name][label] += cpu - threads.get(thread, (label, 0.0))[1]
                spent[name]["Postgres"] += _server(server) - postgres
        print(f"end: {machine_state(steal)}")
        _print(spent, walls, args.prepares)


def _threads() -> dict[int, tuple[str, float]]:
    """This process's threads: id -> (label, CPU ms so far); a thread without a Python name is
    ONNX Runtime's, and a pool's threads share one label."""
    named = {thread.native_id: thread.name for thread in threading.enumerate()}
    found: dict[int, tuple[str, float]] = {}
    for task in Path("/proc/self/task").iterdir():
        cpu = _cpu_ms(task / "stat")
        if cpu is not None:
            name = named.get(int(task.name), "ONNX Runtime's own")
            found[int(task.name)] = (name.rstrip("_0123456789") or name, cpu)
    return found


def _server(pid_file: Path) -> float:
    """CPU ms so far of the embedded server: the postmaster, its children now, and those gone."""
    try:
        postmaster = pid_file.read_text().split()[0]
        children = Path(f"/proc/{postmaster}/task/{postmaster}/children").read_text().split()
        ended = Path(f"/proc/{postmaster}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    own = [_cpu_ms(Path(f"/proc/{pid}/stat")) for pid in [postmaster, *children]]
    return sum(cpu for cpu in own if cpu is not None) + (int(ended[13]) + int(ended[14])) * _TICK_MS


def _cpu_ms(stat: Path) -> float | None:
    """utime + stime of a ``/proc`` stat file, in ms (None: the task has ended)."""
    try:
        fields = stat.read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) * _TICK_MS


def _print(
    spent: dict[str, defaultdict[str, float]], walls: dict[str, list[float]], prepares: int
) -> None:
    names = list(spent)
    last = spent[names[-1]]  # the older tree's, when there is one
    labels = sorted(
        {label for cpu in spent.values() for label in cpu}, key=lambda k: -last.get(k, 0.0)
    )
    print(f"{'CPU ms per prepare':28}" + "".join(f"{name:>12}" for name in names))
    print(f"{'all threads':28}" + "".join(f"{_total(spent[n]) / prepares:12.2f}" for n in names))
    for label in labels:
        print(f"{label:28}" + "".join(f"{spent[n][label] / prepares:12.2f}" for n in names))
    print(
        f"{'prepare p50 (wall)':28}"
        + "".join(f"{statistics.median(walls[n]):12.2f}" for n in names)
    )


def _total(spent: defaultdict[str, float]) -> float:
    return sum(cpu for label, cpu in spent.items() if label != "Postgres")


if __name__ == "__main__":
    main()

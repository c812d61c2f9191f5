"""How often Python's garbage collector stops warm ``prepare`` turns with recall, and how long.

    python -m benchmarks.gc_pauses [--turns 400] [--warm 40] [--against FOLDER] [--rounds 2]
                                   [--freeze] [--data-dir DIR]

On ``benchmarks.prepare``'s user (run that first: its ``--data-dir`` holds 10,000+ cards), a new
session of 100 messages gets ``--warm`` unmeasured turns, then ``--turns`` measured ones (each
``prepare`` of a new input, then ``record`` of the turn's reply), no worker beside. The garbage
collector's every pass is timed through ``gc.callbacks``: how many of each generation, their total
and longest pause; and, after the warm-up and a full collection, how many objects the collector
tracks (``gc.get_objects()``) and of which types the most. A full (generation 2) pass walks all
of them, so what the library keeps alive decides how long the rare stall of one request is.

``--against FOLDER`` (``git archive COMMIT | tar -x -C FOLDER``) compares with an older tree: unlike
``benchmarks.prepare_phases``, not in one process, since both trees' objects would be in the
one heap each full pass walks; each tree runs in a process of its own, ``--rounds`` times,
alternating, and the table shows each tree's rounds. ``--freeze`` calls ``gc.freeze()`` after the
warm-up, as an application may (it moves every object then alive out of the collector's sight).

Run from the repository root.
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.trees import PACKAGES


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/stratamem-bench-prepare"))
    parser.add_argument("--turns", type=int, default=400)
    parser.add_argument("--warm", type=int, default=40)
    parser.add_argument("--against", type=Path, help="an older tree, run in processes of its own")
    parser.add_argument("--rounds", type=int, default=2, help="processes per tree (--against)")
    parser.add_argument("--freeze", action="store_true", help="gc.freeze() after the warm-up")
    parser.add_argument("--tree", type=Path, help=argparse.SUPPRESS)  # a child's packages
    args = parser.parse_args()
    if not (args.data_dir / "pg").is_dir():
        sys.exit(f"no benchmark user in {args.data_dir}: run python -m benchmarks.prepare first")
    if args.tree is not None:
        print(json.dumps(measure(args.tree, args)))
        return
    if args.against is None:
        _print({"this tree": [measure(None, args)]})
        return
    results: dict[str, list[dict[str, Any]]] = {"this tree": [], "against": []}
    for _ in range(args.rounds):
        for name, tree in (("this tree", Path.cwd()), ("against", args.against)):
            results[name].append(_child(tree, args))
            print(f"{name}: {_line(results[name][-1])}", flush=True)
    _print(results)


def measure(tree: Path | None, args: argparse.Namespace) -> dict[str, Any]:
    """Run the turns with the packages of ``tree`` (None: those already importable)."""
    if tree is not None:
        # Its packages alone, first on the path: the benchmarks' modules stay this tree's (an
        # older ``benchmarks.prepare`` imported LangChain, whose objects would be counted).
        packages = Path(tempfile.mkdtemp(prefix="gc-pauses-"))
        for name in PACKAGES:
            (packages / name).symlink_to(tree.resolve() / name)
        sys.path.insert(0, str(packages))
    # Imported here, after the tree's packages are first on the path.
    from benchmarks.machine import machine_state
    from benchmarks.prepare import SYSTEM, USER, percentile
    from benchmarks.prepare_phases import SETTINGS, open_variants
    from benchmarks.scripted_turns import turn_messages
    from memory import Memory

    if tree is not None:
        assert all(str(sys.modules[name].__file__).startswith(str(packages)) for name in PACKAGES)
    assert "langchain_core" not in sys.modules
    with Memory.open(data_dir=args.data_dir, **SETTINGS) as memory:
        _, sessions = open_variants(memory, None)
        session = sessions["this tree"]

        def turn(number: int) -> float:
            user, *rest = turn_messages(10_000 + number)
            started = time.perf_counter()
            memory.prepare(
                user_id=USER, session_id=session, input=str(user["content"]), system=SYSTEM
            )
            wall = (time.perf_counter() - started) * 1e3
            time.sleep(0.02)  # the recall threads finish their accounting
            memory.record(user_id=USER, session_id=session, messages=rest)
            return wall

        for number in range(args.warm):
            turn(number)
        gc.collect()
        tracked = gc.get_objects()
        held = len(tracked)
        types = collections.Counter(type(o).__qualname__ for o in tracked).most_common(8)
        del tracked
        if args.freeze:
            gc.freeze()
        pauses = _Pauses()
        gc.callbacks.append(pauses.observe)
        state = machine_state()
        walls = [turn(args.warm + number) for number in range(args.turns)]
        gc.callbacks.remove(pauses.observe)
    return {
        "tracked after warm-up": held,
        "tracked at the end": len(gc.get_objects()),
        "types": types,
        "collections": pauses.summary(args.turns),
        "prepare p50": statistics.median(walls),
        "prepare p99": percentile(walls, 0.99),
        "prepare max": max(walls),
        "machine": state,
    }


class _Pauses:
    """Every collection's generation and pause, from ``gc.callbacks`` (on whichever thread)."""

    def __init__(self) -> None:
        self.started: float | None = None
        self.by_generation: dict[int, list[float]] = {0: [], 1: [], 2: []}

    def observe(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self.started = time.perf_counter()
        elif self.started is not None:
            pause = (time.perf_counter() - self.started) * 1e3
            self.by_generation[info["generation"]].append(pause)
            self.started = None

    def summary(self, turns: int) -> dict[str, dict[str, float]]:
        return {
            f"gen {generation}": {
                "count": len(pauses),
                "total ms": sum(pauses),
                "max ms": max(pauses, default=0.0),
                "ms per turn": sum(pauses) / turns,
            }
            for generation, pauses in self.by_generation.items()
        }


def _child(tree: Path, args: argparse.Namespace) -> dict[str, Any]:
    command = [sys.executable, "-m", "benchmarks.gc_pauses", "--tree", str(tree)]
    command += ["--data-dir", str(args.data_dir), "--turns", str(args.turns)]
    command += ["--warm", str(args.warm)] + (["--freeze"] if args.freeze else [])
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _line(result: dict[str, Any]) -> str:
    full = result["collections"]["gen 2"]
    return (
        f"{result['tracked after warm-up']} tracked after warm-up, {full['count']} full "
        f"collections of max {full['max ms']:.1f} ms; {result['machine']}"
    )


def _print(results: dict[str, list[dict[str, Any]]]) -> None:
    columns = {f"{name} {i + 1}": r for name in results for i, r in enumerate(results[name])}
    cells = {column: _cells(result) for column, result in columns.items()}
    print(f"{'':32}" + "".join(f"{column:>14}" for column in columns))
    for label in next(iter(cells.values())):
        print(f"{label:32}" + "".join(f"{cells[column][label]:>14}" for column in columns))
    for column, result in columns.items():
        kinds = ", ".join(f"{kind} {count}" for kind, count in result["types"])
        print(f"{column}, most tracked: {kinds}")


def _cells(result: dict[str, Any]) -> dict[str, str]:
    """One run's column of the table: label -> value."""
    cells = {
        "tracked objects after warm-up": f"{result['tracked after warm-up']}",
        "tracked objects at the end": f"{result['tracked at the end']}",
    }
    for generation, pauses in result["collections"].items():
        cells[f"{generation} collections"] = f"{pauses['count']}"
        cells[f"{generation} total ms"] = f"{pauses['total ms']:.1f}"
        cells[f"{generation} max ms"] = f"{pauses['max ms']:.2f}"
        cells[f"{generation} ms per turn"] = f"{pauses['ms per turn']:.3f}"
    for what in ("p50", "p99", "max"):
        cells[f"prepare {what} ms"] = f"{result[f'prepare {what}']:.1f}"
    return cells


if __name__ == "__main__":
    main()

"""Where a warm ``prepare`` with recall spends its time, phase by phase, and against an older tree.

On ``benchmarks.prepare``'s user (run that first: its ``--data-dir`` holds 10,000+ cards), a new
session of 100 messages gets ``--turns`` measured turns after ``--warm`` unmeasured ones, no
worker beside. Each phase is timed where it runs (wall and its thread's CPU), and printed as
its p50 and as a timeline: when it starts and ends, in ms from the start of ``prepare``.

``--against FOLDER`` (an older checkout, e.g. ``git archive COMMIT | tar -x -C FOLDER``)
imports that tree's packages as a second copy in this process, opens it on the same database,
and alternates the two call by call, so both see the same machine: the printed ratio is the
comparison to trust on a shared machine. Its phases are not timed.

``--first-person`` asks each turn about the user's present instead ("Which changes am I shipping
now in deploy N?"), which recall treats apart (``retrieval.later_statements``): against a tree
without that, the ratio is what such a question costs.

Run from the repository root: ``python -m benchmarks.prepare_phases [--against FOLDER]``.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.machine import CpuSteal, machine_state
from benchmarks.prepare import SYSTEM, USER, build_sessions, percentile, record_session
from benchmarks.scripted_turns import scripted_history, turn_messages
from benchmarks.trees import PACKAGES
from memory import Memory, Settings

SETTINGS: dict[str, Any] = {
    "model": "gpt-4o-mini",
    "context_window": "8192",
    "max_output": "1024",
    "summary": {"mode": "background", "debounce_seconds": 0},
}

#: A question about the user's present, asked each turn with ``--first-person``.
FIRST_PERSON = "Which changes am I shipping now in deploy {n}?"

# One prepare's phases: label -> [(start, end, cpu)] in ms from the start of prepare.
_spans: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
_lock = threading.Lock()
_started = [0.0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/stratamem-bench-prepare"))
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--warm", type=int, default=10)
    parser.add_argument("--against", type=Path, help="an older tree, alternated call by call")
    parser.add_argument(
        "--first-person", action="store_true", help="ask about the user's present each turn"
    )
    args = parser.parse_args()
    if not (args.data_dir / "pg").is_dir():
        sys.exit(f"no benchmark user in {args.data_dir}: run python -m benchmarks.prepare first")
    _time_phases()
    with Memory.open(data_dir=args.data_dir, **SETTINGS) as memory:
        variants, sessions = open_variants(memory, args.against)
        print(f"start: {machine_state()}", flush=True)
        steal = CpuSteal()
        walls: dict[str, list[float]] = {name: [] for name in variants}
        cpus: dict[str, list[float]] = {name: [] for name in variants}
        timelines: list[dict[str, tuple[float, float, float]]] = []
        for turn in range(args.warm + args.turns):
            user, *rest = turn_messages(10_000 + turn)
            order = list(variants) if turn % 2 == 0 else list(variants)[::-1]
            for name in order:
                with _lock:
                    _spans.clear()
                started, cpu = time.perf_counter(), time.thread_time()
                _started[0] = started
                variants[name].prepare(
                    user_id=USER,
                    session_id=sessions[name],
                    input=FIRST_PERSON.format(n=10_000 + turn)
                    if args.first_person
                    else str(user["content"]),
                    system=SYSTEM,
                )
                wall, cpu = (time.perf_counter() - started) * 1e3, (time.thread_time() - cpu) * 1e3
                time.sleep(0.02)  # the recall threads finish their accounting
                if turn >= args.warm:
                    walls[name].append(wall)
                    cpus[name].append(cpu)
                    if name == "this tree":
                        with _lock:
                            timelines.append({k: v[0] for k, v in _spans.items()})
                variants[name].record(user_id=USER, session_id=sessions[name], messages=rest)
        print(f"end: {machine_state(steal)}")
        for name in variants:
            print(
                f"{name}: prepare p50 {statistics.median(walls[name]):.2f} ms, "
                f"p95 {percentile(walls[name], 0.95):.2f}, "
                f"calling thread's CPU p50 {statistics.median(cpus[name]):.2f}"
            )
        if args.against is not None:
            ratio = statistics.median(walls["this tree"]) / statistics.median(walls["against"])
            print(f"this tree / against, p50: {ratio:.2f}")
        _print_timeline(timelines)


def open_variants(memory: Memory, against: Path | None) -> tuple[dict[str, Memory], dict[str, str]]:
    """This tree's ``memory`` and, with ``against``, the older tree's on the same database; and
    for each a new session of the benchmark user, of the same 100 messages, with a warm-up
    session recorded.

    A session each: in one session shared, the window's fold (archived inline, with no worker)
    fell on the same tree turn after turn, and the tree compared against showed twice the p95
    of the same code (49-70 against 26-55 ms, an A/A run in stop 32).
    """
    variants = {"this tree": memory}
    if against is not None:
        variants["against"] = _older(against, memory.database_url)
    no_cards = {**SETTINGS, "summary": {"mode": "inline"}, "cards": {"enabled": False}}
    history = Memory(memory.database, Settings(**no_cards))
    sessions = {name: build_sessions(history, (100,))[100] for name in variants}
    record_session(memory, f"warm-{uuid.uuid4().hex[:8]}", scripted_history(100))
    return variants, sessions


def _time_phases() -> None:
    """Wrap the phases of a warm ``prepare`` (this tree's) to record their spans."""
    import memory.longterm.long_term_memory as long_term
    from memory.session.preparing import Preparer
    from memory.session.recent import RecentMessages
    from retrieval.postings import HeldPostings
    from retrieval.prefetch import PrefetchingEmbedder
    from retrieval.vectors import UserVectors
    from storage.cards.queries import CardQueries
    from storage.cards.reads import CardReads

    for owner, name, label in (
        (RecentMessages, "append_and_load", "store input + read window"),
        (long_term.LongTermMemory, "pins", "pins"),
        (PrefetchingEmbedder, "_one", "query embedding"),
        (CardQueries, "candidates", "search statement"),
        (HeldPostings, "ranking", "BM25 over held postings"),
        (UserVectors, "nearest", "nearest over held vectors"),
        (CardReads, "get_many", "cards' rows"),
        (CardReads, "keyed_from_messages", "validity's keyed lookup"),
        (long_term, "current_first", "validity"),
        (long_term.LongTermMemory, "recall", "recall (calling thread)"),
        (Preparer, "_assemble", "assemble"),
    ):
        setattr(owner, name, _timed(getattr(owner, name), label))


def _timed(function: Any, label: str) -> Any:
    @functools.wraps(function)
    def timed(*args: Any, **kwargs: Any) -> Any:
        started, cpu = time.perf_counter(), time.thread_time()
        try:
            return function(*args, **kwargs)
        finally:
            ended, cpu = time.perf_counter(), (time.thread_time() - cpu) * 1e3
            with _lock:
                base = _started[0]
                _spans[label].append(((started - base) * 1e3, (ended - base) * 1e3, cpu))

    return timed


def _older(folder: Path, database_url: str) -> Memory:
    """``Memory`` of the tree in ``folder``: its packages imported as a second copy, then this
    tree's put back, so each object keeps the code it was made with."""
    ours = {k: v for k, v in sys.modules.items() if k.split(".")[0] in PACKAGES}
    for name in ours:
        del sys.modules[name]
    sys.path.insert(0, str(folder))
    try:
        import memory as older

        assert older.__file__ is not None and older.__file__.startswith(str(folder))
        return older.Memory.open(database_url=database_url, **SETTINGS)  # type: ignore[no-any-return]
    finally:
        sys.path.remove(str(folder))
        for name in [k for k in sys.modules if k.split(".")[0] in PACKAGES]:
            del sys.modules[name]
        sys.modules.update(ours)


def _print_timeline(timelines: list[dict[str, tuple[float, float, float]]]) -> None:
    labels = {label for timeline in timelines for label in timeline}

    def median(label: str, part: int) -> float:
        return statistics.median(t[label][part] for t in timelines if label in t)

    print(f"{'this tree, phase (p50)':32} {'start':>7} {'end':>7} {'wall':>6} {'CPU':>6}")
    for label in sorted(labels, key=lambda label: median(label, 0)):
        walls = [t[label][1] - t[label][0] for t in timelines if label in t]
        print(
            f"{label:32} {median(label, 0):7.2f} {median(label, 1):7.2f} "
            f"{statistics.median(walls):6.2f} {median(label, 2):6.2f}"
        )


if __name__ == "__main__":
    main()

"""How far one warm ``prepare`` with cards on travels through the code: modules, functions and
package changes, per thread.

    python -m benchmarks.package_hops [--show]

One user with a few cards (an ended session of twelve messages, archived by the worker, and a
pin), then ``prepare`` in a new session: twice to warm it (caches, the embedder loaded), and
the third time traced. The user's defaults: long-term memory on, MiniLM (ONNX Runtime) embeds
the query, no LLM. The trace records every call of a function defined in ``memory/``,
``storage/`` or ``retrieval/`` (library code is not counted), on every thread (a profile hook
set before the ``Memory`` is opened, so its thread pools carry it too).

A function's package is the folder of its module: ``memory/facade.py`` is in ``memory``,
``memory/context/trim.py`` in ``memory.context``, ``storage/cards/queries.py`` in
``storage.cards``. On each thread the packages of successive calls, with repeats collapsed,
make the request's path (``memory -> storage -> memory -> retrieval -> ...``); a *package
change* is one arrow of that path. ``--show`` prints the paths.

Prints the totals and the path lengths per thread; the results and this command are in
BENCHMARKS.md ("How far a request travels").
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from memory import Memory

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("memory", "storage", "retrieval")
USER = "hops"
SAID = [
    "We run the billing service on Postgres 16 in Frankfurt.",
    "Our on-call rotation changes every Monday at 9.",
    "I prefer short answers with the command first.",
    "The checkout latency alert fires above 800 ms p95.",
    "My manager is Dana; she owns the incident reviews.",
    "We deploy with Argo CD from the main branch.",
]


@dataclass
class Trace:
    """The calls of project functions, per thread, while ``recording`` is set."""

    recording: bool = False
    #: Per thread, each call as (caller, callee), both (package, module.function); the
    #: caller is the nearest frame of this project (None: a thread's first call).
    calls: dict[str, list[tuple[tuple[str, str] | None, tuple[str, str]]]] = field(
        default_factory=dict
    )
    _modules: dict[str, tuple[str, str] | None] = field(default_factory=dict)

    def hook(self, frame: FrameType, event: str, _arg: Any) -> None:
        """The profile function: note a call of a function of this project, and its caller."""
        if not self.recording or event != "call":
            return
        callee = self._function(frame)
        if callee is None:
            return
        caller_frame = frame.f_back
        caller = None
        while caller_frame is not None and caller is None:
            caller = self._function(caller_frame)  # library frames between are skipped
            caller_frame = caller_frame.f_back
        thread = threading.current_thread().name
        self.calls.setdefault(thread, []).append((caller, callee))

    def _function(self, frame: FrameType) -> tuple[str, str] | None:
        """(package, module.function) of a frame of this project's code, else None."""
        place = self._place(frame.f_code.co_filename)
        if place is None:
            return None
        module, package = place
        return package, f"{module}.{frame.f_code.co_name}"

    def _place(self, filename: str) -> tuple[str, str] | None:
        """(module, package) of a file of ``memory``, ``storage`` or ``retrieval``, else None."""
        if filename not in self._modules:
            self._modules[filename] = None
            path = Path(filename)
            if path.is_relative_to(ROOT) and path.suffix == ".py":
                parts = path.relative_to(ROOT).with_suffix("").parts
                if parts[0] in PACKAGES:
                    module = ".".join(p for p in parts if p != "__init__")
                    self._modules[filename] = (module, ".".join(parts[:-1]))
        return self._modules[filename]


Call = tuple[tuple[str, str] | None, tuple[str, str]]

#: The layers from the top: a call from a lower one into a higher one goes against them.
LAYERS = ("memory", "retrieval", "storage")


def crossings(calls: list[Call]) -> set[tuple[tuple[str, str], tuple[str, str]]]:
    """The distinct (caller, callee) of the calls that change package."""
    return {
        (caller, callee)
        for caller, callee in calls
        if caller is not None and caller[0] != callee[0]
    }


def against_layers(caller: str, callee: str) -> bool:
    """True when a call goes up: storage or retrieval into a layer above, or ``memory.context``
    (the pure core) into the rest of ``memory``."""
    above = LAYERS.index(callee.split(".")[0]) < LAYERS.index(caller.split(".")[0])
    out_of_core = caller.startswith("memory.context.") and not callee.startswith("memory.context.")
    return above or out_of_core


def prepared_user(mem: Memory) -> None:
    """A user with cards from an ended session and a pin."""
    messages = []
    for text in SAID:
        messages.append({"role": "user", "content": text})
        messages.append({"role": "assistant", "content": "Noted."})
    mem.record(user_id=USER, session_id="monday", messages=messages)
    mem.end_session(user_id=USER, session_id="monday")
    mem.run_worker(until_idle=True)
    mem.pin(user_id=USER, text="Answer in British English.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--show", action="store_true", help="print each thread's path")
    args = parser.parse_args(argv)
    trace = Trace()
    hook: Callable[[FrameType, str, Any], None] = trace.hook
    threading.setprofile(hook)  # threads started from now on (the Memory's pools) carry it
    sys.setprofile(hook)
    with (
        tempfile.TemporaryDirectory(prefix="stratamem-hops-") as folder,
        Memory.open(data_dir=Path(folder), summary={"mode": "background"}) as mem,
    ):
        prepared_user(mem)
        for question in ("Which database do we use?", "Who runs incident reviews?"):
            mem.prepare(user_id=USER, session_id="friday", input=question)
        trace.recording = True
        ctx = mem.prepare(user_id=USER, session_id="friday", input="When is on-call handed over?")
        trace.recording = False
    sys.setprofile(None)
    threading.setprofile(None)
    recalled = len(ctx.report.recall.cards) if ctx.report.recall else 0
    calls = [call for thread_calls in trace.calls.values() for call in thread_calls]
    functions = {callee[1] for _, callee in calls}
    modules = {function.rsplit(".", 1)[0] for function in functions}
    packages = {callee[0] for _, callee in calls}
    changes = crossings(calls)
    upward = {(a, b) for a, b in changes if against_layers(a[1], b[1])}
    print(f"one warm prepare with cards on ({recalled} memories recalled):")
    print(f"  threads {len(trace.calls)} ({', '.join(sorted(trace.calls))})")
    print(f"  packages {len(packages)}, modules {len(modules)}, functions {len(functions)}")
    print(f"  package changes {len(changes)} (distinct caller -> callee calls across packages)")
    pairs = {(caller[0], callee[0]) for caller, callee in changes}
    print(f"  package pairs {len(pairs)}: " + ", ".join(f"{a} -> {b}" for a, b in sorted(pairs)))
    print(f"  against the layers {len(upward)}")
    if args.show:
        for caller, callee in sorted(changes):
            mark = "  ^" if (caller, callee) in upward else "   "
            print(f"{mark} {caller[1]} -> {callee[1]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""How far one warm ``prepare`` with cards on travels through the code: the components of the
architecture it crosses, in which direction, and (as detail) the modules, functions and package
changes, per thread.

    python -m benchmarks.package_hops [--show]

One user with a few cards (an ended session of twelve messages, archived by the worker, and a
pin), then ``prepare`` in a new session: twice to warm it (caches, the embedder loaded), and
the third time traced. The user's defaults: long-term memory on, MiniLM (ONNX Runtime) embeds
the query, no LLM. The trace records every call of a function defined in ``memory/``,
``storage/`` or ``retrieval/`` (library code is not counted), on every thread (a profile hook
set before the ``Memory`` is opened, so its thread pools carry it too).

**Components** are what the import-linter contracts in ``pyproject.toml`` name: ``storage``
whole and ``retrieval`` whole (neither has inner layers), each package of ``memory``
(``memory.session``, ``memory.longterm``, ``memory.cards``, ``memory.context``, ...), and
``memory``'s top-level modules together as ``memory`` (facade, settings, errors, llm, ...).
A *component pair* is a distinct caller-component -> callee-component edge among the calls
the request makes. A call goes *against the layers* when its callee's module sits in the same
layer as its caller's or a higher one, by the contracts' order: ``memory -> retrieval ->
storage``, and inside ``memory`` the layers of its own contract (``memory.context``, the pure
core, is below everything but ``memory.errors``). A callable handed down and called from below
counts as the call it is (the profile hook sees the frame that calls it); a generator that
yields a question to its caller and is sent the answer does not call up. The component graph
is checked for a cycle too.

As detail, the function-level count: a function's *package* is the folder of its module
(``memory/facade.py`` is in ``memory``, ``storage/messages/store.py`` in
``storage.messages``), and a *package change* is a distinct caller -> callee pair of
functions in different packages. ``--show`` lists those pairs, ``^`` marking the ones against
the layers.

The results and this command are in BENCHMARKS.md ("How far a request travels").
"""

from __future__ import annotations

import argparse
import graphlib
import sys
import tempfile
import threading
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from benchmarks.trees import PACKAGES
from memory import Memory

ROOT = Path(__file__).resolve().parents[1]
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
Function = tuple[str, str]


@dataclass(frozen=True)
class Layers:
    """The layers of ``pyproject.toml``'s import-linter contracts, from the top: the three
    packages', and ``memory``'s own (each entry a module or a package of ``memory``; ``|``
    separates the independent ones of one layer)."""

    top: tuple[str, ...]
    inside_memory: tuple[tuple[str, ...], ...]

    @classmethod
    def of_project(cls) -> Layers:
        """The layers the contracts name."""
        config = tomllib.loads((ROOT / "pyproject.toml").read_text())
        contracts = config["tool"]["importlinter"]["contracts"]
        layered = [c["layers"] for c in contracts if c["type"] == "layers"]
        top = next(layers for layers in layered if layers[0] == "memory")
        inside = next(layers for layers in layered if layers[-1] == "memory.errors")
        return cls(
            tuple(top),
            tuple(tuple(name.strip() for name in layer.split("|")) for layer in inside),
        )

    def component(self, module: str) -> str:
        """The component a module is part of (see the module's docstring)."""
        package = module.split(".")[0]
        if package != "memory":
            return package
        entry = self._entry(module)
        if entry is not None and (ROOT / entry.replace(".", "/")).is_dir():
            return entry
        return "memory"

    def rank(self, module: str) -> tuple[int, int]:
        """Where a module sits, from the top: its package's layer, then (in ``memory``) the
        layer of the contract inside ``memory`` (-1 for ``memory`` itself, above them all)."""
        top = self.top.index(module.split(".")[0])
        entry = self._entry(module)
        inner = (
            next(i for i, layer in enumerate(self.inside_memory) if entry in layer) if entry else -1
        )
        return top, inner

    def against(self, caller: str, callee: str) -> bool:
        """Whether a call between modules of two components goes against the layers: up, or
        sideways between independent parts of one layer."""
        return self.rank(callee) <= self.rank(caller)

    def _entry(self, module: str) -> str | None:
        """The entry of ``memory``'s contract that names the module or its package."""
        for layer in self.inside_memory:
            for entry in layer:
                if module == entry or module.startswith(entry + "."):
                    return entry
        return None


def crossings(calls: list[Call]) -> set[tuple[Function, Function]]:
    """The distinct (caller, callee) of the calls that change package."""
    return {
        (caller, callee)
        for caller, callee in calls
        if caller is not None and caller[0] != callee[0]
    }


def module_of(function: Function) -> str:
    """The module of a (package, module.function)."""
    return function[1].rsplit(".", 1)[0]


def component_pairs(
    layers: Layers, changes: Iterable[tuple[Function, Function]]
) -> set[tuple[str, str]]:
    """The distinct (caller component, callee component) of the calls between components."""
    pairs = {(layers.component(module_of(a)), layers.component(module_of(b))) for a, b in changes}
    return {(a, b) for a, b in pairs if a != b}


def has_cycle(pairs: Iterable[tuple[str, str]]) -> bool:
    """Whether the directed graph of ``pairs`` has a cycle."""
    graph: dict[str, set[str]] = {}
    for caller, callee in pairs:
        graph.setdefault(caller, set()).add(callee)
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError:
        return True
    return False


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
    layers = Layers.of_project()
    upward = {
        (a, b)
        for a, b in changes
        if layers.component(module_of(a)) != layers.component(module_of(b))
        and layers.against(module_of(a), module_of(b))
    }
    components = component_pairs(layers, changes)
    print(f"one warm prepare with cards on ({recalled} memories recalled):")
    print(f"  threads {len(trace.calls)} ({', '.join(sorted(trace.calls))})")
    print(
        f"  component pairs {len(components)}: "
        + ", ".join(f"{a} -> {b}" for a, b in sorted(components))
    )
    print(f"  component graph: {'a cycle' if has_cycle(components) else 'acyclic'}, ", end="")
    print(f"{len(upward)} calls against the layers" if upward else "downward only")
    print("  detail, by folder-package and function:")
    print(f"    packages {len(packages)}, modules {len(modules)}, functions {len(functions)}")
    print(
        f"    package changes {len(changes)} (distinct caller -> callee functions across packages)"
    )
    pairs = {(caller[0], callee[0]) for caller, callee in changes}
    print(f"    package pairs {len(pairs)}: " + ", ".join(f"{a} -> {b}" for a, b in sorted(pairs)))
    print(f"    against the layers {len(upward)}")
    if args.show:
        for caller, callee in sorted(changes):
            mark = "  ^" if (caller, callee) in upward else "   "
            print(f"{mark} {caller[1]} -> {callee[1]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Child processes of the multi-process tests, and the helpers the child scripts talk with.

The parent side is ``Child`` (started through the ``spawn`` fixture of ``tests/conftest.py``):
a Python script run with the repository, this folder and the script's own folder importable,
spoken to line by line over its stdin and stdout. The child side is ``say`` and
``wait_for_line``: the two ends synchronise on pipes, never on sleeps.
"""

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Protocol

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent


class Child:
    """A Python script run as a child process, spoken to line by line over its stdin and stdout.

    ``env`` is the environment it starts from (this process's when ``None``); ``PYTHONPATH`` is
    always set to the repository, the script's folder and this folder.
    """

    def __init__(self, script: Path, *args: str, env: dict[str, str] | None = None) -> None:
        path = os.pathsep.join([str(REPO), str(script.parent), str(TESTS)])
        self.process = subprocess.Popen(
            [sys.executable, str(script), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**(os.environ if env is None else env), "PYTHONPATH": path},
        )

    def read(self) -> str:
        """Block until the child says something; fail if it died instead."""
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, f"child exited with {self.process.wait()}"
        return line.strip()

    def expect(self, wanted: str) -> None:
        """Block until the child says ``wanted``; fail if it exits first."""
        assert self.process.stdout is not None
        while (said := self.process.stdout.readline()) != wanted + "\n":
            assert said, f"child exited with {self.process.wait()} before saying {wanted!r}"

    def tell(self, line: str) -> None:
        """Write a line to the child's stdin, now."""
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def kill(self) -> int:
        """Kill the child with SIGKILL; return its exit code (``-SIGKILL`` unless it had exited)."""
        self.process.send_signal(signal.SIGKILL)
        return self.process.wait()

    def finish(self) -> int:
        """Close the child's stdin and wait for it to exit; return its exit code."""
        if self.process.stdin is not None:
            self.process.stdin.close()
        return self.process.wait()


def race(script: Path, *args: str, count: int = 2) -> list[str]:
    """Start ``count`` children of ``script``, wait until each says ``ready``, tell them all to
    go at once, and return the line each said then (each must exit 0)."""
    children = [Child(script, *args) for _ in range(count)]
    try:
        for child in children:
            child.expect("ready")
        for child in children:
            child.tell("go")
        said = [child.read() for child in children]
        assert [child.finish() for child in children] == [0] * count
    finally:
        for child in children:
            if child.process.poll() is None:
                child.kill()
    return said


class Spawn(Protocol):
    """The ``spawn`` fixture: start a child that is killed if still alive when the test ends."""

    def __call__(self, script: Path, *args: str, env: dict[str, str] | None = None) -> Child: ...


# --- the child's side ------------------------------------------------------------------------


def say(line: str) -> None:
    """Tell the parent something, now."""
    print(line, flush=True)


def wait_for_line() -> str:
    """Block until the parent writes a line (or closes stdin); return it."""
    return sys.stdin.readline()


def wait_for_go() -> None:
    """Say ready and block until the parent writes a line."""
    say("ready")
    wait_for_line()

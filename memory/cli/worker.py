"""``stratamem worker``: run queued background jobs until stopped."""

from __future__ import annotations

import argparse
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from rich.console import Console

from memory.cli.base import (
    EXIT_UNAVAILABLE,
    CommandError,
    Subcommands,
    log_warnings_to_stderr,
)
from memory.facade import Memory
from memory.jobs.worker import SHUTDOWN_GRACE_SECONDS, lower_process_priority
from storage import DatabaseUnavailableError

__all__ = ["register_worker", "stop_on_signals"]

#: The signals that stop a worker.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def register_worker(subcommands: Subcommands) -> None:
    """Add ``stratamem worker``: run queued consolidations until stopped."""
    worker = subcommands.add_parser(
        "worker",
        help="run queued summary consolidations (settings from STRATAMEM_* variables)",
        description="Claim and run queued jobs until SIGINT or SIGTERM: a job that is "
        "running is finished first, and one still running after "
        f"{SHUTDOWN_GRACE_SECONDS:g} s has its lease released so another worker takes it over "
        "at once; the exit code is then 0. Any number of workers may share one database. "
        "A database outage is logged once and waited out; with --until-idle it ends the run "
        f"with exit code {EXIT_UNAVAILABLE}.",
    )
    worker.add_argument("--until-idle", action="store_true", help="stop once no job is pending")
    worker.set_defaults(handler=_run_worker)


def _run_worker(args: argparse.Namespace, out: Console) -> int:
    log_warnings_to_stderr()
    with stop_on_signals() as (stop, received):
        try:
            with Memory.open() as mem:
                # After the open: an embedded server this process starts keeps its priority.
                lower_process_priority(mem.settings.jobs.worker_niceness)
                if args.until_idle:
                    run = mem.run_worker(until_idle=True, stop=stop)
                else:
                    # The worker thread runs until ``close`` (the end of this block), which lets
                    # the job it is running finish first, or releases it after the grace.
                    run = mem.run_worker()
                    out.print("stratamem worker running; stop it with Ctrl-C or SIGTERM")
                    stop.wait()
                if received:
                    _say_stopping(out, received[0])
        except DatabaseUnavailableError as error:
            raise CommandError(f"cannot reach the database: {error}", EXIT_UNAVAILABLE) from error
    line = f"stratamem worker: {run.summary_line()}"
    if received:
        line = f"stratamem worker stopped ({signal.Signals(received[0]).name}): " + (
            run.summary_line()
        )
    out.print(line, highlight=False, soft_wrap=True)
    return 0


@contextmanager
def stop_on_signals() -> Iterator[tuple[threading.Event, list[int]]]:
    """An event that SIGTERM or SIGINT sets, and the stop signals received, in order.

    No Python handler sets the event: a handler runs in the main thread between two bytecodes,
    and one that arrives while the main thread holds the event's own lock (inside
    ``stop.wait()``, for a few bytecodes) would wait for that lock forever, so the worker never
    stopped. The signal's number reaches a thread of its own through the wakeup fd (written by
    the interpreter's C handler), and that thread sets the event. Main thread only.
    """
    stop = threading.Event()
    received: list[int] = []
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)

    def watch() -> None:
        while numbers := os.read(read_end, 64):  # b"" once the write end is closed
            stopping = [n for n in numbers if n in STOP_SIGNALS]
            if stopping:
                received.extend(stopping)
                stop.set()

    def noted(signum: int, frame: FrameType | None) -> None:
        return None  # the wakeup fd carries the signal to the watching thread

    previous = {signum: signal.signal(signum, noted) for signum in STOP_SIGNALS}
    previous_fd = signal.set_wakeup_fd(write_end)
    watcher = threading.Thread(target=watch, name="stratamem-stop-signals", daemon=True)
    watcher.start()
    try:
        yield stop, received
    finally:
        signal.set_wakeup_fd(previous_fd)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        os.close(write_end)
        watcher.join()
        os.close(read_end)


def _say_stopping(out: Console, signum: int) -> None:
    """Say, before waiting for it, what happens to the job that may be running."""
    out.print(
        f"stratamem worker: {signal.Signals(signum).name} received, stopping: a running job "
        f"finishes first; after {SHUTDOWN_GRACE_SECONDS:g} s its lease is released to other "
        "workers",
        highlight=False,
        soft_wrap=True,
    )

"""``stratamem worker``: run queued background jobs until stopped."""

from __future__ import annotations

import argparse
import signal
import threading
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

__all__ = ["register_worker"]


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
    stop = threading.Event()
    received: list[int] = []

    def request_stop(signum: int, frame: FrameType | None) -> None:
        # Only a flag: the job that runs now is finished (or, past the grace, released).
        received.append(signum)
        stop.set()

    previous = {
        signum: signal.signal(signum, request_stop) for signum in (signal.SIGTERM, signal.SIGINT)
    }
    try:
        with Memory.open() as mem:
            # After the open: an embedded server this process starts keeps its priority.
            lower_process_priority(mem.settings.jobs.worker_niceness)
            if args.until_idle:
                run = mem.run_worker(until_idle=True, stop=stop)
            else:
                # The worker thread runs until ``close`` (the end of this block), which lets the
                # job it is running finish first, or releases it after the grace.
                run = mem.run_worker()
                out.print("stratamem worker running; stop it with Ctrl-C or SIGTERM")
                stop.wait()
            if received:
                _say_stopping(out, received[0])
        line = f"stratamem worker: {run.summary_line()}"
        if received:
            line = f"stratamem worker stopped ({signal.Signals(received[0]).name}): " + (
                run.summary_line()
            )
        out.print(line, highlight=False, soft_wrap=True)
    except DatabaseUnavailableError as error:
        raise CommandError(f"cannot reach the database: {error}", EXIT_UNAVAILABLE) from error
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 0


def _say_stopping(out: Console, signum: int) -> None:
    """Say, before waiting for it, what happens to the job that may be running."""
    out.print(
        f"stratamem worker: {signal.Signals(signum).name} received, stopping: a running job "
        f"finishes first; after {SHUTDOWN_GRACE_SECONDS:g} s its lease is released to other "
        "workers",
        highlight=False,
        soft_wrap=True,
    )

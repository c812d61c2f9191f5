"""``stratamem worker``: run queued background jobs until stopped."""

from __future__ import annotations

import argparse
import signal
import threading
from types import FrameType

from rich.console import Console

from memory.cli.base import Subcommands
from memory.facade import Memory

__all__ = ["register_worker"]


def register_worker(subcommands: Subcommands) -> None:
    """Add ``stratamem worker``: run queued consolidations until stopped."""
    worker = subcommands.add_parser(
        "worker",
        help="run queued summary consolidations (settings from STRATAMEM_* variables)",
        description="Claim and run queued consolidation jobs until SIGINT or SIGTERM; any "
        "number of workers may share one database.",
    )
    worker.add_argument("--until-idle", action="store_true", help="stop once no job is pending")
    worker.set_defaults(handler=_run_worker)


def _run_worker(args: argparse.Namespace, out: Console) -> int:
    with Memory.open() as mem:
        if args.until_idle:
            run = mem.run_worker(until_idle=True)
            out.print(f"stratamem worker: {run.summary_line()}", highlight=False, soft_wrap=True)
            return 0
        stop = threading.Event()

        def request_stop(signum: int, frame: FrameType | None) -> None:
            stop.set()

        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)
        mem.run_worker()
        out.print("stratamem worker running; stop it with Ctrl-C or SIGTERM")
        stop.wait()
    return 0

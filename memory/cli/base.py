"""What every subcommand shares: exit codes, the handler type, and the error a command reports."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from typing import TypeAlias

from rich.console import Console

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_PROBLEM",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
    "CommandError",
    "Handler",
    "Subcommands",
    "log_warnings_to_stderr",
    "whole_number",
]

#: Exit codes: 0 success, 1 the transcript or budget cannot work, 2 bad usage or unreadable input,
#: 3 the database cannot be reached.
EXIT_OK, EXIT_PROBLEM, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3
#: Stopped by Ctrl-C (SIGINT): 128 + the signal's number, as shells report it.
EXIT_INTERRUPTED = 130

Handler = Callable[[argparse.Namespace, Console], int]
# argparse's class is generic only to type checkers: subscripting it at run time fails.
Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


class CommandError(Exception):
    """A failure a command reports as one line on stderr, with its exit code."""

    def __init__(self, message: str, exit_code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def whole_number(minimum: int) -> Callable[[str], int]:
    """An argparse ``type``: a whole number of at least ``minimum``, else a usage error."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
        if number < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}: {number}")
        return number

    return parse


def log_warnings_to_stderr() -> None:
    """Show warnings (outages, failed jobs, memory degraded) on stderr, unless logging is set up.

    For the long-running commands (``worker``, ``serve``), whose warnings are their only report.
    """
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
        root.setLevel(logging.WARNING)

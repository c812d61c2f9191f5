"""What every subcommand shares: exit codes, the handler type, and the error a command reports."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeAlias

from rich.console import Console

__all__ = ["EXIT_OK", "EXIT_PROBLEM", "EXIT_USAGE", "CommandError", "Handler", "Subcommands"]

#: Exit codes: 0 success, 1 the transcript or budget cannot work, 2 bad usage or unreadable input.
EXIT_OK, EXIT_PROBLEM, EXIT_USAGE = 0, 1, 2

Handler = Callable[[argparse.Namespace, Console], int]
# argparse's class is generic only to type checkers: subscripting it at run time fails.
Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


class CommandError(Exception):
    """A failure a command reports as one line on stderr, with its exit code."""

    def __init__(self, message: str, exit_code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.exit_code = exit_code

"""The ``stratamem`` command line: ``main``, the parser, and the errors a command reports."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.markup import escape

from memory.cli.base import EXIT_INTERRUPTED, EXIT_PROBLEM, CommandError, Handler
from memory.cli.chat import register_chat
from memory.cli.demo import register_demo
from memory.cli.doctor import register_doctor
from memory.cli.eval import register_eval
from memory.cli.forget import register_forget
from memory.cli.inspect import register_inspect
from memory.cli.keys import register_keys
from memory.cli.mcp import register_mcp
from memory.cli.serve import register_serve
from memory.cli.transfer import register_export, register_import
from memory.cli.ui import register_ui
from memory.cli.worker import register_worker
from memory.errors import StratamemError
from storage import StorageError

__all__ = ["build_parser", "main"]


def main(argv: list[str] | None = None) -> int:
    """Run the ``stratamem`` command line and return its exit code.

    Ctrl-C (SIGINT) ends any command with one line on stderr and ``EXIT_INTERRUPTED``, never
    a traceback; ``worker`` and ``serve`` catch it themselves and stop gracefully with 0.
    """
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        handler: Handler = args.handler
        return handler(args, Console(file=sys.stdout))
    except (CommandError, StratamemError, StorageError) as error:
        code = error.exit_code if isinstance(error, CommandError) else EXIT_PROBLEM
        Console(file=sys.stderr, soft_wrap=True).print(
            f"[bold red]stratamem: error:[/] {escape(str(error))}", highlight=False
        )
        return code
    except KeyboardInterrupt:
        # On a terminal, a new line first: the command may have left a prompt or a half line.
        start = "\n" if sys.stderr.isatty() else ""
        print(f"{start}stratamem: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="stratamem", description="Context and memory for long-lived LLM assistants."
    )
    subcommands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # Every subcommand is registered here, and only here.
    for register in (
        register_inspect,
        register_demo,
        register_worker,
        register_eval,
        register_doctor,
        register_forget,
        register_chat,
        register_serve,
        register_keys,
        register_export,
        register_import,
        register_mcp,
        register_ui,
    ):
        register(subcommands)
    return parser

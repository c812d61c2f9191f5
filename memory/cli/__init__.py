"""The ``stratamem`` command: one module per subcommand, wired together in ``app``."""

from memory.cli.app import build_parser, main

__all__ = ["build_parser", "main"]

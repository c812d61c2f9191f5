"""``stratamem export`` and ``stratamem import``: a user's memory as JSON Lines, and back."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from rich.console import Console
from rich.markup import escape

from memory.cli.base import EXIT_OK, EXIT_USAGE, CommandError, Subcommands
from memory.facade import Memory

__all__ = ["register_export", "register_import"]


def register_export(subcommands: Subcommands) -> None:
    """Add ``stratamem export``: everything of a user as JSON Lines, on stdout or to a file."""
    export = subcommands.add_parser(
        "export",
        help="write everything of a user as JSON Lines (stratamem import reads it back)",
        description="Write everything of a user as JSON Lines: sessions with their messages "
        "and summaries, cards with their validity and sources, pins, store items "
        "(docs/operations.md, 'Export and import'). No embedding is written; no model is loaded.",
    )
    export.add_argument("--user", required=True, help="whose memory")
    export.add_argument("--output", type=Path, help="write here instead of stdout")
    export.set_defaults(handler=_run_export)


def register_import(subcommands: Subcommands) -> None:
    """Add ``stratamem import``: store an export into its user, all of it or nothing."""
    imported = subcommands.add_parser(
        "import",
        help="store an export (stratamem export) into its user, all of it or nothing",
        description="Store an export into the user it names (or --user), in one transaction: "
        "a malformed line is an error naming it, and nothing is stored. The user must have "
        "no data unless --merge (then only the export's sessions must be new to the user).",
    )
    imported.add_argument("file", help="the export, or - for stdin")
    imported.add_argument("--user", help="import into this user instead of the export's")
    imported.add_argument("--merge", action="store_true", help="add to a user who has data already")
    imported.set_defaults(handler=_run_import)


def _run_export(args: argparse.Namespace, out: Console) -> int:
    # Reading needs no embedder: opened without long-term memory, no model is loaded.
    with Memory.open(cards={"enabled": False}) as mem, _output(args.output) as sink:
        try:
            for line in mem.export_user(user_id=args.user):
                sink.write(line)
                sink.write("\n")
            sink.flush()
        except BrokenPipeError:
            # The reader stopped (``| head``): nothing more to say, and no traceback at exit.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_OK


def _run_import(args: argparse.Namespace, out: Console) -> int:
    with _input(args.file) as source, Memory.open() as mem:
        done = mem.import_user(source, user_id=args.user, merge=args.merge)
    out.print(
        f"Imported into user {escape(repr(done.user_id))}: {done.describe()}.",
        highlight=False,
        soft_wrap=True,
    )
    return EXIT_OK


@contextmanager
def _output(path: Path | None) -> Iterator[TextIO]:
    if path is None:
        yield sys.stdout
        return
    try:
        with path.open("w", encoding="utf-8", newline="\n") as file:
            yield file
    except OSError as error:
        raise CommandError(f"cannot write {path}: {error.strerror}", EXIT_USAGE) from None


@contextmanager
def _input(name: str) -> Iterator[TextIO]:
    if name == "-":
        yield sys.stdin
        return
    try:
        file = Path(name).open(encoding="utf-8", newline="\n")  # noqa: SIM115 (closed below)
    except OSError as error:
        raise CommandError(f"cannot read {name}: {error.strerror}", EXIT_USAGE) from None
    with file:
        yield file

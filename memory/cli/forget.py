"""``stratamem forget``: delete a user's memory for real, after a confirmation."""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from rich.console import Console
from rich.markup import escape

from memory.cli.base import EXIT_OK, EXIT_USAGE, CommandError, Subcommands
from memory.facade import Memory

__all__ = ["ask_to_confirm", "register_forget"]


def register_forget(subcommands: Subcommands) -> None:
    """Add ``stratamem forget``: delete a user, one session, or one card, for real."""
    forget = subcommands.add_parser(
        "forget",
        help="delete a user's messages, summaries, cards and jobs for real",
        description="Delete for real: everything of a user, one session (its messages, "
        "summary, jobs and cards), or one card; then say what was deleted. Asks for "
        "confirmation unless --yes is given; without a terminal, --yes is required.",
    )
    forget.add_argument("--user", required=True, help="the user whose memory goes")
    scope = forget.add_mutually_exclusive_group()
    scope.add_argument("--session", help="only this session (its cards included)")
    scope.add_argument("--card", type=int, help="only this card")
    forget.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    forget.set_defaults(handler=_run_forget)


def _run_forget(args: argparse.Namespace, out: Console) -> int:
    target = _target(args.user, args.session, args.card)
    if not args.yes:
        if not sys.stdin.isatty():
            raise CommandError(
                f"refusing to forget {target} without confirmation: stdin is not a terminal "
                "(pass --yes to confirm)",
                EXIT_USAGE,
            )
        if not ask_to_confirm(f"Forget {target}? This cannot be undone.", sys.stdin, out):
            out.print("Nothing was deleted.", highlight=False)
            return EXIT_OK
    # Erasure is SQL alone: opened without long-term memory, no embedder is loaded or
    # checked against the stored cards, and every card of the user goes all the same.
    with Memory.open(cards={"enabled": False}) as mem:
        gone = mem.forget(user_id=args.user, session_id=args.session, card_id=args.card)
    out.print(f"Forgot {escape(target)}: {gone.describe()}.", highlight=False, soft_wrap=True)
    return EXIT_OK


def _target(user: str, session: str | None, card: int | None) -> str:
    if card is not None:
        return f"card {card} of user {user!r}"
    if session is not None:
        return f"session {session!r} of user {user!r}"
    return f"everything of user {user!r}"


def ask_to_confirm(question: str, answers: TextIO, out: Console) -> bool:
    """Ask a yes/no question; only ``y`` or ``yes`` (any case) is a yes, end of input a no."""
    out.print(escape(f"{question} [y/N] "), end="", highlight=False)
    answer = answers.readline()
    if not answer:
        out.print()
    return answer.strip().lower() in ("y", "yes")

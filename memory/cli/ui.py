"""``stratamem ui``: serve the inspector page (``memory.ui``) on this machine."""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import sys
from types import FrameType

import uvicorn
from rich.console import Console

from memory.cli.base import EXIT_UNAVAILABLE, CommandError, Subcommands, log_warnings_to_stderr
from memory.facade import Memory
from memory.proxy.listener import open_listener
from memory.ui import create_app
from memory.ui.gate import is_loopback
from storage import DatabaseUnavailableError
from storage.proxy_keys import ProxyKeyStore

__all__ = ["DEFAULT_UI_PORT", "register_ui"]

#: Where the page listens by default, on 127.0.0.1 (the proxy has 8765, `mcp --http` 8766).
DEFAULT_UI_PORT = 8767


def register_ui(subcommands: Subcommands) -> None:
    """Add ``stratamem ui``."""
    ui = subcommands.add_parser(
        "ui",
        help="serve a local page showing what the model saw and what it remembers",
        description="Serve the inspector page: users and sessions, each request's layers, "
        "drops and recalled memories, cards with their supersede chains, the summary's "
        "versions; pin, unpin and forget from the page. It listens on 127.0.0.1 and asks for "
        "an admin key (`stratamem keys create --admin`) unless --no-auth. The database is the "
        "one STRATAMEM_* settings name (the embedded one by default).",
    )
    ui.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    ui.add_argument(
        "--port",
        type=int,
        default=DEFAULT_UI_PORT,
        help=f"port ({DEFAULT_UI_PORT}; 0 picks a free one)",
    )
    ui.add_argument(
        "--no-auth",
        action="store_true",
        help="serve without a key: whoever reaches the port sees and changes every user's "
        "memory (warns)",
    )
    ui.set_defaults(handler=_serve_ui)


def _serve_ui(args: argparse.Namespace, out: Console) -> int:
    log_warnings_to_stderr()
    _log_requests()
    try:
        listener = open_listener(args.host, args.port)
    except OSError as error:
        raise CommandError(f"cannot listen on {args.host}:{args.port}: {error}") from error
    try:
        with Memory.open() as mem:
            host, port = listener.getsockname()[:2]
            where = f"http://{host if ':' not in host else f'[{host}]'}:{port}/"
            out.print(
                f"stratamem ui on {where}"
                + (" (admin key required)" if not args.no_auth else " (NO AUTH)"),
                highlight=False,
                soft_wrap=True,
            )
            sys.stdout.flush()
            _warn_about_access(mem, args, where)
            app = create_app(mem, require_keys=not args.no_auth, bound_host=args.host)
            server = uvicorn.Server(
                # The page logs its own requests (memory.ui): uvicorn's access log would
                # print each query string, and a search is the user's words.
                uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
            )
            _serve_until_stopped(server, listener)
    except DatabaseUnavailableError as error:
        raise CommandError(f"cannot reach the database: {error}", EXIT_UNAVAILABLE) from error
    finally:
        listener.close()
    return 0


def _log_requests() -> None:
    """Show the page's request lines (method, path, status, time: never content) on stderr."""
    logger = logging.getLogger("memory.ui")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


def _warn_about_access(mem: Memory, args: argparse.Namespace, where: str) -> None:
    """Say on stderr how to get in, or that anybody can."""
    errors = Console(file=sys.stderr, soft_wrap=True)
    if args.no_auth:
        reach = "this machine" if is_loopback(args.host) else f"{where}"
        errors.print(
            f"[bold red]WARNING: --no-auth: anyone who can reach {reach} can read and forget "
            "the memory of every user.[/]",
            highlight=False,
        )
        return
    if not any(key.admin and key.revoked_at is None for key in ProxyKeyStore(mem.database).list()):
        errors.print(
            "No admin key yet: make one with `stratamem keys create --admin --label ui`, then "
            f"open {where} and log in with it.",
            highlight=False,
        )


def _serve_until_stopped(server: uvicorn.Server, listener: socket.socket) -> None:
    """Serve until SIGINT or SIGTERM (uvicorn finishes the requests in flight first)."""

    def stopped(signum: int, frame: FrameType | None) -> None:
        return None

    previous = {
        signum: signal.signal(signum, stopped) for signum in (signal.SIGTERM, signal.SIGINT)
    }
    try:
        server.run(sockets=[listener])
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

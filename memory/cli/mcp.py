"""``stratamem mcp``: an MCP server over a user's long-term memory (stdio or streamable HTTP)."""

from __future__ import annotations

import argparse
import sys

import anyio
import uvicorn
from rich.console import Console
from starlette.types import ASGIApp

from memory.cli.base import (
    EXIT_UNAVAILABLE,
    CommandError,
    Subcommands,
    log_warnings_to_stderr,
)
from memory.facade import Memory
from memory.proxy.config import USER_HEADER
from memory.proxy.keys import KeyRing
from memory.proxy.listener import open_listener
from storage import DatabaseUnavailableError
from storage.proxy_keys import ProxyKeyStore

__all__ = ["DEFAULT_PORT", "register_mcp"]

#: Where ``--http`` listens by default (on 127.0.0.1): beside the proxy's 8765.
DEFAULT_PORT = 8766


def register_mcp(subcommands: Subcommands) -> None:
    """Add ``stratamem mcp``."""
    mcp = subcommands.add_parser(
        "mcp",
        help="serve a user's long-term memory to MCP clients (stdio, or --http)",
        description="An MCP server with the tools remember, search, pin, unpin, list_pins and "
        "forget_memory. Over stdio (the default) every call acts as --user. With --http it "
        "serves streamable HTTP at /mcp, and each request's stratamem key decides its user "
        f"(`stratamem keys create`): a user key acts as its user, an admin key names one "
        f"with the {USER_HEADER} header. Needs the mcp extra: pip install stratamem[mcp].",
    )
    mcp.add_argument("--user", help="the user every call acts as (stdio)")
    mcp.add_argument("--http", action="store_true", help="serve streamable HTTP, not stdio")
    mcp.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    mcp.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port ({DEFAULT_PORT}; 0 picks a free one)"
    )
    mcp.add_argument(
        "--no-auth",
        action="store_true",
        help=f"HTTP without keys: the {USER_HEADER} header is believed (warns)",
    )
    mcp.set_defaults(handler=_mcp)


def _mcp(args: argparse.Namespace, out: Console) -> int:
    log_warnings_to_stderr()
    if args.http == (args.user is not None):
        raise CommandError("give --user (stdio) or --http (each request's key names its user)")
    try:
        # The framework comes with the extra: imported only when the command runs.
        from memory.integrations.mcp_server import build_server, http_app
    except ImportError as error:
        raise CommandError(
            f"the mcp extra is missing: pip install stratamem[mcp] ({error})"
        ) from error
    try:
        with Memory.open() as mem:
            if not args.http:
                anyio.run(build_server(mem, user_id=args.user).run_stdio_async)
                return 0
            keys = None if args.no_auth else KeyRing(ProxyKeyStore(mem.database))
            _serve_http(http_app(mem, keys), args, keys is not None, mem, out)
    except DatabaseUnavailableError as error:
        raise CommandError(f"cannot reach the database: {error}", EXIT_UNAVAILABLE) from error
    return 0


def _serve_http(
    app: ASGIApp, args: argparse.Namespace, keyed: bool, mem: Memory, out: Console
) -> None:
    """Serve ``app`` on ``--host``/``--port`` until interrupted; say where, and warn."""

    try:
        listener = open_listener(args.host, args.port)
    except OSError as error:
        raise CommandError(f"cannot listen on {args.host}:{args.port}: {error}") from error
    try:
        host, port = listener.getsockname()[:2]
        out.print(
            f"stratamem mcp on http://{host}:{port}/mcp"
            + (" (keys required)" if keyed else " (NO AUTH)"),
            highlight=False,
            soft_wrap=True,
        )
        sys.stdout.flush()
        errors = Console(file=sys.stderr, soft_wrap=True)
        if not keyed:
            errors.print(
                f"[bold red]WARNING: --no-auth: anyone who can reach {host}:{port} can read, "
                "change and delete the memories of every user.[/]",
                highlight=False,
            )
        elif not any(key.revoked_at is None for key in ProxyKeyStore(mem.database).list()):
            errors.print(
                "No valid keys yet: every request is a 401 until you make one with "
                "`stratamem keys create --user ID` (or --admin).",
                highlight=False,
            )
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        server.run(sockets=[listener])
    finally:
        listener.close()

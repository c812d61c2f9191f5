"""``stratamem serve``: run the memory proxy in front of an OpenAI-compatible upstream."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
from types import FrameType

import uvicorn
from rich.console import Console

from memory.cli.base import (
    EXIT_UNAVAILABLE,
    CommandError,
    Subcommands,
    log_warnings_to_stderr,
    whole_number,
)
from memory.facade import Memory
from memory.proxy import USER_HEADER, ProxyConfig, create_app
from memory.proxy.config import DEFAULT_MAX_BODY_BYTES
from memory.proxy.listener import open_listener
from storage import DatabaseUnavailableError
from storage.proxy_keys import ProxyKeyStore

__all__ = ["DEFAULT_PORT", "OPENAI_URL", "TOKEN_VARIABLE", "register_serve"]

#: Where the proxy listens by default (on 127.0.0.1).
DEFAULT_PORT = 8765
#: The upstream when neither ``--upstream`` nor ``OPENAI_BASE_URL`` names one.
OPENAI_URL = "https://api.openai.com/v1"
#: The environment variable of the shared token that earlier versions took; refused now, since
#: every holder of that token could act as any user (stratamem keys replace it).
TOKEN_VARIABLE = "STRATAMEM_PROXY_TOKEN"


def register_serve(subcommands: Subcommands) -> None:
    """Add ``stratamem serve``: the OpenAI-compatible memory proxy."""
    serve = subcommands.add_parser(
        "serve",
        help="run the OpenAI-compatible memory proxy (settings from STRATAMEM_* variables)",
        description="Serve POST /v1/chat/completions, GET /v1/models and GET /healthz in front "
        "of an OpenAI-compatible upstream. A request names its user with the "
        f"{USER_HEADER} header or the body's 'user' field (else it passes through "
        "untouched) and its session with X-Stratamem-Session (default: 'default'). Every "
        "request needs a stratamem key as its bearer token (`stratamem keys create`): a user "
        "key acts as its user only, an admin key may name any user. The upstream's key is "
        "OPENAI_API_KEY (or STRATAMEM_LLM_API_KEY).",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    serve.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port ({DEFAULT_PORT}; 0 picks a free one)"
    )
    serve.add_argument(
        "--upstream",
        help="the upstream's base URL, ending with /v1 (default: OPENAI_BASE_URL, else OpenAI)",
    )
    serve.add_argument(
        "--no-auth",
        action="store_true",
        help="serve without keys: whoever reaches the port may act as any user (warns)",
    )
    serve.add_argument(
        "--max-body-bytes",
        type=whole_number(1),
        default=DEFAULT_MAX_BODY_BYTES,
        help=f"the largest request body; larger is a 413 ({DEFAULT_MAX_BODY_BYTES:,})",
    )
    # Removed: a shared token let every holder act as any user. Kept only to say so.
    serve.add_argument("--token", help=argparse.SUPPRESS)
    serve.add_argument(
        "--timeout", type=float, default=600.0, help="seconds to wait for the upstream (600)"
    )
    serve.add_argument(
        "--record-before-answer",
        action="store_true",
        help="store each reply before answering (for proxies that share a session's requests "
        "without routing them to one proxy; the default stores it while the answer goes out)",
    )
    serve.add_argument(
        "--no-worker",
        action="store_true",
        help="run no worker thread: leave the jobs (folds, and the cards that let other "
        "sessions recall what was said) to `stratamem worker` processes",
    )
    # The worker thread is the default now; the flag that asked for it still starts.
    serve.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    serve.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace, out: Console) -> int:
    log_warnings_to_stderr()
    if args.token is not None or os.environ.get(TOKEN_VARIABLE):
        raise CommandError(
            f"--token and {TOKEN_VARIABLE} are no longer supported: every holder of that "
            "token could act as any user. Give each client its own key instead: `stratamem "
            "keys create --user ID` (or --admin for a key that may name any user), then unset "
            f"{TOKEN_VARIABLE}"
        )
    try:
        listener = open_listener(args.host, args.port)
    except OSError as error:
        raise CommandError(f"cannot listen on {args.host}:{args.port}: {error}") from error
    try:
        with Memory.open() as mem:
            config = ProxyConfig(
                upstream=args.upstream or mem.settings.llm_base_url or OPENAI_URL,
                api_key=mem.settings.llm_api_key,
                require_keys=not args.no_auth,
                max_body_bytes=args.max_body_bytes,
                timeout=args.timeout,
                record_after_answer=not args.record_before_answer,
                worker=not args.no_worker,
            )
            host, port = listener.getsockname()[:2]
            out.print(
                f"stratamem proxy on http://{host}:{port}/v1 -> {config.upstream}"
                + (" (keys required" if config.require_keys else " (NO AUTH")
                + (", worker thread)" if config.worker else ", no worker: run stratamem worker)"),
                highlight=False,
                soft_wrap=True,
            )
            sys.stdout.flush()
            _warn_about_access(mem, config, f"http://{host}:{port}")
            server = uvicorn.Server(
                uvicorn.Config(create_app(mem, config), log_level="info", lifespan="on")
            )
            # The socket is bound already: a free port (--port 0) is known before serving.
            _serve_until_stopped(server, listener)
    except DatabaseUnavailableError as error:
        raise CommandError(f"cannot reach the database: {error}", EXIT_UNAVAILABLE) from error
    finally:
        listener.close()
    return 0


def _warn_about_access(mem: Memory, config: ProxyConfig, where: str) -> None:
    """Say on stderr when nobody can use the proxy yet, or when anybody can."""
    errors = Console(file=sys.stderr, soft_wrap=True)
    if not config.require_keys:
        errors.print(
            f"[bold red]WARNING: --no-auth: anyone who can reach {where} can read and write "
            "the memory of every user, and spends the upstream key.[/]",
            highlight=False,
        )
    elif not any(key.revoked_at is None for key in ProxyKeyStore(mem.database).list()):
        errors.print(
            "No valid keys yet: every request is a 401 until you make one with `stratamem keys "
            "create --user ID` (or --admin).",
            highlight=False,
        )


def _serve_until_stopped(server: uvicorn.Server, listener: socket.socket) -> None:
    """Serve until SIGINT or SIGTERM; uvicorn finishes the requests in flight first.

    uvicorn signals itself again after its graceful shutdown, with the handler it found: ours
    only returns, so the database is closed and the command exits with 0.
    """

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

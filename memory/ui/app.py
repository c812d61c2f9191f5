"""The inspector's ASGI app (Starlette): routes, the gate in front of every page, the headers
on every response, and a log line per request that names no content.

Every page is rendered on the server; no script runs in the page (the Content-Security-Policy
allows none), and the only style sheet is ``/ui.css``. A log line says the method, the path
(never its query: a search is the user's words), the status and the time taken.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qs

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memory.errors import StratamemError
from memory.facade import Memory
from memory.proxy.keys import KeyRing
from memory.ui.actions import act, confirm_page
from memory.ui.gate import COOKIE, SESSION_IDLE_S, LoginGate, Refusal
from memory.ui.html import el, url, void
from memory.ui.layout import Visitor, page
from memory.ui.pages_memory import card_page, memory_page
from memory.ui.pages_people import home_page, user_page
from memory.ui.pages_session import session_page
from memory.ui.pages_summary import summary_page
from memory.ui.style import STYLESHEET
from memory.ui.visits import Inspector, PageError, Visit
from storage import DatabaseUnavailableError, InvalidInputError, StorageError
from storage.proxy_keys import ProxyKeyStore

__all__ = ["CONTENT_SECURITY_POLICY", "create_app"]

logger = logging.getLogger("memory.ui")

#: No script at all, styles and images from the page itself, forms only to the page itself,
#: never in a frame.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    # same-origin: a form posted from the page itself carries its real Origin (checked).
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}

Handler = Callable[[Inspector, Visit], Response]
#: The largest form body the page reads (its forms hold a few ids and a token).
_FORM_BYTES = 64 * 1024


def create_app(
    memory: Memory, *, require_keys: bool = True, bound_host: str = "127.0.0.1"
) -> ASGIApp:
    """The inspector page over ``memory``.

    Args:
        memory: the memory whose database the page shows and through which it acts.
        require_keys: ask for an admin key (``False`` is ``--no-auth``).
        bound_host: the address the page listens on: on a loopback address, requests must
            name a loopback host (``memory.ui.gate``).
    """
    inspector = Inspector.over(memory)
    keys = KeyRing(ProxyKeyStore(memory.database)) if require_keys else None
    gate = LoginGate(keys, bound_host=bound_host)

    def guarded(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            form: dict[str, str] = {}
            if request.method == "POST":
                if not gate.origin_allowed(request):
                    return page("Refused", el("p", "a form from another site"), None, status=403)
                read = await _form(request)
                if read is None:
                    return page("Refused", el("p", "not a form of this page"), None, status=400)
                form = read
            return await run_in_threadpool(_serve, gate, inspector, handler, request, form)

        return endpoint

    async def stylesheet(request: Request) -> Response:
        return PlainTextResponse(STYLESHEET, media_type="text/css")

    async def login(request: Request) -> Response:
        if request.method == "GET":
            return _login_page(gate, request.query_params.get("next"), None, 200)
        if not gate.origin_allowed(request):
            return page("Refused", el("p", "a form from another site"), None, status=403)
        received = await _form(request) or {}
        target = _local(received.get("next"))
        try:
            token = await run_in_threadpool(gate.log_in, received.get("key", ""))
        except StorageError:
            return _login_page(gate, target, "the keys cannot be checked now (database)", 503)
        if isinstance(token, Refusal):
            return _login_page(gate, target, token.message, 401 if token.kind == "login" else 403)
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            COOKIE, token, max_age=int(SESSION_IDLE_S), httponly=True, samesite="strict", path="/"
        )
        return response

    def logout(inspector: Inspector, visit: Visit) -> Response:
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(COOKIE, path="/")
        return response

    async def logout_endpoint(request: Request) -> Response:
        response = await guarded(logout)(request)
        token = request.cookies.get(COOKIE)
        if response.status_code == 303 and token:
            gate.log_out(token)
        return response

    routes = [
        Route("/", guarded(home_page)),
        Route("/user", guarded(user_page)),
        Route("/session", guarded(session_page)),
        Route("/summary", guarded(summary_page)),
        Route("/memory", guarded(memory_page)),
        Route("/card", guarded(card_page)),
        Route("/confirm", guarded(confirm_page)),
        Route("/act", guarded(act), methods=["POST"]),
        Route("/login", login, methods=["GET", "POST"]),
        Route("/logout", logout_endpoint, methods=["POST"]),
        Route("/ui.css", stylesheet),
    ]
    return _Framed(Starlette(routes=routes), gate)


def _serve(
    gate: LoginGate, inspector: Inspector, handler: Handler, request: Request, form: dict[str, str]
) -> Response:
    """Check who asks, then answer with ``handler`` (in a worker thread: it reads the database)."""
    try:
        visitor = gate.visitor(request)
    except StorageError:
        return page(
            "Unavailable", el("p", "The keys cannot be checked now (database)."), None, status=503
        )
    if isinstance(visitor, Refusal):
        if visitor.kind == "login" and request.method == "GET":
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(url("/login", {"next": target}), status_code=303)
        status = 401 if visitor.kind == "login" else 403
        return page("Not allowed", el("p", visitor.message), None, status=status)
    if request.method == "POST" and not gate.csrf_ok(visitor, form.get("csrf")):
        return page(
            "Refused",
            el(
                "p",
                "This form is stale or not from this page: nothing "
                "was changed. Go back, reload and try again.",
            ),
            visitor,
            status=403,
        )
    params = request.query_params
    visit = Visit(
        visitor,
        {name: params[name] for name in params},
        {name: params.getlist(name) for name in params},
        form,
    )
    try:
        return handler(inspector, visit)
    except PageError as error:
        return _problem(visitor, error.status, error.message)
    except DatabaseUnavailableError:
        logger.warning("stratamem ui: the database is unavailable (%s)", request.url.path)
        return _problem(visitor, 503, "the database cannot be reached now; try again later")
    except (InvalidInputError, ValueError) as error:
        return _problem(visitor, 400, str(error))
    except (StratamemError, StorageError) as error:
        # Logged by kind only: an error's message may quote what was stored.
        logger.warning("stratamem ui: %s on %s", type(error).__name__, request.url.path)
        return _problem(visitor, 500, str(error))


def _problem(visitor: Visitor, status: int, message: str) -> Response:
    return page("Cannot show this", el("div", message, class_="error"), visitor, status=status)


def _login_page(gate: LoginGate, target: str | None, problem: str | None, status: int) -> Response:
    form = el(
        "form",
        el(
            "label",
            "Admin key",
            void(
                "input",
                type="password",
                name="key",
                autocomplete="off",
                required=True,
                autofocus=True,
            ),
        ),
        void("input", type="hidden", name="next", value=_local(target)),
        el("p", el("button", "Log in", type="submit")),
        action="/login",
        method="post",
        id="login",
    )
    body = el(
        "div",
        el("div", problem, class_="error") if problem else None,
        el(
            "p",
            "The inspector shows every user's messages and memory: it opens with an admin "
            "key of this database (`stratamem keys create --admin`).",
        ),
        form,
        class_="login",
    )
    return page("Log in", body, None, status=status)


async def _form(request: Request) -> dict[str, str] | None:
    """A posted form's fields (the first value of each), or ``None`` when the body is no
    URL-encoded form of at most ``_FORM_BYTES`` (the page's forms are small)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        return None
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > _FORM_BYTES:
            return None
    try:
        fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=50)
    except (UnicodeDecodeError, ValueError):
        return None
    return {name: values[0] for name, values in fields.items()}


def _local(target: object) -> str:
    """A redirect target that stays on this page (anything else is the home page)."""
    if (
        isinstance(target, str)
        and target.startswith("/")
        and not target.startswith("//")
        and "\\" not in target
    ):
        return target
    return "/"


class _Framed:
    """Every response gets the security headers; a foreign ``Host`` gets a 421; each request
    is logged by method, path, status and milliseconds, never by its query or content."""

    def __init__(self, app: ASGIApp, gate: LoginGate) -> None:
        self._app = app
        self._gate = gate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500
        request = Request(scope)

        async def send_framed(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = list(message.get("headers", []))
                headers += [(name.encode(), value.encode()) for name, value in _HEADERS.items()]
                message = {**message, "headers": headers}
            await send(message)

        try:
            if not self._gate.host_allowed(request):
                refused = PlainTextResponse("this page answers to its loopback address only", 421)
                await refused(scope, receive, send_framed)
                return
            await self._app(scope, receive, send_framed)
        finally:
            logger.info(
                "%s %s %d %.1f ms",
                scope["method"],
                scope["path"],
                status,
                1000 * (time.perf_counter() - started),
            )

"""Who may see the page: an admin key (bearer token, or a login that sets an HttpOnly cookie),
forms that carry a CSRF token, and requests that name this machine.

- **Keys.** The proxy's keys (``memory.proxy.keys``): only an admin key opens the page (it
  shows every user). A browser logs in once with the key; the page keeps the key in this
  process's memory under a random session token, and the cookie holds only that token
  (``HttpOnly``, ``SameSite=Strict``). Every request checks the key again, so a revoked key is
  out on its next click. A session ends after ``SESSION_IDLE_S`` unused, at logout, or when the
  page stops. ``--no-auth`` opens the page to whoever reaches its port.
- **CSRF.** A form that changes something carries a token: an HMAC, with a secret made at
  start, of who is visiting (the login session, the bearer key's hash, or "no auth"). Another
  site can make a browser post a form here, but cannot read a page to learn the token.
- **Host.** On a loopback address a request must name a loopback host (``Host`` header): a
  site that rebinds its own name to 127.0.0.1 gets a 421, not the page. A POST whose
  ``Origin`` is another site is refused too.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from starlette.requests import Request

from memory.proxy.keys import Caller, KeyRing, key_hash
from memory.ui.layout import Visitor

__all__ = ["COOKIE", "SESSION_IDLE_S", "LoginGate", "Refusal", "is_loopback"]

#: The cookie that holds a login's session token.
COOKIE = "stratamem_ui"
#: A login unused this long ends.
SESSION_IDLE_S = 8 * 3600.0
#: Logins remembered at most (the least recently used end first).
_LOGINS = 1_000
_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request may not see the page: ``login`` (no or an ended login: show the form),
    ``forbidden`` (a key that is no admin key), or ``unavailable`` (keys cannot be checked)."""

    kind: str
    message: str


@dataclass(slots=True)
class _Login:
    key: str
    last_seen: float


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is this machine only."""
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class LoginGate:
    """Decides who a request comes from, keeps the logins, makes and checks CSRF tokens.

    Args:
        keys: the key ring; ``None`` with ``--no-auth``.
        bound_host: the address the page listens on (its ``Host`` check depends on it).
        clock: seconds that only go forward (tests pass their own).
    """

    def __init__(
        self,
        keys: KeyRing | None,
        *,
        bound_host: str = "127.0.0.1",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._keys = keys
        self._check_host = is_loopback(bound_host)
        self._clock = clock
        self._secret = secrets.token_bytes(32)
        self._logins: OrderedDict[str, _Login] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def required(self) -> bool:
        """Whether the page needs an admin key."""
        return self._keys is not None

    def host_allowed(self, request: Request) -> bool:
        """Whether the request names a host this page answers to (see the module docstring)."""
        if not self._check_host:
            return True
        host = request.headers.get("host", "")
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        return is_loopback(name.lower())

    def origin_allowed(self, request: Request) -> bool:
        """Whether a POST comes from this page (or says nothing of its origin)."""
        origin = request.headers.get("origin")
        if origin is None:
            return True
        return origin == f"{request.url.scheme}://{request.headers.get('host', '')}"

    def visitor(self, request: Request) -> Visitor | Refusal:
        """Who the request comes from, or why it may not see the page.

        Raises:
            storage.StorageError: the key could not be checked (the caller says 503).
        """
        if self._keys is None:
            return Visitor(signed_in=False, csrf=self._csrf("open"))
        header = request.headers.get("authorization")
        if header is not None:
            caller = self._keys.caller(header)
            if caller is None:
                return Refusal("login", "that key is unknown or revoked")
            refused = _admin_only(caller)
            if refused is not None:
                return refused
            identity = "key:" + key_hash(header.partition(" ")[2].strip()).hex()
            return Visitor(signed_in=False, csrf=self._csrf(identity))
        token = request.cookies.get(COOKIE)
        login = self._login(token) if token else None
        if token is None or login is None:
            return Refusal("login", "log in with an admin key")
        caller = self._keys.caller(f"Bearer {login.key}")
        if caller is None:
            self.log_out(token)
            return Refusal("login", "your key was revoked: log in with another admin key")
        refused = _admin_only(caller)
        if refused is not None:
            return refused
        return Visitor(signed_in=True, csrf=self._csrf("login:" + token))

    def log_in(self, key: str) -> str | Refusal:
        """A new login's session token for an admin key, or why the key opens nothing.

        Raises:
            storage.StorageError: the key could not be checked.
        """
        if self._keys is None:
            return Refusal("forbidden", "this page runs without keys (--no-auth)")
        caller = self._keys.caller(f"Bearer {key.strip()}")
        if caller is None:
            return Refusal("login", "that is no valid stratamem key (unknown, revoked, mistyped)")
        refused = _admin_only(caller)
        if refused is not None:
            return refused
        token = secrets.token_urlsafe(32)
        with self._lock:
            self._logins[token] = _Login(key.strip(), self._clock())
            while len(self._logins) > _LOGINS:
                self._logins.popitem(last=False)
        return token

    def log_out(self, token: str) -> None:
        """End a login (nothing happens for an unknown token)."""
        with self._lock:
            self._logins.pop(token, None)

    def csrf_ok(self, visitor: Visitor, submitted: str | None) -> bool:
        """Whether a form's token is the visitor's."""
        return submitted is not None and hmac.compare_digest(visitor.csrf, submitted)

    def _login(self, token: str) -> _Login | None:
        now = self._clock()
        with self._lock:
            login = self._logins.get(token)
            if login is None:
                return None
            if now - login.last_seen > SESSION_IDLE_S:
                del self._logins[token]
                return None
            login.last_seen = now
            self._logins.move_to_end(token)
            return login

    def _csrf(self, identity: str) -> str:
        return hmac.new(self._secret, identity.encode(), hashlib.sha256).hexdigest()


def _admin_only(caller: Caller) -> Refusal | None:
    if caller.admin:
        return None
    return Refusal(
        "forbidden",
        "this key acts for one user only; the inspector shows every user and needs an admin "
        "key (`stratamem keys create --admin`)",
    )

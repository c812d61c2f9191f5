"""The proxy's keys: made once, shown once, stored as hashes, and who a request's key is.

A key is ``sm_`` and 43 URL-safe characters (32 random bytes); only its SHA-256 is stored
(``storage.proxy_keys``). A request presents it as ``Authorization: Bearer <key>`` (the
``openai`` client's ``api_key``). Anything else is no key: an upstream key (``sk-...``), a
revoked key, a key of another database. A SHA-256 of 32 random bytes needs no salt or slow
hash: nobody can guess a key from its hash, and checking one costs one indexed lookup.

Every request asks the database, so a revoked key is refused on its next request, on every
proxy. Only while the database cannot be reached does a proxy believe what it last heard: a
key it found valid within ``OUTAGE_GRACE_S`` still works (memory is degraded anyway), so an
outage does not lock out the clients a proxy is serving; any other key is a 503.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from storage import DatabaseUnavailableError
from storage.proxy_keys import ProxyKey, ProxyKeyStore

__all__ = ["KEY_PREFIX", "OUTAGE_GRACE_S", "Caller", "KeyRing", "key_hash", "new_key"]

#: How every stratamem key begins, so that one is recognised in a config file or a log.
KEY_PREFIX = "sm_"
#: Random bytes in a key.
_KEY_BYTES = 32
#: The length of a key: the prefix and 32 bytes in unpadded URL-safe base64.
_KEY_LENGTH = len(KEY_PREFIX) + 43
#: While the database is unreachable, a key found valid at most this long ago still works.
OUTAGE_GRACE_S = 300.0
#: Keys remembered for outages, at most (the least recently checked go first).
_REMEMBERED = 10_000


@dataclass(frozen=True, slots=True)
class Caller:
    """Who a request's key says it comes from.

    Attributes:
        key_id: the key's id (for logs: never the key).
        user_id: the user a user key acts as; ``None`` for an admin key.
    """

    key_id: int
    user_id: str | None

    @property
    def admin(self) -> bool:
        """An admin key: it may name any user, or none."""
        return self.user_id is None


def new_key() -> str:
    """A new random key (``sm_`` and 43 characters)."""
    raw = secrets.token_bytes(_KEY_BYTES)
    return KEY_PREFIX + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def key_hash(key: str) -> bytes:
    """The SHA-256 of a key, as stored."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


class KeyRing:
    """Makes keys and finds who presents one.

    Args:
        store: where the keys' hashes are kept.
        outage_grace_s: how long a key found valid stays usable while the database cannot be
            reached (0: never).
        clock: seconds that only go forward (``time.monotonic``; tests pass their own).
    """

    def __init__(
        self,
        store: ProxyKeyStore,
        *,
        outage_grace_s: float = OUTAGE_GRACE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._grace = outage_grace_s
        self._clock = clock
        # hash -> (who, when last found valid); only ever read while the database is down.
        self._valid: OrderedDict[bytes, tuple[Caller, float]] = OrderedDict()
        self._lock = threading.Lock()

    def create(self, *, user_id: str | None, label: str | None = None) -> tuple[str, ProxyKey]:
        """A new key bound to ``user_id`` (``None``: an admin key), and its stored record.

        The key is returned once and never stored: whoever loses it makes a new one.

        Raises:
            InvalidInputError: the user id or the label cannot be stored.
            storage.StorageError: the database failed.
        """
        key = new_key()
        return key, self._store.add(key_hash(key), user_id=user_id, label=label)

    def caller(self, authorization: str | None) -> Caller | None:
        """Who an ``Authorization`` header's key belongs to; ``None`` when it holds no valid key.

        A header that cannot hold a stratamem key (no ``Bearer``, another prefix, another
        length) is refused without asking the database.

        Raises:
            storage.DatabaseUnavailableError: the database cannot be reached and this key was
                not found valid within the outage grace.
            storage.StorageError: the database failed otherwise (the key could not be checked).
        """
        key = _bearer(authorization)
        if key is None:
            return None
        wanted = key_hash(key)
        try:
            found = self._store.find(wanted)
        except DatabaseUnavailableError:
            remembered = self._remembered(wanted)
            if remembered is None:
                raise
            return remembered
        # The lookup matched on the hash already; comparing again in constant time costs
        # nothing and keeps the check independent of how the index compares.
        if found is None or not hmac.compare_digest(found[1], wanted):
            self._forget(wanted)
            return None
        caller = Caller(found[0].id, found[0].user_id)
        self._remember(wanted, caller)
        return caller

    def _remember(self, wanted: bytes, caller: Caller) -> None:
        with self._lock:
            self._valid[wanted] = (caller, self._clock())
            self._valid.move_to_end(wanted)
            while len(self._valid) > _REMEMBERED:
                self._valid.popitem(last=False)

    def _forget(self, wanted: bytes) -> None:
        with self._lock:
            self._valid.pop(wanted, None)

    def _remembered(self, wanted: bytes) -> Caller | None:
        with self._lock:
            entry = self._valid.get(wanted)
        if entry is None or self._clock() - entry[1] > self._grace:
            return None
        return entry[0]


def _bearer(authorization: str | None) -> str | None:
    """The key of ``Bearer <key>`` when it looks like a stratamem key, else ``None``."""
    if authorization is None:
        return None
    scheme, _, key = authorization.partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or len(key) != _KEY_LENGTH or not key.startswith(KEY_PREFIX):
        return None
    return key

"""Who may use the proxy, and as which user: the request's stratamem key decides.

With keys required (the default), every ``/v1`` request presents a stratamem key as its bearer
token, else it is a 401. A user key acts as its user, whether or not the request names one;
naming another user (the ``X-Stratamem-User`` header or the body's ``user``) is a 403. An
admin key may name any user, or none (then the request passes through without memory). With
``--no-auth`` nobody is asked, and the request's named user is believed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from memory.proxy.keys import Caller, KeyRing
from memory.proxy.requests import client_error
from storage import StorageError

__all__ = ["Access", "Refused"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Refused:
    """A request refused before its body is read or anything is forwarded."""

    response: Response


class Access:
    """Checks a request's key and the user it may act as.

    Args:
        keys: where keys are found; ``None`` when the proxy runs with ``--no-auth``.
    """

    def __init__(self, keys: KeyRing | None) -> None:
        self._keys = keys

    @property
    def required(self) -> bool:
        """Requests need a stratamem key."""
        return self._keys is not None

    async def caller(self, request: Request) -> Caller | Refused | None:
        """Who presents the request's key; ``None`` when no key is required.

        A missing, unknown or revoked key is a 401 (an upstream key too: it is no stratamem
        key); a database that cannot be asked is a 503, never a pass.
        """
        if self._keys is None:
            return None
        authorization = request.headers.get("authorization")
        try:
            caller = await run_in_threadpool(self._keys.caller, authorization)
        except StorageError as error:
            logger.warning("stratamem proxy: cannot check a key: %s", error)
            body = {
                "error": {
                    "message": "stratamem proxy: cannot check the key now (the database is "
                    "unavailable); try again later",
                    "type": "stratamem_proxy_error",
                    "code": "keys_unavailable",
                }
            }
            return Refused(JSONResponse(body, status_code=503))
        if caller is None:
            return Refused(
                client_error(
                    401,
                    "missing, unknown or revoked key: send a stratamem key (sm_..., made with "
                    "`stratamem keys create`) as the bearer token",
                    "invalid_api_key",
                )
            )
        return caller

    @staticmethod
    def acting_user(caller: Caller | None, named: str | None) -> str | Refused | None:
        """The user a request acts as, or a 403 when its key may not act as the one named.

        Args:
            caller: the request's key (``None`` without keys: the named user is believed).
            named: the user the request names, if any.
        """
        if caller is None or caller.admin:
            return named
        if named is not None and named != caller.user_id:
            return Refused(
                client_error(
                    403,
                    "this key acts as its own user only; it may not name another",
                    "user_not_allowed",
                )
            )
        return caller.user_id

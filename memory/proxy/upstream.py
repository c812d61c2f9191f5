"""The upstream endpoint: requests forwarded with the right headers, failures as HTTP answers.

The proxy answers with what the upstream sent (status, body, its headers less the hop-by-hop
ones); only when there is no answer at all does it make one: 502 when the upstream cannot be
reached or broke the connection, 504 when it did not answer in time.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import httpx
from starlette.datastructures import Headers
from starlette.responses import JSONResponse, Response

from memory.proxy.config import ProxyConfig

__all__ = ["Upstream", "UpstreamFailed", "response_headers"]

logger = logging.getLogger(__name__)

#: Request headers passed on to the upstream (besides ``Authorization``, chosen apart).
_FORWARDED = (
    "accept",
    "content-type",
    "openai-organization",
    "openai-project",
    "openai-beta",
    "user-agent",
)
#: Response headers that describe one connection or an encoding httpx has already undone.
_NOT_PASSED_BACK = frozenset(
    {
        "connection",
        "content-encoding",
        "content-length",
        "date",
        "keep-alive",
        "server",
        "transfer-encoding",
        "upgrade",
    }
)


class UpstreamFailed(Exception):
    """The upstream gave no answer; ``response`` is the error the client gets instead."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.status_code)
        self.response = response


class Upstream:
    """An HTTP client for the upstream, opened with ``start`` and closed with ``close``.

    Args:
        config: the upstream's address, key and timeouts.
        transport: an ``httpx`` transport to use instead of the network (tests).
    """

    def __init__(
        self, config: ProxyConfig, *, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self._config = config
        self._base = config.upstream.rstrip("/")
        self._transport = transport
        self._client: httpx.AsyncClient | None = None

    async def start(self) -> None:
        """Open the connection pool."""
        timeout = httpx.Timeout(self._config.timeout, connect=self._config.connect_timeout)
        self._client = httpx.AsyncClient(timeout=timeout, transport=self._transport)

    async def close(self) -> None:
        """Close the connection pool."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def send(
        self, method: str, path: str, headers: Headers, content: bytes = b"", *, stream: bool
    ) -> httpx.Response:
        """Send one request to ``{upstream}{path}``; a streamed response must be closed.

        Raises:
            UpstreamFailed: no answer came (unreachable, broken connection, timeout).
        """
        if self._client is None:
            raise RuntimeError("Upstream.start was not called")
        request = self._client.build_request(
            method, self._base + path, headers=self._headers(headers), content=content
        )
        try:
            return await self._client.send(request, stream=stream)
        except httpx.TimeoutException as error:
            raise UpstreamFailed(
                self._error(504, "timeout", f"the upstream did not answer in time ({error!r})")
            ) from error
        except httpx.HTTPError as error:
            raise UpstreamFailed(
                self._error(502, "upstream_unreachable", f"cannot reach the upstream: {error!r}")
            ) from error

    def _headers(self, incoming: Headers) -> dict[str, str]:
        headers = {name: incoming[name] for name in _FORWARDED if name in incoming}
        if self._config.api_key:
            headers["authorization"] = f"Bearer {self._config.api_key}"
        elif not self._config.require_keys and "authorization" in incoming:
            # No key of its own and no keys of its own (--no-auth): the client's key is the
            # upstream's. With keys, the client's Authorization is its stratamem key, which
            # never leaves the proxy.
            headers["authorization"] = incoming["authorization"]
        return headers

    def _error(self, status: int, code: str, detail: str) -> Response:
        message = f"stratamem proxy: {detail} (upstream {self._base})"
        logger.warning("%s", message)
        body = {"error": {"message": message, "type": "stratamem_proxy_error", "code": code}}
        return JSONResponse(body, status_code=status)


def response_headers(upstream: httpx.Response, extra: Mapping[str, str]) -> dict[str, str]:
    """The upstream's response headers to pass back, plus ``extra``."""
    headers = {
        name: value
        for name, value in upstream.headers.items()
        if name.lower() not in _NOT_PASSED_BACK
    }
    return {**headers, **extra}

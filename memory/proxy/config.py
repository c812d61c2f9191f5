"""What a memory proxy is configured with, and the headers it reads and writes."""

from __future__ import annotations

from dataclasses import dataclass, field

from memory.hook import LOOKBACK

__all__ = [
    "MEMORY_HEADER",
    "SESSION_HEADER",
    "USER_HEADER",
    "ProxyConfig",
]

#: Who the client is (else the request body's ``user`` field).
USER_HEADER = "X-Stratamem-User"
#: Which of the user's conversations this is (else ``memory.hook.DEFAULT_SESSION``).
SESSION_HEADER = "X-Stratamem-Session"
#: On every response of a request with a user: ``ok``, or ``degraded`` when memory failed and
#: the client's own messages were forwarded. The reply is recorded after the response has gone
#: out: a failure there is logged and counted (``/healthz``), not told in this header.
MEMORY_HEADER = "X-Stratamem-Memory"


@dataclass(frozen=True)
class ProxyConfig:
    """How the proxy reaches its upstream and who may use it.

    Attributes:
        upstream: the upstream's OpenAI-compatible base URL, ending with ``/v1`` as the
            ``openai`` client's ``base_url`` does.
        api_key: sent to the upstream as a bearer token; without one, the client's own
            ``Authorization`` header is forwarded (unless it is the proxy's token).
        token: when set, every ``/v1`` request needs ``Authorization: Bearer <token>``.
        timeout: seconds to wait for the upstream (reading a response included).
        connect_timeout: seconds to wait for a connection to the upstream.
        lookback: how many stored messages a request is compared with to find its new ones.
        record_after_answer: store the reply while the answer goes out (the client does not
            wait for it; a later request of the session waits, on this proxy). ``False``
            stores it before the answer (before ``[DONE]`` in a stream), for several proxies
            that share a session's requests without routing them to one proxy.
    """

    upstream: str
    api_key: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    timeout: float = 600.0
    connect_timeout: float = 10.0
    lookback: int = LOOKBACK
    record_after_answer: bool = True

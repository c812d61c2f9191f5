"""What a memory proxy is configured with, and the headers it reads and writes."""

from __future__ import annotations

from dataclasses import dataclass, field

from memory.hook import LOOKBACK

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "END_SESSION_HEADER",
    "MEMORY_HEADER",
    "SESSION_HEADER",
    "USER_HEADER",
    "ProxyConfig",
]

#: Who the client is (else the request body's ``user`` field).
USER_HEADER = "X-Stratamem-User"
#: Which of the user's conversations this is (else ``memory.hook.DEFAULT_SESSION``).
SESSION_HEADER = "X-Stratamem-Session"
#: ``1`` (or ``true``) ends the session once the request's reply is stored: its messages not
#: archived yet become cards (``Memory.end_session``). The same session id may go on afterwards.
END_SESSION_HEADER = "X-Stratamem-End-Session"
#: On every response of a request with a user: ``ok``, or ``degraded`` when memory failed and
#: the client's own messages were forwarded. The reply is recorded after the response has gone
#: out: a failure there is logged and counted (``/healthz``), not told in this header.
MEMORY_HEADER = "X-Stratamem-Memory"
#: The largest request body the proxy reads (32 MiB): a long history with a few images fits;
#: a larger body is a 413 before it is read.
DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True)
class ProxyConfig:
    """How the proxy reaches its upstream and who may use it.

    Attributes:
        upstream: the upstream's OpenAI-compatible base URL, ending with ``/v1`` as the
            ``openai`` client's ``base_url`` does.
        api_key: sent to the upstream as a bearer token. Without one, nothing is sent with
            keys required (the client's ``Authorization`` is its stratamem key), and the
            client's own ``Authorization`` with ``require_keys`` off.
        require_keys: every ``/v1`` request needs a stratamem key (``memory.proxy.access``);
            ``False`` (``--no-auth``) serves whoever reaches the port, as any user named.
        max_body_bytes: the largest request body read; a larger one is a 413.
        timeout: seconds to wait for the upstream (reading a response included).
        connect_timeout: seconds to wait for a connection to the upstream.
        lookback: how many stored messages a request is compared with to find its new ones.
        record_after_answer: store the reply while the answer goes out (the client does not
            wait for it; a later request of the session waits, on this proxy). ``False``
            stores it before the answer (before ``[DONE]`` in a stream), for several proxies
            that share a session's requests without routing them to one proxy.
        worker: run a background worker thread while serving, for the jobs of every session
            (folds, and the cards of what was stored: another session of the user recalls a
            message within ``cards.debounce_seconds``). ``False`` leaves them to
            ``stratamem worker`` processes.
    """

    upstream: str
    api_key: str | None = field(default=None, repr=False)
    require_keys: bool = True
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    timeout: float = 600.0
    connect_timeout: float = 10.0
    lookback: int = LOOKBACK
    record_after_answer: bool = True
    worker: bool = True

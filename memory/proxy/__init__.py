"""``stratamem serve``: an OpenAI-compatible memory proxy in front of any upstream endpoint.

A client sends its usual chat completion request plus who it is; the proxy stores the new
messages, sends the assembled context instead of the client's history, stores the reply, and
answers with the upstream's response unchanged (streamed or not). Built on Starlette (served by
uvicorn) with ``httpx`` for the upstream.
"""

from memory.proxy.app import MemoryProxy, create_app
from memory.proxy.config import (
    END_SESSION_HEADER,
    MEMORY_HEADER,
    SESSION_HEADER,
    USER_HEADER,
    ProxyConfig,
)

__all__ = [
    "END_SESSION_HEADER",
    "MEMORY_HEADER",
    "SESSION_HEADER",
    "USER_HEADER",
    "MemoryProxy",
    "ProxyConfig",
    "create_app",
]

"""The names the proxy and the hook export, pinned: changing them is a decision, not an accident."""

import memory.hook
import memory.proxy


def test_the_proxy_exports() -> None:
    assert sorted(memory.proxy.__all__) == [
        "END_SESSION_HEADER",
        "MEMORY_HEADER",
        "MemoryProxy",
        "ProxyConfig",
        "SESSION_HEADER",
        "USER_HEADER",
        "create_app",
    ]
    assert all(hasattr(memory.proxy, name) for name in memory.proxy.__all__)


def test_the_hook_exports() -> None:
    assert sorted(memory.hook.__all__) == [
        "DEFAULT_SESSION",
        "LOOKBACK",
        "Request",
        "context_for",
        "count_stored",
        "fingerprint",
        "record_reply",
        "split_request",
    ]
    assert all(hasattr(memory.hook, name) for name in memory.hook.__all__)

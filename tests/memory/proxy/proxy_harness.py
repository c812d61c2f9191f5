"""What the proxy tests share: fixtures (a fake upstream, a proxy over a real ``Memory``, real
clients), their types, and small readers.

A test module takes the fixtures with ``from proxy_harness import *``: a ``conftest.py`` here
would take the module name ``conftest`` from the root one, which other tests import from.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest
from served import Served
from upstream_fake import FakeUpstream

from memory import Memory, Settings
from memory.proxy import MemoryProxy, ProxyConfig
from memory.proxy.keys import KeyRing
from retrieval import MINILM_NAME, HashingEmbedder
from storage import Database
from storage.proxy_keys import ProxyKeyStore

__all__ = [
    "MakeClient",
    "MakeProxy",
    "admin_key",
    "contents",
    "make_client",
    "make_proxy",
    "memory",
    "proxy_database",
    "recorded",
    "stored",
    "upstream",
    "who",
]

#: ``make_proxy(mem=None, **config) -> "/v1" URL`` (the fixture below; no worker thread unless
#: ``worker=True``).
MakeProxy = Callable[..., str]
#: ``make_client(url, api_key=admin key, **headers) -> openai.OpenAI`` (the fixture below).
MakeClient = Callable[..., openai.OpenAI]


def who(user_id: str, session_id: str) -> dict[str, str]:
    """The headers that name a request's user and session."""
    return {"X-Stratamem-User": user_id, "X-Stratamem-Session": session_id}


#: The proxies serving in the running test. A proxy stores a reply after its answer has gone
#: out; ``stored`` waits for those recordings (not for a time) before it reads.
_SERVING: list[MemoryProxy] = []
#: The longest ``stored`` waits for recordings, so a stuck one fails the test instead of hanging.
RECORDING_LIMIT_S = 30.0


def recorded() -> None:
    """Return once every serving proxy has stored the replies it answered."""
    for proxy in _SERVING:
        assert proxy.recordings.wait(RECORDING_LIMIT_S), "a reply's recording never finished"


def stored(memory: Memory, user_id: str, session_id: str) -> list[dict[str, Any]]:
    """The session's stored messages as OpenAI dicts (the replies in flight stored first)."""
    recorded()
    return [m.payload for m in memory.history(user_id=user_id, session_id=session_id)]


def contents(memory: Memory, user_id: str, session_id: str) -> list[Any]:
    """The ``content`` of each stored message."""
    return [message.get("content") for message in stored(memory, user_id, session_id)]


@pytest.fixture(scope="module")
def proxy_database(database_url: str) -> Iterator[Database]:
    """This module's own handle on the shared database, so no test disposes the shared one."""
    with Database.open(database_url) as opened:
        yield opened


@pytest.fixture(scope="module")
def admin_key(proxy_database: Database) -> str:
    """An admin key of the shared database: it may name any user (``make_client``'s default)."""
    key, _ = KeyRing(ProxyKeyStore(proxy_database)).create(user_id=None, label="proxy tests")
    return key


@pytest.fixture
def memory(proxy_database: Database) -> Memory:
    """A ``Memory`` on the shared database; cards embedded by the fast hashing fake."""
    settings = Settings(summary={"debounce_seconds": 0})
    return Memory(proxy_database, settings, embedder=HashingEmbedder(name=MINILM_NAME))


@pytest.fixture
def upstream() -> Iterator[tuple[FakeUpstream, str]]:
    """The fake upstream, served, and its ``/v1`` URL."""
    fake = FakeUpstream()
    with Served(fake.app) as served:
        yield fake, f"{served.url}/v1"


@pytest.fixture
def make_proxy(memory: Memory, upstream: tuple[FakeUpstream, str]) -> Iterator[Callable[..., str]]:
    """Serve a proxy (over ``memory`` and the fake upstream unless told otherwise); its URL."""
    servers: list[Served] = []

    def make(mem: Memory | None = None, **config: Any) -> str:
        # No worker thread unless a test asks for one (``worker=True``): it would run the jobs
        # of every test's users in the shared database.
        settings: dict[str, Any] = {
            "upstream": upstream[1],
            "api_key": "sk-upstream",
            "worker": False,
            **config,
        }
        proxy = MemoryProxy(mem or memory, ProxyConfig(**settings))
        _SERVING.append(proxy)
        served = Served(proxy.app)
        servers.append(served.__enter__())
        return f"{served.url}/v1"

    yield make
    for served in servers:
        served.__exit__(None, None, None)
    _SERVING.clear()


@pytest.fixture
def make_client(admin_key: str) -> Callable[..., openai.OpenAI]:
    """A real ``openai`` client for a proxy URL, with the admin key unless told another;
    no retries, so each call is one request."""

    def make(base_url: str, *, api_key: str = admin_key, **headers: str) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=base_url, api_key=api_key, max_retries=0, default_headers=headers
        )

    return make

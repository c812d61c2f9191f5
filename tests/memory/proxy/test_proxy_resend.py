"""A client that resends its whole history, after one message memory could not take as sent.

Memory repairs what it cannot store (a lone surrogate, a message alone larger than the history
budget) the same way every time, so the resent message is recognised as stored and memory stays
on for the rest of the conversation; an input too large for the window is one clear 400.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from proxy_harness import *  # noqa: F403 - the fixtures
from proxy_harness import MakeProxy, contents, stored, who
from upstream_fake import FakeUpstream, Text

from memory import Memory, Settings
from retrieval import MINILM_NAME, HashingEmbedder
from storage import Database

MARKER = "tokens cut by stratamem"
#: About 3,000 tokens: more than the small memory's whole history budget.
LONG = " ".join(f"word{number}" for number in range(1_500))


@pytest.fixture
def small(proxy_database: Database) -> Memory:
    """A memory with a history budget of about 1,700 tokens."""
    settings = Settings(context_window=2_048, max_output=256, summary={"debounce_seconds": 0})
    return Memory(proxy_database, settings, embedder=HashingEmbedder(name=MINILM_NAME))


class Client:
    """A client that keeps its whole history and sends all of it every time."""

    def __init__(self, url: str, key: str, user_id: str, session_id: str) -> None:
        self.history: list[dict[str, Any]] = []
        self._http = httpx.Client(timeout=60)
        self._url = url + "/chat/completions"
        self._headers = {"Authorization": f"Bearer {key}", **who(user_id, session_id)}

    def say(self, content: str) -> httpx.Response:
        """Send the history with a new user message; keep the reply when there is one."""
        self.history.append({"role": "user", "content": content})
        body = json.dumps({"model": "fake-model", "messages": self.history}).encode()
        response = self._http.post(self._url, content=body, headers=self._headers)
        if response.status_code == 200:
            self.history.append(response.json()["choices"][0]["message"])
        return response

    def close(self) -> None:
        self._http.close()


@pytest.fixture
def client_of(admin_key: str, user_id: str, session_id: str) -> Iterator[Any]:
    clients: list[Client] = []

    def make(url: str) -> Client:
        clients.append(Client(url, admin_key, user_id, session_id))
        return clients[-1]

    yield make
    for client in clients:
        client.close()


def test_a_lone_surrogate_is_stored_repaired_and_memory_stays_on(
    make_proxy: MakeProxy,
    client_of: Any,
    upstream: tuple[FakeUpstream, str],
    memory: Memory,
    user_id: str,
    session_id: str,
) -> None:
    client = client_of(make_proxy())
    assert client.say("first").headers["x-stratamem-memory"] == "ok"

    broken = client.say("half a pair: \ud800 here")
    after = client.say("after")
    again = client.say("again")

    assert [r.status_code for r in (broken, after, again)] == [200, 200, 200]
    assert [r.headers["x-stratamem-memory"] for r in (broken, after, again)] == ["ok"] * 3
    # The upstream got the repaired text too (it refuses a lone surrogate).
    assert upstream[0].bodies[1]["messages"][-1]["content"] == "half a pair: \ufffd here"
    assert contents(memory, user_id, session_id) == [
        "first",
        "echo: first",
        "half a pair: \ufffd here",
        "echo: half a pair: \ufffd here",
        "after",
        "echo: after",
        "again",
        "echo: again",
    ]


def test_an_input_over_the_budget_is_one_400_then_it_is_stored_cut_and_memory_goes_on(
    make_proxy: MakeProxy,
    client_of: Any,
    upstream: tuple[FakeUpstream, str],
    small: Memory,
    user_id: str,
    session_id: str,
) -> None:
    client = client_of(make_proxy(small))
    client.say("first")

    too_long = client.say(LONG)

    assert too_long.status_code == 400
    error = too_long.json()["error"]
    assert error["code"] == "context_length_exceeded" and error["type"] == "invalid_request_error"
    assert "budget" in error["message"] and "word1" not in error["message"]
    assert len(upstream[0].bodies) == 1  # nothing forwarded
    assert contents(small, user_id, session_id) == ["first", "echo: first"]

    # The client kept the long message in its history and goes on.
    after = client.say("a shorter question")
    again = client.say("and one more")

    assert [r.status_code for r in (after, again)] == [200, 200]
    assert [r.headers["x-stratamem-memory"] for r in (after, again)] == ["ok", "ok"]
    kept = stored(small, user_id, session_id)
    assert [m["content"] for m in kept[:2]] == ["first", "echo: first"]
    assert kept[2]["role"] == "user" and MARKER in kept[2]["content"]
    assert kept[2]["content"].startswith("word0 word1") and kept[2]["content"].endswith("word1499")
    assert [m["content"] for m in kept[3:]] == [
        "a shorter question",
        "echo: a shorter question",
        "and one more",
        "echo: and one more",
    ]


def test_a_reply_over_the_budget_is_stored_cut_and_its_resend_is_recognised(
    make_proxy: MakeProxy,
    client_of: Any,
    upstream: tuple[FakeUpstream, str],
    small: Memory,
    user_id: str,
    session_id: str,
) -> None:
    upstream[0].script(Text(LONG))
    url = make_proxy(small)
    client = client_of(url)

    first = client.say("tell me everything")
    after = client.say("thanks")

    assert first.json()["choices"][0]["message"]["content"] == LONG  # the client gets it whole
    assert after.headers["x-stratamem-memory"] == "ok"
    kept = stored(small, user_id, session_id)
    assert [m["role"] for m in kept] == ["user", "assistant", "user", "assistant"]
    assert MARKER in kept[1]["content"]
    assert [kept[0]["content"], kept[2]["content"], kept[3]["content"]] == [
        "tell me everything",
        "thanks",
        "echo: thanks",
    ]
    assert httpx.get(url.removesuffix("/v1") + "/healthz").json()["memory_failures"] == 0

"""The proxy when something fails: the upstream, its network, the database.

A failure of the upstream reaches the client as the upstream sent it; a failure of memory never
blocks a request; and nothing that was stored is lost.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from proxy_harness import *  # noqa: F403 - the fixtures
from proxy_harness import MakeClient, MakeProxy, contents, recorded, who
from upstream_fake import Calls, Fail, FakeUpstream, closed_port_url

from memory import Memory
from memory.proxy.keys import KeyRing
from retrieval import HashingEmbedder
from storage import Database
from storage.engine import stop_embedded
from storage.proxy_keys import ProxyKeyStore


@pytest.mark.parametrize("stream", [False, True])
def test_an_upstream_error_is_returned_as_sent_and_the_input_stays_stored(
    make_proxy: MakeProxy,
    make_client: MakeClient,
    upstream: tuple[FakeUpstream, str],
    memory: Memory,
    user_id: str,
    session_id: str,
    stream: bool,
) -> None:
    fake, _ = upstream
    fake.script(Fail(429, "slow down, scripted"))
    client = make_client(make_proxy(), **who(user_id, session_id))

    with pytest.raises(openai.RateLimitError) as raised:
        client.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "hi"}], stream=stream
        )

    assert raised.value.status_code == 429
    assert raised.value.body == {
        "message": "slow down, scripted",
        "type": "server_error",
        "code": "scripted",
    }
    assert raised.value.response.headers["x-stratamem-memory"] == "ok"
    assert contents(memory, user_id, session_id) == ["hi"]  # no reply, the input kept


def test_an_unreachable_upstream_is_a_clear_502(
    make_proxy: MakeProxy, make_client: MakeClient, user_id: str, session_id: str
) -> None:
    upstream = closed_port_url()
    client = make_client(make_proxy(upstream=upstream), **who(user_id, session_id))

    with pytest.raises(openai.APIStatusError) as raised:
        client.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "hi"}]
        )

    assert raised.value.status_code == 502
    assert "stratamem proxy: cannot reach the upstream" in raised.value.message
    assert upstream in raised.value.message


def test_an_upstream_that_does_not_answer_in_time_is_a_clear_504(
    make_proxy: MakeProxy,
    make_client: MakeClient,
    upstream: tuple[FakeUpstream, str],
    memory: Memory,
    user_id: str,
    session_id: str,
) -> None:
    fake, _ = upstream
    fake.hold_until(2)  # a lone request is held (up to 30 s): far past the proxy's timeout
    client = make_client(make_proxy(timeout=0.5), **who(user_id, session_id))

    with pytest.raises(openai.APIStatusError) as raised:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    fake.release()

    assert raised.value.status_code == 504
    assert "did not answer in time" in raised.value.message
    assert contents(memory, user_id, session_id) == ["hi"]  # the input is kept for a retry


@pytest.mark.slow
def test_with_the_database_stopped_the_request_is_answered_without_memory_then_heals(
    make_proxy: MakeProxy,
    make_client: MakeClient,
    upstream: tuple[FakeUpstream, str],
    fresh_data_dir: Path,
) -> None:
    fake, _ = upstream
    # By URL, as a database elsewhere is: a Memory on the data folder would start the server
    # again at its next request (see test_proxy_restart.py).
    holder = Database.open(data_dir=fresh_data_dir)
    own = Memory.open(holder.url, embedder=HashingEmbedder())
    key, _ = KeyRing(ProxyKeyStore(own.database)).create(user_id="u")
    # A user key this proxy found valid before the outage still works during it.
    client = make_client(make_proxy(own), api_key=key, **who("u", "s"))
    messages: list[Any] = [{"role": "user", "content": "first"}]
    messages.append(client.chat.completions.create(model="m", messages=messages).choices[0].message)

    recorded()  # the first reply is stored before the database goes away
    stop_embedded((fresh_data_dir / "pg").resolve())
    messages.append({"role": "user", "content": "while the database is down"})
    raw = client.chat.completions.with_raw_response.create(model="m", messages=messages)

    assert raw.headers["x-stratamem-memory"] == "degraded"
    assert raw.parse().choices[0].message.content == "echo: while the database is down"
    # The client's own messages, as it sent them.
    assert [(m["role"], m["content"]) for m in fake.bodies[-1]["messages"]] == [
        ("user", "first"),
        ("assistant", "echo: first"),
        ("user", "while the database is down"),
    ]
    health = httpx.get(str(client.base_url.join("/healthz")))
    assert health.json()["memory_failures"] == 1

    Database.open(data_dir=fresh_data_dir).close()  # the server comes back
    messages.append(raw.parse().choices[0].message)
    messages.append({"role": "user", "content": "after"})
    raw = client.chat.completions.with_raw_response.create(model="m", messages=messages)

    assert raw.headers["x-stratamem-memory"] == "ok"
    # The turn the database missed comes in with the client's history: nothing is lost.
    assert contents(own, "u", "s") == [
        "first",
        "echo: first",
        "while the database is down",
        "echo: while the database is down",
        "after",
        "echo: after",
    ]
    own.close()
    holder.close()


def test_a_history_memory_refuses_is_still_answered_with_the_clients_messages(
    make_proxy: MakeProxy,
    make_client: MakeClient,
    upstream: tuple[FakeUpstream, str],
    memory: Memory,
    user_id: str,
    session_id: str,
) -> None:
    fake, _ = upstream
    client = make_client(make_proxy(), **who(user_id, session_id))
    # A result for a call the session never had: memory refuses it, the upstream decides.
    messages = [{"role": "tool", "tool_call_id": "nowhere", "content": "42"}]

    raw = client.chat.completions.with_raw_response.create(model="m", messages=messages)  # type: ignore[arg-type]

    assert raw.headers["x-stratamem-memory"] == "degraded"
    assert fake.bodies[-1]["messages"] == messages
    assert contents(memory, user_id, session_id) == []


@pytest.mark.parametrize("stream", [False, True])
def test_a_reply_memory_cannot_store_is_answered_then_logged_and_counted(
    make_proxy: MakeProxy,
    make_client: MakeClient,
    upstream: tuple[FakeUpstream, str],
    memory: Memory,
    user_id: str,
    session_id: str,
    stream: bool,
    caplog: Any,
) -> None:
    fake, _ = upstream
    # Two calls with one id: the chat API would refuse this message back, so memory does too.
    fake.script(Calls((("call_1", "secret_tool", "{}"), ("call_1", "secret_tool", "{}"))))
    client = make_client(make_proxy(), **who(user_id, session_id))
    question = [{"role": "user", "content": "a confidential remark"}]

    if stream:
        chunks = list(client.chat.completions.create(model="m", messages=question, stream=True))
        calls = [c for chunk in chunks for c in chunk.choices[0].delta.tool_calls or ()]
        assert [call.id for call in calls if call.id] == ["call_1", "call_1"]
    else:
        raw = client.chat.completions.with_raw_response.create(model="m", messages=question)
        assert raw.headers["x-stratamem-memory"] == "ok"  # the answer went before the failure
        assert [call.id for call in raw.parse().choices[0].message.tool_calls or ()] == [
            "call_1",
            "call_1",
        ]
    recorded()

    health = httpx.get(str(client.base_url.join("/healthz")))
    assert health.json()["memory_failures"] == 1
    assert contents(memory, user_id, session_id) == ["a confidential remark"]  # input kept
    [warning] = [r for r in caplog.records if r.name == "memory.proxy.app"]
    assert "recording the reply" in warning.getMessage()
    assert "confidential" not in caplog.text

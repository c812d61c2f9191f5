"""The proxy's embedded database goes away: the next request starts it again and is served with
memory; and what a client that sends only its new messages loses when an outage lasts.
"""

from __future__ import annotations

from pathlib import Path

import openai
import pytest
from databases import crash_embedded, postmaster
from proxy_harness import *  # noqa: F403 - the fixtures
from proxy_harness import MakeClient, MakeProxy, contents, recorded, who
from upstream_fake import FakeUpstream

from memory import Memory
from memory.proxy.keys import KeyRing
from retrieval import HashingEmbedder
from storage import Database
from storage.engine import stop_embedded
from storage.proxy_keys import ProxyKeyStore


def ask(client: openai.OpenAI, text: str) -> tuple[str, str | None]:
    """Send only the new user message (the client keeps no history); the memory header and
    the reply."""
    raw = client.chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": text}]
    )
    return raw.headers["x-stratamem-memory"], raw.parse().choices[0].message.content


@pytest.mark.parametrize("how", ["immediate", "kill"])
@pytest.mark.slow
def test_the_request_after_the_server_died_starts_it_and_is_served_with_memory(
    make_proxy: MakeProxy,
    make_client: MakeClient,
    upstream: tuple[FakeUpstream, str],
    fresh_data_dir: Path,
    how: str,
) -> None:
    fake, _ = upstream
    folder = (fresh_data_dir / "pg").resolve()
    with Memory.open(data_dir=fresh_data_dir, embedder=HashingEmbedder()) as own:
        key, _ = KeyRing(ProxyKeyStore(own.database)).create(user_id="u")
        client = make_client(make_proxy(own), api_key=key, **who("u", "s"))
        assert ask(client, "first") == ("ok", "echo: first")
        recorded()
        old = crash_embedded(folder, how)

        assert ask(client, "after the crash") == ("ok", "echo: after the crash")

        # The model saw the turn stored before the crash: memory, not just the new message.
        assert [m["content"] for m in fake.bodies[-1]["messages"]] == [
            "first",
            "echo: first",
            "after the crash",
        ]
        assert contents(own, "u", "s") == [
            "first",
            "echo: first",
            "after the crash",
            "echo: after the crash",
        ]
        restarted = postmaster(folder)
        assert restarted is not None and restarted.pid != old


@pytest.mark.slow
def test_a_client_sending_only_new_messages_loses_the_turn_of_an_outage(
    make_proxy: MakeProxy,
    make_client: MakeClient,
    fresh_data_dir: Path,
) -> None:
    # An outage the proxy cannot end: a database it reaches by URL (here the embedded one,
    # stopped while a handle of the test keeps it from being started by the proxy).
    holder = Database.open(data_dir=fresh_data_dir)
    assert holder.data_folder is not None
    with Memory.open(holder.url, embedder=HashingEmbedder()) as own:
        key, _ = KeyRing(ProxyKeyStore(own.database)).create(user_id="u")
        client = make_client(make_proxy(own), api_key=key, **who("u", "s"))
        assert ask(client, "first") == ("ok", "echo: first")
        recorded()
        stop_embedded(holder.data_folder)

        assert ask(client, "during the outage") == ("degraded", "echo: during the outage")
        Database.open(data_dir=fresh_data_dir).close()  # the server is back
        assert ask(client, "after") == ("ok", "echo: after")

        # The degraded turn was never stored, and this client never sends it again.
        assert contents(own, "u", "s") == ["first", "echo: first", "after", "echo: after"]
    holder.close()

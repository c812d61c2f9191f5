"""A ``forget`` while the proxy waits for the upstream: the reply is not stored afterwards into a
session of the same name, and the user's next request starts from nothing."""

from __future__ import annotations

import threading
from collections.abc import Callable

from proxy_harness import *  # noqa: F403 - the fixtures
from proxy_harness import MakeClient, MakeProxy, contents, who
from upstream_fake import FakeUpstream

from memory import Memory

#: A bound for waits on things that happen within a second; reached only when a test fails.
WAIT_S = 60.0


def wait_until(condition: Callable[[], bool], what: str) -> None:
    tick = threading.Event()
    for _ in range(int(WAIT_S / 0.02)):
        if condition():
            return
        tick.wait(0.02)
    raise AssertionError(f"timed out waiting until {what}")


def test_a_reply_answered_while_its_user_was_forgotten_is_not_stored(
    make_proxy: MakeProxy,
    make_client: MakeClient,
    upstream: tuple[FakeUpstream, str],
    memory: Memory,
    user_id: str,
) -> None:
    fake, _ = upstream
    client = make_client(make_proxy(), **who(user_id, "s"))
    secret = [{"role": "user", "content": "My PIN is 4711."}]
    fake.hold_until(2)  # the one request waits until released
    answering = threading.Thread(
        target=client.chat.completions.create, kwargs={"model": "m", "messages": secret}
    )
    answering.start()
    wait_until(lambda: len(fake.received) == 1, "the upstream has the request")

    memory.forget(user_id=user_id)
    fake.release()
    answering.join(WAIT_S)

    assert not answering.is_alive()
    assert contents(memory, user_id, "s") == []  # the reply's recording found the session gone
    hello = [{"role": "user", "content": "hello, new conversation"}]
    client.chat.completions.create(model="m", messages=hello)
    assert contents(memory, user_id, "s") == [
        "hello, new conversation",
        "echo: hello, new conversation",
    ]

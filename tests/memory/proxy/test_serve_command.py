"""``stratamem serve`` as a process: says where it listens, serves with memory, stops on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from proxy_harness import *  # noqa: F403 - the fixtures
from proxy_harness import who
from upstream_fake import FakeUpstream

from memory import Memory
from memory.cli.app import build_parser
from memory.cli.serve import DEFAULT_PORT

REPO = Path(__file__).resolve().parents[3]


def test_the_defaults_are_localhost_and_the_configured_upstream() -> None:
    args = build_parser().parse_args(["serve"])

    assert (args.host, args.port, args.upstream, args.token) == (
        "127.0.0.1",
        DEFAULT_PORT,
        None,
        None,
    )


@pytest.fixture
def serve(database_url: str, upstream: tuple[FakeUpstream, str]) -> Iterator[subprocess.Popen[str]]:
    """``stratamem serve --port 0`` on the shared database, the fake upstream behind it."""
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "STRATAMEM_DATABASE_URL": database_url,
        "STRATAMEM_CARDS__ENABLED": "false",
        "OPENAI_BASE_URL": upstream[1],
        "OPENAI_API_KEY": "sk-upstream-from-env",
        "STRATAMEM_PROXY_TOKEN": "proxy-token",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "memory.cli", "serve", "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    yield process
    if process.poll() is None:
        process.kill()
        process.wait()


def test_serve_proxies_with_memory_and_stops_cleanly_on_sigterm(
    serve: subprocess.Popen[str],
    upstream: tuple[FakeUpstream, str],
    database_url: str,
    user_id: str,
    session_id: str,
) -> None:
    fake, upstream_url = upstream
    assert serve.stdout is not None
    first = serve.stdout.readline().split()
    assert first[:3] == ["stratamem", "proxy", "on"] and first[4:] == [
        "->",
        upstream_url,
        "(token",
        "required)",
    ]
    client = openai.OpenAI(
        base_url=first[3],
        api_key="proxy-token",
        max_retries=0,
        default_headers=who(user_id, session_id),
    )

    reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    serve.send_signal(signal.SIGTERM)

    assert serve.wait() == 0
    assert reply.choices[0].message.content == "echo: hi"
    assert fake.received[0].headers["authorization"] == "Bearer sk-upstream-from-env"
    with Memory.open(database_url, cards={"enabled": False}) as mem:
        history = mem.history(user_id=user_id, session_id=session_id)
    assert [m.payload["content"] for m in history] == ["hi", "echo: hi"]

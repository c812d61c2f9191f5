"""``stratamem serve`` as a process: says where it listens, serves with memory, stops on SIGTERM.

Keys are required unless ``--no-auth`` is given (which warns); the removed shared token is
refused with a message saying what replaced it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import openai
import pytest
from proxy_harness import *  # noqa: F403 - the fixtures
from proxy_harness import who
from upstream_fake import FakeUpstream

from memory import Memory
from memory.cli.app import build_parser
from memory.cli.serve import DEFAULT_PORT
from memory.proxy.keys import KeyRing
from storage import Database
from storage.proxy_keys import ProxyKeyStore

REPO = Path(__file__).resolve().parents[3]

Serve = Callable[..., subprocess.Popen[str]]


def test_the_defaults_are_localhost_the_configured_upstream_and_keys_required() -> None:
    args = build_parser().parse_args(["serve"])

    assert (args.host, args.port, args.upstream, args.no_auth) == (
        "127.0.0.1",
        DEFAULT_PORT,
        None,
        False,
    )


@pytest.fixture
def serve(database_url: str, upstream: tuple[FakeUpstream, str]) -> Iterator[Serve]:
    """``serve(*arguments, **environment)``: ``stratamem serve --port 0 --no-worker`` on the
    shared database, the fake upstream behind it."""
    processes: list[subprocess.Popen[str]] = []

    def start(*arguments: str, **environment: str) -> subprocess.Popen[str]:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("STRATAMEM_", "OPENAI_"))},
            "PYTHONPATH": str(REPO),
            "STRATAMEM_DATABASE_URL": database_url,
            "STRATAMEM_CARDS__ENABLED": "false",
            "OPENAI_BASE_URL": upstream[1],
            "OPENAI_API_KEY": "sk-upstream-from-env",
            **environment,
        }
        # No worker thread: it would run the jobs other tests left in the shared database,
        # whose summaries would go to this test's upstream.
        command = ["serve", "--port", "0", "--no-worker", *arguments]
        process = subprocess.Popen(
            [sys.executable, "-m", "memory.cli", *command],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        processes.append(process)
        return process

    yield start
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait()


def listening_on(process: subprocess.Popen[str], upstream_url: str) -> tuple[str, str]:
    """The ``/v1`` URL from the first line, and what the line says about access."""
    assert process.stdout is not None
    first = process.stdout.readline().split()
    assert first[:3] == ["stratamem", "proxy", "on"] and first[4:6] == ["->", upstream_url]
    return first[3], " ".join(first[6:])


@pytest.mark.slow
def test_serve_with_its_defaults_answers_401_without_a_key_and_serves_a_user_key(
    serve: Serve,
    upstream: tuple[FakeUpstream, str],
    database: Database,
    database_url: str,
    user_id: str,
    session_id: str,
) -> None:
    fake, upstream_url = upstream
    key, _ = KeyRing(ProxyKeyStore(database)).create(user_id=user_id)
    process = serve()
    url, access = listening_on(process, upstream_url)
    hello = [{"role": "user", "content": "hi"}]

    anonymous = httpx.post(url + "/chat/completions", json={"model": "m", "messages": hello})
    client = openai.OpenAI(base_url=url, api_key=key, max_retries=0)
    reply = client.chat.completions.create(model="m", messages=hello)  # type: ignore[arg-type]
    other = openai.OpenAI(
        base_url=url, api_key=key, max_retries=0, default_headers=who("someone-else", "s")
    )
    with pytest.raises(openai.PermissionDeniedError):
        other.chat.completions.create(model="m", messages=hello)  # type: ignore[arg-type]
    process.send_signal(signal.SIGTERM)

    assert process.wait() == 0
    assert access == "(keys required, no worker: run stratamem worker)"
    assert anonymous.status_code == 401
    assert reply.choices[0].message.content == "echo: hi"
    assert len(fake.received) == 1
    assert fake.received[0].headers["authorization"] == "Bearer sk-upstream-from-env"
    with Memory.open(database_url, cards={"enabled": False}) as mem:
        history = mem.history(user_id=user_id, session_id="default")
        assert mem.history(user_id="someone-else", session_id="s") == []
    assert [m.payload["content"] for m in history] == ["hi", "echo: hi"]


@pytest.mark.slow
def test_serve_without_auth_warns_and_serves_anyone(
    serve: Serve, upstream: tuple[FakeUpstream, str], user_id: str, session_id: str
) -> None:
    process = serve("--no-auth")
    url, access = listening_on(process, upstream[1])

    answer = httpx.post(
        url + "/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        headers=who(user_id, session_id),
        timeout=60,
    )
    process.send_signal(signal.SIGTERM)
    _, errors = process.communicate(timeout=60)

    assert access == "(NO AUTH, no worker: run stratamem worker)"
    assert answer.status_code == 200
    assert "WARNING: --no-auth" in errors and "every user" in errors


@pytest.mark.parametrize(
    ("arguments", "environment"),
    [(("--token", "t"), {}), ((), {"STRATAMEM_PROXY_TOKEN": "t"})],
    ids=["--token", "STRATAMEM_PROXY_TOKEN"],
)
@pytest.mark.slow
def test_the_removed_shared_token_is_refused_with_what_replaced_it(
    serve: Serve, arguments: tuple[str, ...], environment: dict[str, str]
) -> None:
    process = serve(*arguments, **environment)
    out, errors = process.communicate(timeout=60)

    assert process.returncode == 2
    assert out == ""
    assert "no longer supported" in errors and "stratamem keys create --user" in errors

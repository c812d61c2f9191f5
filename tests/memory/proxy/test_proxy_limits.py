"""Bodies the proxy will not read: too large (413) or nested too deeply (400), OpenAI-shaped.

The size is checked while the body arrives, whether it declares its length or comes in chunks;
nothing is stored or forwarded, and what the session stored before is intact.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from proxy_harness import *  # noqa: F403 - the fixtures
from proxy_harness import MakeProxy, stored, who
from upstream_fake import FakeUpstream

from memory import Memory
from memory.cli.app import build_parser
from memory.proxy import ProxyConfig
from memory.proxy.config import DEFAULT_MAX_BODY_BYTES

LIMIT = 100_000
EARLIER = [
    {"role": "user", "content": "the earlier question"},
    {"role": "assistant", "content": "the earlier answer"},
]


def body_of(size: int) -> bytes:
    """A chat request of exactly ``size`` bytes."""
    frame = json.dumps({"model": "m", "messages": [{"role": "user", "content": ""}]}).encode()
    content = "x" * (size - len(frame))
    raw = json.dumps({"model": "m", "messages": [{"role": "user", "content": content}]}).encode()
    assert len(raw) == size
    return raw


@pytest.fixture
def send(
    make_proxy: MakeProxy, admin_key: str, memory: Memory, user_id: str, session_id: str
) -> Iterator[Any]:
    """``send(content)``: POST bytes (or an iterator of chunks) to a proxy limited to LIMIT."""
    memory.record(user_id=user_id, session_id=session_id, messages=EARLIER)
    url = make_proxy(max_body_bytes=LIMIT) + "/chat/completions"
    headers = {"Authorization": f"Bearer {admin_key}", **who(user_id, session_id)}
    with httpx.Client(timeout=60) as client:
        yield lambda content: client.post(url, content=content, headers=headers)
    assert stored(memory, user_id, session_id)[:2] == EARLIER


def refused(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", code)
    assert error["message"].startswith("stratamem proxy: ")


def test_a_body_of_the_limit_is_read(
    send: Any, memory: Memory, user_id: str, session_id: str
) -> None:
    response = send(body_of(LIMIT))

    assert response.status_code == 200
    assert response.headers["x-stratamem-memory"] == "ok"
    assert len(stored(memory, user_id, session_id)) == 4


@pytest.mark.parametrize("size", [LIMIT + 1, 20 * LIMIT], ids=["one byte over", "20 times"])
def test_a_larger_body_is_a_413_before_it_is_read(
    send: Any,
    upstream: tuple[FakeUpstream, str],
    memory: Memory,
    user_id: str,
    session_id: str,
    size: int,
) -> None:
    response = send(body_of(size))

    refused(response, 413, "request_too_large")
    assert f"{LIMIT:,} bytes" in response.json()["error"]["message"]
    assert upstream[0].received == []
    assert stored(memory, user_id, session_id) == EARLIER


def test_a_body_sent_in_chunks_is_cut_off_at_the_limit(
    send: Any, upstream: tuple[FakeUpstream, str], memory: Memory, user_id: str, session_id: str
) -> None:
    raw = body_of(3 * LIMIT)
    chunks = (raw[start : start + 4_096] for start in range(0, len(raw), 4_096))

    response = send(chunks)  # no Content-Length: chunked transfer encoding

    refused(response, 413, "request_too_large")
    assert upstream[0].received == []
    assert stored(memory, user_id, session_id) == EARLIER


@pytest.mark.parametrize("where", ["body", "messages"])
def test_json_nested_too_deeply_is_a_400(
    send: Any, upstream: tuple[FakeUpstream, str], where: str
) -> None:
    deep = b"[" * 20_000 + b"]" * 20_000
    if where == "body":
        raw = deep
    else:
        raw = b'{"model": "m", "messages": [{"role": "user", "content": ' + deep + b"}]}"

    response = send(raw)

    refused(response, 400, "nested_too_deeply")
    assert upstream[0].received == []


def test_the_limit_is_32_mib_unless_configured() -> None:
    assert DEFAULT_MAX_BODY_BYTES == 32 * 1024 * 1024
    assert ProxyConfig(upstream="http://u/v1").max_body_bytes == DEFAULT_MAX_BODY_BYTES
    assert build_parser().parse_args(["serve"]).max_body_bytes == DEFAULT_MAX_BODY_BYTES
    assert build_parser().parse_args(["serve", "--max-body-bytes", "1000"]).max_body_bytes == 1000

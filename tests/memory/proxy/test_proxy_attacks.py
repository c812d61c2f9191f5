"""What a careless or hostile client sends the proxy, and what it gets back.

Each request gets a clear answer: a 4xx in the OpenAI error shape from the proxy, or the
upstream's own answer where the proxy passes the request through as documented; never a 500.
What the session stored before is never lost or changed, and no log line at info level holds
message content or keys.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from proxy_harness import *  # noqa: F403 - the fixtures
from proxy_harness import MakeProxy, recorded, stored, who
from upstream_fake import FakeUpstream

from memory import Memory

EARLIER = [
    {"role": "user", "content": "the earlier question"},
    {"role": "assistant", "content": "the earlier answer"},
]
SECRET = "a confidential remark"


@pytest.fixture
def session(memory: Memory, user_id: str, session_id: str) -> Iterator[tuple[str, str]]:
    """A session that holds two messages already; they must come out of every test intact."""
    memory.record(user_id=user_id, session_id=session_id, messages=EARLIER)
    yield user_id, session_id
    assert stored(memory, user_id, session_id)[:2] == EARLIER


@pytest.fixture
def post(make_proxy: MakeProxy, admin_key: str) -> Iterator[Any]:
    """``post(body, headers=..., content=...)``: a raw POST to the proxy's chat completions,
    with the admin key."""
    url = make_proxy() + "/chat/completions"
    with httpx.Client(timeout=60) as client:

        def send(
            body: Any = None, *, content: bytes | None = None, **headers: str
        ) -> httpx.Response:
            data = content if content is not None else json.dumps(body).encode()
            headers = {"Authorization": f"Bearer {admin_key}", **headers}
            return client.post(url, content=data, headers=headers)

        yield send


def chat(*messages: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"model": "fake-model", "messages": list(messages), **fields}


def error_of(response: httpx.Response) -> dict[str, Any]:
    """The OpenAI-shaped error of a response (its ``error`` object)."""
    error = response.json()["error"]
    assert isinstance(error["message"], str) and error["type"]
    return dict(error)


@pytest.mark.parametrize("header", ["X-Stratamem-User", "X-Stratamem-Session"])
def test_an_id_too_long_to_store_is_a_400_that_does_not_quote_it(
    post: Any,
    session: tuple[str, str],
    upstream: tuple[FakeUpstream, str],
    memory: Memory,
    header: str,
) -> None:
    headers = who(*session) | {header: "x" * 300}

    response = post(chat({"role": "user", "content": "hi"}), **headers)

    assert response.status_code == 400
    error = error_of(response)
    assert header in error["message"] and "300 characters" in error["message"]
    assert "xxxx" not in error["message"]
    assert upstream[0].received == []  # refused before anything was forwarded
    assert stored(memory, *session) == EARLIER


@pytest.mark.parametrize("header", ["X-Stratamem-User", "X-Stratamem-Session"])
def test_a_100_kb_header_is_refused_by_the_http_server_with_a_400(
    post: Any, session: tuple[str, str], upstream: tuple[FakeUpstream, str], header: str
) -> None:
    # uvicorn refuses a request whose headers pass 16 kB before the proxy sees it.
    headers = who(*session) | {header: "x" * 100_000}

    response = post(chat({"role": "user", "content": "hi"}), **headers)

    assert response.status_code == 400
    assert "Traceback" not in response.text and "xxxx" not in response.text
    assert upstream[0].received == []


@pytest.mark.parametrize("bad", ["\x00", "\ud800"], ids=["nul", "lone surrogate"])
def test_a_user_field_that_cannot_be_stored_is_a_400(
    post: Any, session: tuple[str, str], upstream: tuple[FakeUpstream, str], bad: str
) -> None:
    body = chat({"role": "user", "content": "hi"}, user=f"someone{bad}")
    raw = json.dumps(body).encode()  # ensure_ascii: the surrogate travels as \\ud800

    response = post(content=raw, **{"X-Stratamem-Session": session[1]})

    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_user"
    assert "the body's user" in error_of(response)["message"]
    assert upstream[0].received == []


def test_a_nul_in_a_header_is_refused_by_the_http_client_or_server(
    make_proxy: MakeProxy, session: tuple[str, str], upstream: tuple[FakeUpstream, str]
) -> None:
    url = make_proxy() + "/chat/completions"
    body = json.dumps(chat({"role": "user", "content": "hi"})).encode()
    try:
        response = httpx.post(url, content=body, headers={"X-Stratamem-User": "a\x00b"})
    except httpx.LocalProtocolError:
        pass  # httpx will not send it: fine, nothing reached the proxy
    else:
        assert response.status_code == 400
    assert upstream[0].received == []


def test_nul_characters_in_content_are_stored_and_given_back_exactly(
    post: Any, session: tuple[str, str], memory: Memory
) -> None:
    question = {"role": "user", "content": "a\x00b \\u0000 c"}

    response = post(chat(*EARLIER, question), **who(*session))

    assert response.status_code == 200
    assert response.headers["x-stratamem-memory"] == "ok"
    assert response.json()["choices"][0]["message"]["content"] == "echo: a\x00b \\u0000 c"
    assert stored(memory, *session)[2:] == [
        question,
        {"role": "assistant", "content": "echo: a\x00b \\u0000 c"},
    ]


def test_a_lone_surrogate_in_content_is_stored_repaired(
    post: Any,
    session: tuple[str, str],
    upstream: tuple[FakeUpstream, str],
    memory: Memory,
    caplog: Any,
) -> None:
    caplog.set_level("INFO")
    body = chat(*EARLIER, {"role": "user", "content": f"{SECRET} \ud800"})

    response = post(content=json.dumps(body).encode(), **who(*session))

    # No database and no upstream can take half a UTF-16 pair: it becomes U+FFFD, in memory
    # and upstream alike (see test_proxy_resend.py for the resends that follow).
    assert response.status_code == 200
    assert response.headers["x-stratamem-memory"] == "ok"
    assert upstream[0].bodies[-1]["messages"][-1]["content"] == f"{SECRET} \ufffd"
    assert stored(memory, *session)[2:] == [
        {"role": "user", "content": f"{SECRET} \ufffd"},
        {"role": "assistant", "content": f"echo: {SECRET} \ufffd"},
    ]
    assert SECRET not in caplog.text


@pytest.mark.slow
def test_a_10000_message_history_is_stored_once(
    post: Any,
    session: tuple[str, str],
    upstream: tuple[FakeUpstream, str],
    memory: Memory,
) -> None:
    history: list[dict[str, Any]] = list(EARLIER)
    for number in range(4_998):
        history.append({"role": "user", "content": f"message {number}"})
        history.append({"role": "assistant", "content": f"answer {number}"})
    history.append({"role": "user", "content": "an aside"})
    history.append({"role": "user", "content": "the last question"})
    assert len(history) == 10_000

    first = post(chat(*history), **who(*session))
    history.append(first.json()["choices"][0]["message"])
    history.append({"role": "user", "content": "one more"})
    second = post(chat(*history), **who(*session))

    assert (first.status_code, second.status_code) == (200, 200)
    assert second.headers["x-stratamem-memory"] == "ok"
    assert upstream[0].bodies[-1]["messages"][-1] == {"role": "user", "content": "one more"}
    contents = [message["content"] for message in stored(memory, *session)]
    assert contents == [message["content"] for message in history] + ["echo: one more"]


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"{not json", "not JSON"),
        (b"[1, 2, 3]", "not an object"),
        (json.dumps({"model": "m", "messages": "hello"}).encode(), "messages not a list"),
        (json.dumps({"model": "m", "messages": [1, None, "x"]}).encode(), "not messages"),
        (json.dumps({"model": "m", "messages": [{"content": "hi"}]}).encode(), "no role"),
    ],
)
def test_a_body_that_is_no_chat_request_gets_the_upstreams_400_and_stores_nothing(
    post: Any,
    session: tuple[str, str],
    upstream: tuple[FakeUpstream, str],
    memory: Memory,
    content: bytes,
    why: str,
) -> None:
    response = post(content=content, **who(*session))

    assert response.status_code == 400, why
    assert error_of(response)["type"] == "invalid_request_error"
    assert len(upstream[0].received) == 1  # passed through: the upstream decides
    assert stored(memory, *session) == EARLIER


def test_messages_of_wrong_types_inside_are_passed_through_without_memory(
    post: Any,
    session: tuple[str, str],
    upstream: tuple[FakeUpstream, str],
    memory: Memory,
    caplog: Any,
) -> None:
    caplog.set_level("INFO")
    messages = [{"role": "user", "content": 5}, {"role": 7, "content": [SECRET]}]

    response = post({"model": "m", "messages": messages}, **who(*session))

    assert response.status_code == 200  # the fake upstream accepts it; a real one may not
    assert response.headers["x-stratamem-memory"] == "degraded"
    assert upstream[0].bodies[-1]["messages"] == messages
    assert stored(memory, *session) == EARLIER
    assert "memory degraded" in caplog.text and SECRET not in caplog.text


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "Bearer wrong",
        "Bearer sm_" + "x" * 43,
        "Bearer " + "x" * 10_000,
        "Basic cHJveHk6c2VjcmV0",
        "Bearer sm_s\xc3\xa9".encode("latin-1"),
        "Bearer sk-upstream",
    ],
    ids=["missing", "wrong", "unknown key", "huge", "basic", "latin-1", "the upstream's key"],
)
def test_without_a_valid_key_it_is_a_401_and_nothing_moves(
    make_proxy: MakeProxy,
    session: tuple[str, str],
    upstream: tuple[FakeUpstream, str],
    memory: Memory,
    authorization: str | bytes | None,
) -> None:
    url = make_proxy() + "/chat/completions"
    headers = {name.encode(): value.encode() for name, value in who(*session).items()}
    if authorization is not None:
        given = authorization if isinstance(authorization, bytes) else authorization.encode()
        headers[b"Authorization"] = given

    response = httpx.post(
        url, json=chat({"role": "user", "content": SECRET}), headers=headers, timeout=60
    )

    assert response.status_code == 401
    error = error_of(response)
    assert (error["type"], error["code"]) == ("invalid_request_error", "invalid_api_key")
    assert "stratamem keys create" in error["message"]
    assert upstream[0].received == []
    recorded()
    assert stored(memory, *session) == EARLIER

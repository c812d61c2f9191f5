"""The proxy end to end: the real ``openai`` client, the proxy served by uvicorn, a fake upstream.

Each test reads what the upstream received and what the session stored.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import openai
import pytest
from proxy_harness import *  # noqa: F403 - the fixtures
from proxy_harness import MakeClient, MakeProxy, stored, who
from upstream_fake import Calls, Fail, FakeUpstream, Text

from memory import Memory

SYSTEM = {"role": "system", "content": "You are a terse assistant."}


def test_a_request_is_answered_unchanged_with_the_assembled_context_sent_and_both_stored(
    make_proxy: MakeProxy,
    make_client: MakeClient,
    upstream: tuple[FakeUpstream, str],
    memory: Memory,
    user_id: str,
    session_id: str,
) -> None:
    fake, _ = upstream
    memory.record(
        user_id=user_id,
        session_id=session_id,
        messages=[
            {"role": "user", "content": "My name is Ada."},
            {"role": "assistant", "content": "Hello Ada."},
        ],
    )
    client = make_client(make_proxy(), **who(user_id, session_id))
    question = {"role": "user", "content": "What is my name?"}

    raw = client.chat.completions.with_raw_response.create(
        model="fake-model", messages=[SYSTEM, question], temperature=0
    )

    completion = raw.parse()
    assert completion.choices[0].message.content == "echo: What is my name?"
    assert raw.headers["x-stratamem-memory"] == "ok"
    assert raw.headers["x-request-id"] == "req-1"  # the upstream's own headers come back
    [sent] = fake.bodies
    assert sent["messages"][0] == SYSTEM
    assert {"role": "user", "content": "My name is Ada."} in sent["messages"]  # from memory
    assert sent["messages"][-1] == question
    assert sent["temperature"] == 0 and sent["model"] == "fake-model"
    assert fake.received[0].headers["authorization"] == "Bearer sk-upstream"
    assert stored(memory, user_id, session_id)[2:] == [
        question,
        {"role": "assistant", "content": "echo: What is my name?"},
    ]


def test_a_stream_is_passed_through_as_it_arrives_and_the_reply_recorded_at_its_end(
    make_proxy: MakeProxy,
    make_client: MakeClient,
    upstream: tuple[FakeUpstream, str],
    memory: Memory,
    user_id: str,
    session_id: str,
) -> None:
    fake, _ = upstream
    fake.script(Text("streamed in four words"))
    gate = fake.gate_streams()
    client = make_client(make_proxy(), **who(user_id, session_id))

    stream = client.chat.completions.create(
        model="fake-model", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    first = next(iter(stream))
    # The upstream holds the rest of its stream until this gate opens: the first chunk came
    # through before the upstream had finished (it gives up unfinished if the gate never opens).
    assert first.choices[0].delta.role == "assistant"
    assert stored(memory, user_id, session_id) == [{"role": "user", "content": "hi"}]
    gate.set()
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream)

    assert text == "streamed in four words"
    assert stored(memory, user_id, session_id) == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "streamed in four words"},
    ]


def test_parallel_tool_calls_and_their_results_are_stored_and_sent_as_one_unit(
    make_proxy: MakeProxy,
    make_client: MakeClient,
    upstream: tuple[FakeUpstream, str],
    memory: Memory,
    user_id: str,
    session_id: str,
) -> None:
    fake, _ = upstream
    calls = (("call_a", "weather", '{"city": "Paris"}'), ("call_b", "weather", '{"city": "Oslo"}'))
    fake.script(Calls(calls), Text("Paris is warmer."))
    client = make_client(make_proxy(), **who(user_id, session_id))
    messages: list[Any] = [SYSTEM, {"role": "user", "content": "Paris or Oslo: warmer?"}]

    asked = client.chat.completions.create(model="fake-model", messages=messages)
    reply = asked.choices[0].message
    assert [call.id for call in reply.tool_calls or ()] == ["call_a", "call_b"]
    messages.append(reply)
    messages += [
        {"role": "tool", "tool_call_id": "call_a", "content": "21C"},
        {"role": "tool", "tool_call_id": "call_b", "content": "9C"},
    ]
    answered = client.chat.completions.create(model="fake-model", messages=messages)

    assert answered.choices[0].message.content == "Paris is warmer."
    sent = fake.bodies[1]["messages"]
    assert [m["role"] for m in sent[-3:]] == ["assistant", "tool", "tool"]
    assert [c["id"] for c in sent[-3]["tool_calls"]] == ["call_a", "call_b"]
    history = stored(memory, user_id, session_id)
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "tool", "assistant"]
    assert history[1]["tool_calls"][1]["function"] == {
        "name": "weather",
        "arguments": '{"city": "Oslo"}',
    }


def test_streamed_tool_calls_are_reassembled_whole_before_they_are_stored(
    make_proxy: MakeProxy,
    make_client: MakeClient,
    upstream: tuple[FakeUpstream, str],
    memory: Memory,
    user_id: str,
    session_id: str,
) -> None:
    fake, _ = upstream
    calls = (("call_1", "search", '{"q": "pgvector hnsw"}'), ("call_2", "fetch", '{"id": 42}'))
    fake.script(Calls(calls, text="Looking."))
    client = make_client(make_proxy(), **who(user_id, session_id))

    chunks = list(
        client.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "find it"}], stream=True
        )
    )

    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    [_, reply] = stored(memory, user_id, session_id)
    assert reply == {
        "role": "assistant",
        "content": "Looking.",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "search", "arguments": '{"q": "pgvector hnsw"}'},
            },
            {
                "id": "call_2",
                "type": "function",
                "function": {"name": "fetch", "arguments": '{"id": 42}'},
            },
        ],
    }


def test_a_client_that_resends_its_whole_history_stores_each_message_once(
    make_proxy: MakeProxy,
    make_client: MakeClient,
    upstream: tuple[FakeUpstream, str],
    memory: Memory,
    user_id: str,
    session_id: str,
) -> None:
    fake, _ = upstream
    client = make_client(make_proxy(), **who(user_id, session_id))
    messages: list[Any] = [SYSTEM]
    for text in ("ok", "ok", "and again"):  # a repeated "ok" is a new message each time
        messages.append({"role": "user", "content": text})
        stream = text == "ok"
        if stream:
            pieces = client.chat.completions.create(
                model="fake-model", messages=messages, stream=True
            )
            reply = "".join(chunk.choices[0].delta.content or "" for chunk in pieces)
            messages.append({"role": "assistant", "content": reply})
        else:
            messages.append(
                client.chat.completions.create(model="fake-model", messages=messages)
                .choices[0]
                .message
            )
    # The upstream fails the next turn; the client's retry of it stores its input once.
    messages.append({"role": "user", "content": "one more"})
    fake.script(Fail(503, "overloaded"))
    with pytest.raises(openai.APIStatusError):
        client.chat.completions.create(model="fake-model", messages=messages)
    client.chat.completions.create(model="fake-model", messages=messages)

    assert [m["content"] for m in stored(memory, user_id, session_id)] == [
        "ok",
        "echo: ok",
        "ok",
        "echo: ok",
        "and again",
        "echo: and again",
        "one more",
        "echo: one more",
    ]


def test_two_clients_on_one_session_at_once_both_store_their_turns_once(
    make_proxy: MakeProxy,
    make_client: MakeClient,
    upstream: tuple[FakeUpstream, str],
    memory: Memory,
    user_id: str,
    session_id: str,
) -> None:
    fake, _ = upstream
    url = make_proxy()
    fake.hold_until(2)  # each request waits at the upstream until both are there
    histories: dict[str, list[Any]] = {"left": [], "right": []}

    def converse(name: str) -> None:
        client = make_client(url, **who(user_id, session_id))
        histories[name].append({"role": "user", "content": f"{name} speaking"})
        reply = client.chat.completions.create(model="fake-model", messages=histories[name])
        histories[name].append(reply.choices[0].message)

    threads = [threading.Thread(target=converse, args=(name,)) for name in histories]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    fake.hold_until(1)
    # Each client then goes on with its own history, which the other's turn interleaves.
    for name in histories:
        histories[name].append({"role": "user", "content": f"{name} again"})
        make_client(url, **who(user_id, session_id)).chat.completions.create(
            model="fake-model", messages=histories[name]
        )

    # Each client got the answer to its own question, though both were in the window.
    assert [histories[name][1].content for name in histories] == [
        "echo: left speaking",
        "echo: right speaking",
    ]
    contents = [m["content"] for m in stored(memory, user_id, session_id)]
    assert sorted(contents[:4]) == sorted(
        ["left speaking", "echo: left speaking", "right speaking", "echo: right speaking"]
    )
    assert contents[4:] == ["left again", "echo: left again", "right again", "echo: right again"]


def test_the_user_field_names_the_user_and_the_session_defaults_to_default(
    make_proxy: MakeProxy,
    make_client: MakeClient,
    memory: Memory,
    user_id: str,
) -> None:
    client = make_client(make_proxy())

    client.chat.completions.create(
        model="fake-model", messages=[{"role": "user", "content": "hello"}], user=user_id
    )

    assert [m["content"] for m in stored(memory, user_id, "default")] == ["hello", "echo: hello"]


def test_a_request_without_a_user_passes_through_untouched(
    make_proxy: MakeProxy, make_client: MakeClient, upstream: tuple[FakeUpstream, str]
) -> None:
    fake, _ = upstream
    # With --no-auth and no upstream key of the proxy's, the client's own key goes upstream.
    client = make_client(make_proxy(api_key=None, require_keys=False), api_key="sk-client")
    messages = [
        SYSTEM,
        {"role": "system", "content": "Second system."},
        {"role": "user", "content": "x"},
    ]

    raw = client.chat.completions.with_raw_response.create(model="fake-model", messages=messages)

    assert raw.parse().choices[0].message.content == "echo: x"
    assert "x-stratamem-memory" not in raw.headers
    assert fake.bodies == [{"model": "fake-model", "messages": messages}]
    assert fake.received[0].headers["authorization"] == "Bearer sk-client"


def test_models_are_forwarded(
    make_proxy: MakeProxy, make_client: MakeClient, upstream: tuple[FakeUpstream, str]
) -> None:
    models = make_client(make_proxy()).models.list()

    assert [model.id for model in models] == ["fake-model"]
    assert upstream[0].received[0].path == "/v1/models"


def test_the_proxy_does_not_log_keys_or_content_at_info_level(
    make_proxy: MakeProxy,
    make_client: MakeClient,
    admin_key: str,
    user_id: str,
    session_id: str,
    caplog: Any,
) -> None:
    caplog.set_level("INFO")
    url = make_proxy()
    client = make_client(url, **who(user_id, session_id))
    message = [{"role": "user", "content": "a confidential remark"}]

    client.chat.completions.create(model="fake-model", messages=message)  # type: ignore[arg-type]
    with pytest.raises(openai.AuthenticationError):
        make_client(url, api_key="sk-secret-client", **who(user_id, session_id)).models.list()

    logged = json.dumps([record.getMessage() for record in caplog.records])
    assert "confidential" not in logged
    assert admin_key not in logged and admin_key[3:] not in logged
    assert "sk-secret-client" not in logged and "sk-upstream" not in logged


@pytest.mark.parametrize("stream", [False, True])
def test_with_record_after_answer_off_the_reply_is_stored_before_the_answer_ends(
    make_proxy: MakeProxy,
    make_client: MakeClient,
    memory: Memory,
    user_id: str,
    session_id: str,
    stream: bool,
) -> None:
    # For proxies that share a session's requests: nothing is left in flight after an answer.
    client = make_client(make_proxy(record_after_answer=False), **who(user_id, session_id))
    question: Any = [{"role": "user", "content": "hi"}]

    if stream:
        chunks = client.chat.completions.create(model="m", messages=question, stream=True)
        assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks) == "echo: hi"
    else:
        client.chat.completions.create(model="m", messages=question)

    # Read at once, without waiting for recordings: the reply is there already.
    history = memory.history(user_id=user_id, session_id=session_id)
    assert [m.payload["content"] for m in history] == ["hi", "echo: hi"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_reply_stored_after_the_answer_is_found_by_the_next_request(
    make_proxy: MakeProxy,
    make_client: MakeClient,
    memory: Memory,
    user_id: str,
    session_id: str,
    stream: bool,
) -> None:
    # The reply is stored while the answer goes out; the session's next request on this proxy
    # waits for it, so the resent reply is recognised, not stored a second time.
    client = make_client(make_proxy(), **who(user_id, session_id))
    conversation: Any = [{"role": "user", "content": "hi"}]
    for turn in ("hi", "again", "once more"):
        if turn != "hi":
            conversation.append({"role": "user", "content": turn})
        if stream:
            chunks = client.chat.completions.create(model="m", messages=conversation, stream=True)
            answer = "".join(chunk.choices[0].delta.content or "" for chunk in chunks)
        else:
            answer = client.chat.completions.create(model="m", messages=conversation)
            answer = answer.choices[0].message.content
        conversation.append({"role": "assistant", "content": answer})

    assert [m["content"] for m in stored(memory, user_id, session_id)] == [
        "hi", "echo: hi", "again", "echo: again", "once more", "echo: once more",
    ]  # fmt: skip

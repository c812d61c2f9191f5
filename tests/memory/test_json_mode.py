"""JSON mode: the schema a JSON prompt sends, an endpoint refusing it, a model answering prose.

The real ``openai`` client against the local fake server: a request with a ``ReplyFormat``
carries it as ``response_format``; an endpoint that refuses the field is asked again without
it, once, and never again for that model; the chain does not ask again a model that answered
a JSON prompt in prose.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fake_openai import Behaviour, FakeOpenAI, Reply, Status

from memory.errors import LLMError, ReplyFormatError
from memory.llm import (
    ChatRequest,
    LLMChain,
    LLMChainFailed,
    OpenAIChatModel,
    ReplyFormat,
    ScriptedChatModel,
    json_text,
)

HELLO = [{"role": "user", "content": "hello there"}]
ANSWER = ReplyFormat(
    "answer",
    {
        "type": "object",
        "properties": {"answer": {"type": "string"}},
        "required": ["answer"],
        "additionalProperties": False,
    },
)
SENT = {
    "type": "json_schema",
    "json_schema": {"name": "answer", "schema": dict(ANSWER.schema), "strict": True},
}


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


def client(server: FakeOpenAI) -> OpenAIChatModel:
    return OpenAIChatModel(base_url=server.base_url, api_key="test")


def ask(model: OpenAIChatModel, name: str = "m1", *, json_mode: bool = True) -> str:
    return model.complete(
        HELLO,
        model=name,
        temperature=0.0,
        max_tokens=50,
        timeout=5.0,
        response_format=ANSWER if json_mode else None,
    ).text


def refusing(message: str, code: int = 400) -> Any:
    """An endpoint that refuses ``response_format`` with ``message`` and answers without it."""

    def respond(body: dict[str, Any]) -> Behaviour:
        if "response_format" in body:
            return Status(code, message)
        return Reply('{"answer": "42"}')

    return respond


def test_a_reply_format_is_sent_as_response_format(server: FakeOpenAI) -> None:
    server.script(Reply('{"answer": "42"}'), Reply("plain"))
    model = client(server)

    assert ask(model) == '{"answer": "42"}'
    assert ask(model, json_mode=False) == "plain"

    with_format, without = server.requests
    assert with_format["response_format"] == SENT
    assert "response_format" not in without


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ("Unrecognized request argument supplied: response_format", 400),
        ("Invalid parameter: 'response_format' of type 'json_schema' is not supported", 400),
        ("json_schema is not supported by this backend", 400),
        ("Unsupported parameter: 'response_format'", 422),
    ],
)
def test_an_endpoint_refusing_json_mode_is_asked_without_it_and_remembers(
    server: FakeOpenAI, message: str, code: int
) -> None:
    server.responder = refusing(message, code)
    model = client(server)

    assert ask(model) == '{"answer": "42"}'
    assert ask(model) == '{"answer": "42"}'  # the refusal is not paid again

    assert ["response_format" in body for body in server.requests] == [True, False, False]
    assert not model.takes_json_mode("m1")


def test_the_refusal_is_remembered_per_model(server: FakeOpenAI) -> None:
    server.responder = lambda body: (
        Status(400, "Unrecognized request argument supplied: response_format")
        if "response_format" in body and body["model"] == "small"
        else Reply('{"answer": "42"}')
    )
    model = client(server)

    ask(model, "small")
    ask(model, "large")

    assert [(body["model"], "response_format" in body) for body in server.requests] == [
        ("small", True),
        ("small", False),
        ("large", True),
    ]
    assert model.takes_json_mode("large") and not model.takes_json_mode("small")


@pytest.mark.parametrize(
    "behaviour",
    [Status(400, "This model's maximum context length is 8192 tokens"), Status(500)],
)
def test_another_error_is_not_taken_for_a_refusal_of_json_mode(
    server: FakeOpenAI, behaviour: Status
) -> None:
    server.script(behaviour, Reply('{"answer": "42"}'))
    model = client(server)

    with pytest.raises(LLMError):
        ask(model)
    ask(model)

    assert ["response_format" in body for body in server.requests] == [True, True]
    assert model.takes_json_mode("m1")


def test_a_failure_of_the_request_without_json_mode_is_an_llm_error(server: FakeOpenAI) -> None:
    server.script(Status(400, "Unsupported parameter: response_format"), Status(503))

    with pytest.raises(LLMError, match="503"):
        ask(client(server))

    assert len(server.requests) == 2


def test_the_scripted_model_records_the_reply_format() -> None:
    scripted = ScriptedChatModel(['{"answer": "42"}'])

    scripted.complete(
        HELLO, model="m", temperature=0.0, max_tokens=None, timeout=1.0, response_format=ANSWER
    )

    assert scripted.requests == [ChatRequest(tuple(HELLO), "m", 0.0, None, 1.0, ANSWER)]


def answer_of(text: str, model: str) -> str:
    """An ``accept`` for the chain: the ``answer`` of a JSON reply."""
    value = json.loads(json_text(text, model))
    if not isinstance(value, dict) or not isinstance(value.get("answer"), str):
        raise LLMError(f"{model}: no answer")
    return value["answer"]


def chain(server: FakeOpenAI, **options: Any) -> LLMChain:
    values: dict[str, Any] = {"model": "primary", "retries": 3, "sleep": lambda _: None}
    return LLMChain(client(server), **(values | options))


def test_the_chain_sends_the_reply_format_on_every_attempt(server: FakeOpenAI) -> None:
    server.script(Reply('{"answer": 1}'), Reply('{"answer": "42"}'))

    result = chain(server).run(HELLO, answer_of, response_format=ANSWER)

    assert result.value == "42" and result.attempts == 2
    assert [body["response_format"] for body in server.requests] == [SENT, SENT]


def test_a_reply_in_prose_is_not_asked_again_of_that_model(server: FakeOpenAI) -> None:
    server.script(Reply("The answer is 42."), Reply('{"answer": "42"}'))
    events: list[str] = []

    result = chain(server, fallback_model="backup", on_event=lambda e: events.append(e.kind)).run(
        HELLO, answer_of, response_format=ANSWER
    )

    assert [body["model"] for body in server.requests] == ["primary", "backup"]
    assert (result.value, result.model, result.attempts) == ("42", "backup", 2)
    assert events == ["attempt", "degrade", "attempt", "success"]


def test_the_failure_says_how_many_replies_came_and_how_many_were_prose(
    server: FakeOpenAI,
) -> None:
    server.script(Status(500), Reply('{"answer": 1}'), Reply("Forty-two."))

    with pytest.raises(LLMChainFailed) as raised:
        chain(server).run(HELLO, answer_of, response_format=ANSWER)

    failure = raised.value
    assert (failure.attempts, failure.replies, failure.not_json) == (3, 2, 1)


def test_a_chain_whose_endpoint_is_down_counts_no_reply(server: FakeOpenAI) -> None:
    server.responder = lambda body: Status(503)

    with pytest.raises(LLMChainFailed) as raised:
        chain(server).run(HELLO, answer_of, response_format=ANSWER)

    assert (raised.value.attempts, raised.value.replies, raised.value.not_json) == (3, 0, 0)


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ('{"answer": "42"}', '{"answer": "42"}'),
        ('```json\n{"answer": "42"}\n```', '{"answer": "42"}'),
        (' \n{"answer": "4', '{"answer": "4'),  # broken JSON is the caller's to refuse
    ],
)
def test_json_text_takes_a_reply_that_starts_as_a_json_object(text: str, found: str) -> None:
    assert json_text(text, "m") == found


@pytest.mark.parametrize(
    "text",
    [
        "The answer is 42.",
        "I'm sorry, but I can't help with that.",
        'Notes: the user called run_query({"query": "export"}).',  # JSON inside prose
        "[1]",
    ],
)
def test_json_text_refuses_prose(text: str) -> None:
    with pytest.raises(ReplyFormatError, match="not JSON"):
        json_text(text, "m")

"""The chat model client, through the real ``openai`` client against a local fake server."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest
from fake_openai import Empty, FakeOpenAI, Hang, Malformed, Reply, Status

from memory.errors import ConfigurationError, LLMError, StratamemError
from memory.llm import ChatRequest, Completion, OpenAIChatModel, ScriptedChatModel

HELLO = [{"role": "user", "content": "hello there"}]


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


def client(server: FakeOpenAI) -> OpenAIChatModel:
    return OpenAIChatModel(base_url=server.base_url, api_key="test")


def ask(model: OpenAIChatModel, *, timeout: float = 5.0, max_tokens: int | None = 50) -> Completion:
    return model.complete(
        HELLO, model="summariser-1", temperature=0.3, max_tokens=max_tokens, timeout=timeout
    )


def test_a_reply_becomes_a_completion_with_usage(server: FakeOpenAI) -> None:
    server.script(Reply("the summary"))

    completion = ask(client(server))

    assert completion == Completion("the summary", tokens_in=2, tokens_out=2, model="summariser-1")
    (body,) = server.requests
    assert body["model"] == "summariser-1"
    assert body["messages"] == HELLO
    assert body["temperature"] == 0.3
    assert body["max_tokens"] == 50


def test_no_max_tokens_leaves_the_field_out(server: FakeOpenAI) -> None:
    server.script(Reply("ok"))

    ask(client(server), max_tokens=None)

    assert "max_tokens" not in server.requests[0]


@pytest.mark.parametrize(
    ("code", "cause"),
    [
        (500, openai.InternalServerError),
        (429, openai.RateLimitError),
        (400, openai.BadRequestError),
    ],
)
def test_an_http_error_is_an_llm_error_and_is_not_retried_by_the_client(
    server: FakeOpenAI, code: int, cause: type[Exception]
) -> None:
    server.script(Status(code))

    with pytest.raises(LLMError, match="summariser-1") as raised:
        ask(client(server))

    assert isinstance(raised.value.__cause__, cause)
    assert isinstance(raised.value, StratamemError)
    assert len(server.requests) == 1


@pytest.mark.parametrize("behaviour", [Empty(), Reply(None), Reply("  \n ")])
def test_an_empty_reply_is_an_llm_error(server: FakeOpenAI, behaviour: Empty | Reply) -> None:
    server.script(behaviour)

    with pytest.raises(LLMError, match="empty reply"):
        ask(client(server))


def test_a_body_that_is_not_json_is_an_llm_error(server: FakeOpenAI) -> None:
    server.script(Malformed())

    with pytest.raises(LLMError, match="not valid JSON"):
        ask(client(server))


def test_a_hanging_server_times_out_as_an_llm_error(server: FakeOpenAI) -> None:
    server.script(Hang())

    with pytest.raises(LLMError) as raised:
        ask(client(server), timeout=0.3)

    assert isinstance(raised.value.__cause__, openai.APITimeoutError)


def test_an_unreachable_server_is_an_llm_error() -> None:
    with FakeOpenAI() as fake:
        base_url = fake.base_url
    model = OpenAIChatModel(base_url=base_url, api_key="test")

    with pytest.raises(LLMError) as raised:
        ask(model)

    assert isinstance(raised.value.__cause__, openai.APIConnectionError)


def test_a_missing_api_key_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)

    with pytest.raises(ConfigurationError, match="OpenAI client"):
        OpenAIChatModel()


def test_a_local_server_without_a_key_is_asked_with_a_placeholder(
    server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    # vLLM, llama.cpp and Ollama check no key: a base URL alone must be enough.
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server.script(Reply("local reply"))

    assert ask(OpenAIChatModel(base_url=server.base_url)).text == "local reply"


def test_the_scripted_model_plays_its_script_and_records_requests() -> None:
    failure = LLMError("down")
    scripted = ScriptedChatModel(["first reply", failure, Completion("exact", 7, 1, "m")])

    first = scripted.complete(HELLO, model="m", temperature=0.1, max_tokens=9, timeout=2.0)
    with pytest.raises(LLMError) as raised:
        scripted.complete(HELLO, model="m", temperature=0.1, max_tokens=None, timeout=2.0)
    third = scripted.complete(HELLO, model="m", temperature=0.1, max_tokens=None, timeout=2.0)

    assert first == Completion("first reply", tokens_in=2, tokens_out=2, model="m")
    assert raised.value is failure
    assert third == Completion("exact", 7, 1, "m")
    assert scripted.requests[0] == ChatRequest(tuple(HELLO), "m", 0.1, 9, 2.0)
    assert scripted.remaining == 0


def test_the_scripted_model_refuses_an_unplanned_request_and_empty_text() -> None:
    scripted = ScriptedChatModel([" "])

    with pytest.raises(LLMError, match="empty reply"):
        scripted.complete(HELLO, model="m", temperature=0.0, max_tokens=None, timeout=1.0)
    with pytest.raises(LookupError, match="request 2"):
        scripted.complete(HELLO, model="m", temperature=0.0, max_tokens=None, timeout=1.0)

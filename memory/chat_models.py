"""The chat models an ``LLMChain`` calls (the ``ChatModel`` Protocol, the OpenAI client behind it,
a scripted fake for tests): one call each and no policy, apart from the chain that decides when to
call them again."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import openai

from memory.errors import ConfigurationError, LLMError

__all__ = [
    "NO_API_KEY",
    "ChatModel",
    "ChatRequest",
    "Completion",
    "OpenAIChatModel",
    "ScriptedChatModel",
]


@dataclass(frozen=True, slots=True)
class Completion:
    """One reply of a chat model.

    Attributes:
        text: the reply's content, never empty.
        tokens_in: prompt tokens as the server reported them (0 when it did not).
        tokens_out: completion tokens as the server reported them (0 when it did not).
        model: the model that answered, as the server named it.
    """

    text: str
    tokens_in: int
    tokens_out: int
    model: str


class ChatModel(Protocol):
    """Sends one chat request and returns the reply's text.

    Implementations raise ``LLMError`` for every failure of the call (network, timeout, HTTP
    status, empty or malformed reply) and nothing else: callers degrade on ``LLMError`` and let
    any other exception through as a bug.
    """

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        model: str,
        temperature: float,
        max_tokens: int | None,
        timeout: float,
    ) -> Completion:
        """Send ``messages`` (OpenAI-format dicts) to ``model`` and return its reply."""
        ...


#: The key sent to an endpoint configured without one (a local server that checks none).
NO_API_KEY = "not-needed"


class OpenAIChatModel:
    """A ``ChatModel`` for any OpenAI-compatible endpoint, through the ``openai`` client.

    The client never retries on its own (``max_retries=0``): retries, backoff and fallback are the
    summariser's policy. ``base_url`` and ``api_key`` default to the client's own defaults
    (``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``), read when the object is created. A base URL
    with no key anywhere gets ``NO_API_KEY``: self-hosted servers (vLLM, llama.cpp, Ollama)
    often want none, and the client refuses to start without one.

    Raises:
        ConfigurationError: no API key was given, none is in the environment, and no base URL.
    """

    def __init__(self, base_url: str | None = None, api_key: str | None = None) -> None:
        if base_url and not api_key and not os.environ.get("OPENAI_API_KEY"):
            api_key = NO_API_KEY
        try:
            self._client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
        except openai.OpenAIError as error:
            raise ConfigurationError(f"cannot create the OpenAI client: {error}") from error

    @property
    def base_url(self) -> str:
        """The endpoint requests go to."""
        return str(self._client.base_url)

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        model: str,
        temperature: float,
        max_tokens: int | None,
        timeout: float,
    ) -> Completion:
        """Send one chat completion request; see ``ChatModel.complete``.

        ``max_tokens`` is sent as ``max_tokens`` (not ``max_completion_tokens``), which every
        OpenAI-compatible server understands.

        Raises:
            LLMError: the call failed, timed out, or the reply was empty or malformed.
        """
        try:
            response = self._client.chat.completions.create(
                model=model,
                messages=messages,  # type: ignore[arg-type]  # plain dicts, as the API takes them
                temperature=temperature,
                max_tokens=max_tokens if max_tokens is not None else openai.omit,
                timeout=timeout,
            )
        except openai.OpenAIError as error:
            raise LLMError(f"{model}: {type(error).__name__}: {error}") from error
        except ValueError as error:
            # The client decodes a JSON content type with ``response.json()`` and lets a
            # ``json.JSONDecodeError`` through when the body is not JSON.
            raise LLMError(f"{model}: the reply is not valid JSON: {error}") from error
        return _completion(response, model)


def _completion(response: object, model: str) -> Completion:
    # The client does not validate replies strictly (lenient servers omit fields), so a malformed
    # body surfaces as missing attributes or as a plain string: read it defensively.
    choices = getattr(response, "choices", None)
    if not isinstance(choices, list):
        raise LLMError(f"{model}: malformed reply (no choices)")
    if not choices:
        raise LLMError(f"{model}: empty reply (no choices)")
    content = getattr(getattr(choices[0], "message", None), "content", None)
    if not isinstance(content, str) or not content.strip():
        raise LLMError(f"{model}: empty reply")
    usage = getattr(response, "usage", None)
    return Completion(
        text=content,
        tokens_in=_as_count(getattr(usage, "prompt_tokens", 0)),
        tokens_out=_as_count(getattr(usage, "completion_tokens", 0)),
        model=str(getattr(response, "model", None) or model),
    )


def _as_count(value: object) -> int:
    return value if isinstance(value, int) and value >= 0 else 0


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """One request a ``ScriptedChatModel`` received."""

    messages: tuple[dict[str, Any], ...]
    model: str
    temperature: float
    max_tokens: int | None
    timeout: float


class ScriptedChatModel:
    """A ``ChatModel`` that answers from a script, for tests (stratamem's and yours).

    Each request takes the next item of the script: a string is the reply's text, a
    ``Completion`` is returned as it is, an exception is raised (use ``LLMError`` for a failure
    the caller should degrade on). Every request is recorded in ``requests``. Token counts of a
    string reply are whitespace-separated words, a rough stand-in for a tokenizer.

    Args:
        script: the replies, in order.
    """

    def __init__(self, script: Iterable[str | Completion | BaseException]) -> None:
        self._script = list(script)
        self.requests: list[ChatRequest] = []

    @property
    def remaining(self) -> int:
        """How many items of the script have not been used."""
        return len(self._script) - len(self.requests)

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        model: str,
        temperature: float,
        max_tokens: int | None,
        timeout: float,
    ) -> Completion:
        """Record the request and play the next item of the script.

        Raises:
            LookupError: the script is used up (a test that made more calls than it planned).
        """
        index = len(self.requests)
        if index >= len(self._script):
            raise LookupError(f"ScriptedChatModel: no reply scripted for request {index + 1}")
        self.requests.append(ChatRequest(tuple(messages), model, temperature, max_tokens, timeout))
        item = self._script[index]
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, Completion):
            return item
        if not item.strip():
            raise LLMError(f"{model}: empty reply")
        return Completion(item, _words(messages), len(item.split()), model)


def _words(messages: Sequence[dict[str, Any]]) -> int:
    return sum(len(str(message.get("content") or "").split()) for message in messages)

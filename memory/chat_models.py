"""The chat models an ``LLMChain`` calls (the ``ChatModel`` Protocol, the OpenAI client behind it,
a scripted fake for tests): one call each and no policy, apart from the chain that decides when to
call them again, and the JSON mode an endpoint may refuse (``ReplyFormat``)."""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from memory.errors import ConfigurationError, LLMError

__all__ = [
    "NO_API_KEY",
    "ChatModel",
    "ChatRequest",
    "Completion",
    "OpenAIChatModel",
    "ReplyFormat",
    "ScriptedChatModel",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReplyFormat:
    """The JSON a reply must be, as a JSON Schema: sent as ``response_format`` (JSON mode).

    The prompt asks for the same JSON in words, so a model or endpoint without JSON mode is
    asked by the prompt alone and its reply is checked all the same.

    Attributes:
        name: the schema's name (letters, digits, ``_`` and ``-``).
        schema: the JSON Schema of the reply (an object).
        strict: ask the endpoint to hold the reply to the schema exactly.
    """

    name: str
    schema: Mapping[str, Any]
    strict: bool = True

    def to_openai(self) -> dict[str, Any]:
        """The ``response_format`` request field."""
        return {
            "type": "json_schema",
            "json_schema": {"name": self.name, "schema": dict(self.schema), "strict": self.strict},
        }


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
    any other exception through as a bug. ``response_format`` asks for JSON of a schema where the
    model can be held to one; a model that cannot ignores it (the prompt asks for the same JSON).
    """

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        model: str,
        temperature: float,
        max_tokens: int | None,
        timeout: float,
        response_format: ReplyFormat | None = None,
    ) -> Completion:
        """Send ``messages`` (OpenAI-format dicts) to ``model`` and return its reply."""
        ...


#: The key sent to an endpoint configured without one (a local server that checks none).
NO_API_KEY = "not-needed"
#: What a 400 (or 422) error says when the endpoint refuses JSON mode, not the request: the
#: field's name (OpenAI: "Unrecognized request argument supplied: response_format", "Invalid
#: schema for response_format ..."), or "unsupported parameter" (several compatible servers).
_REFUSES_JSON_MODE = re.compile(r"response[_ ]format|json[_ ]schema|unsupported param", re.I)


class OpenAIChatModel:
    """A ``ChatModel`` for any OpenAI-compatible endpoint, through the ``openai`` client.

    The client never retries on its own (``max_retries=0``): retries, backoff and fallback are the
    summariser's policy. ``base_url`` and ``api_key`` default to the client's own defaults
    (``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``), read when the object is created. A base URL
    with no key anywhere gets ``NO_API_KEY``: self-hosted servers (vLLM, llama.cpp, Ollama)
    often want none, and the client refuses to start without one.

    JSON mode: a request with a ``ReplyFormat`` sends it as ``response_format``. An endpoint
    that refuses the field (``_REFUSES_JSON_MODE``) is asked again at once without it, and the
    model is remembered (per object, that is per endpoint) so later calls ask by the prompt alone
    and do not pay the refusal again.

    Raises:
        ConfigurationError: no API key was given, none is in the environment, and no base URL.
    """

    def __init__(self, base_url: str | None = None, api_key: str | None = None) -> None:
        if base_url and not api_key and not os.environ.get("OPENAI_API_KEY"):
            api_key = NO_API_KEY
        import openai  # here, not at import: it takes most of a second to import

        try:
            self._client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
        except openai.OpenAIError as error:
            raise ConfigurationError(f"cannot create the OpenAI client: {error}") from error
        self._lock = threading.Lock()
        self._without_json_mode: set[str] = set()

    def takes_json_mode(self, model: str) -> bool:
        """Whether requests for ``model`` still send ``response_format`` (no refusal seen)."""
        with self._lock:
            return model not in self._without_json_mode

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
        response_format: ReplyFormat | None = None,
    ) -> Completion:
        """Send one chat completion request; see ``ChatModel.complete`` and the class.

        ``max_tokens`` is sent as ``max_tokens`` (not ``max_completion_tokens``), which every
        OpenAI-compatible server understands.

        Raises:
            LLMError: the call failed, timed out, or the reply was empty or malformed.
        """
        request: dict[str, Any] = {
            "model": model,
            "messages": messages,
            "temperature": temperature,
            "timeout": timeout,
        }
        if max_tokens is not None:
            request["max_tokens"] = max_tokens
        if response_format is not None and self.takes_json_mode(model):
            try:
                return self._send(request | {"response_format": response_format.to_openai()})
            except LLMError as failure:
                if not _refuses_json_mode(failure.__cause__):
                    raise
                with self._lock:
                    self._without_json_mode.add(model)
                logger.warning(
                    "%s at %s refuses response_format; asking for JSON by the prompt alone "
                    "from now on: %s", model, self.base_url, failure,
                )  # fmt: skip
        return self._send(request)

    def _send(self, request: dict[str, Any]) -> Completion:
        import openai  # imported by __init__ already

        model = request["model"]
        try:
            response = self._client.chat.completions.create(**request)
        except openai.OpenAIError as error:
            raise LLMError(f"{model}: {type(error).__name__}: {error}") from error
        except ValueError as error:
            # The client decodes a JSON content type with ``response.json()`` and lets a
            # ``json.JSONDecodeError`` through when the body is not JSON.
            raise LLMError(f"{model}: the reply is not valid JSON: {error}") from error
        return _completion(response, model)


def _refuses_json_mode(error: BaseException | None) -> bool:
    """Whether ``error`` is an endpoint's refusal of ``response_format`` (not of the request)."""
    import openai  # imported by OpenAIChatModel already

    refusal = isinstance(error, openai.BadRequestError | openai.UnprocessableEntityError)
    return refusal and bool(_REFUSES_JSON_MODE.search(str(error)))


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
    response_format: ReplyFormat | None = None


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
        response_format: ReplyFormat | None = None,
    ) -> Completion:
        """Record the request and play the next item of the script.

        Raises:
            LookupError: the script is used up (a test that made more calls than it planned).
        """
        index = len(self.requests)
        if index >= len(self._script):
            raise LookupError(f"ScriptedChatModel: no reply scripted for request {index + 1}")
        self.requests.append(
            ChatRequest(tuple(messages), model, temperature, max_tokens, timeout, response_format)
        )
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

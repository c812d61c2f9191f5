"""The chat model stratamem talks to, and the one chain of retries and fallback around it.

``ChatModel`` is a small Protocol with the OpenAI client behind it and a scripted fake next to
it (``memory.chat_models``, exported here too). ``LLMChain`` is the policy every LLM use shares
(the summariser, the fold's shared call, extraction and query rewriting): attempts with backoff,
then the fallback model, then a typed ``LLMChainFailed`` that the caller degrades on, with an
``LLMEvent`` for every step. A JSON prompt passes its ``ReplyFormat`` (JSON mode where the
endpoint takes it); a reply in prose (``ReplyFormatError``, see ``json_text``) is not asked of
the same model again.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import astuple, dataclass
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from memory.chat_models import (
    ChatModel,
    ChatRequest,
    Completion,
    OpenAIChatModel,
    ReplyFormat,
    ScriptedChatModel,
)
from memory.context.tokens import DEFAULT_MODEL
from memory.errors import ConfigurationError, LLMError, ReplyFormatError

if TYPE_CHECKING:
    from memory.settings import SummarySettings

__all__ = [
    "ChainResult",
    "ChatModel",
    "ChatRequest",
    "Completion",
    "LLMChain",
    "LLMChainFailed",
    "LLMEvent",
    "OpenAIChatModel",
    "ReplyFormat",
    "ScriptedChatModel",
    "json_text",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")
EventKind = Literal["attempt", "success", "retry", "degrade"]

_FENCE = re.compile(r"^\s*```(?:json)?\s*|\s*```\s*$")


def json_text(text: str, model: str) -> str:
    """A reply to a JSON prompt without the code fence models like to wrap it in.

    Whether it is the JSON asked for is the caller's to check; a reply that does not even
    start as a JSON object is prose (a summary, a refusal, an answer), and a model that wrote
    it once would write it again.

    Raises:
        ReplyFormatError: the reply does not start with ``{`` (the same model is not asked
            again).
    """
    unfenced = _FENCE.sub("", text).strip()
    if not unfenced.startswith("{"):
        raise ReplyFormatError(f"{model}: the reply is not JSON: {unfenced[:60]!r}...")
    return unfenced


@dataclass(frozen=True, slots=True)
class LLMEvent:
    """One step of an ``LLMChain`` call, for a callback and the log.

    Every ``attempt`` is followed by exactly one of: ``success``; ``retry`` (the same model is
    tried again); ``degrade`` (the next step follows: the fallback model, or the caller's own
    fallback when no model is left; after a model's last attempt, or at once after a reply in
    prose where JSON was asked). ``model``, tokens, duration and ``error`` describe the
    attempt.
    """

    kind: EventKind
    model: str
    tokens_in: int
    tokens_out: int
    duration_s: float
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ChainResult(Generic[T]):
    """What an ``LLMChain`` call produced: the accepted value and what it cost.

    Attributes:
        value: what ``accept`` made of the reply.
        model: the model whose reply was accepted.
        tokens_in: prompt tokens over every attempt, as the servers reported them.
        tokens_out: completion tokens over every attempt.
        attempts: chat model calls made.
    """

    value: T
    model: str
    tokens_in: int
    tokens_out: int
    attempts: int


class LLMChainFailed(LLMError):
    """Every attempt of an ``LLMChain`` failed; the caller degrades (it is never a crash).

    Attributes:
        tokens_in: prompt tokens spent over every attempt.
        tokens_out: completion tokens spent over every attempt.
        attempts: chat model calls made.
        replies: attempts a model answered (a reply it was refused for); 0 when none got
            through (the endpoint down), so nobody read the request.
        not_json: attempts answered in prose where JSON was asked (``ReplyFormatError``).
    """

    def __init__(
        self,
        message: str,
        *,
        tokens_in: int,
        tokens_out: int,
        attempts: int,
        replies: int = 0,
        not_json: int = 0,
    ) -> None:
        super().__init__(message)
        self.tokens_in = tokens_in
        self.tokens_out = tokens_out
        self.attempts = attempts
        self.replies = replies
        self.not_json = not_json


class LLMChain:
    """Calls a chat model with retries and backoff, then a fallback model, then gives up typed.

    Args:
        chat_model: the model client.
        model: tried first, ``retries`` times.
        fallback_model: tried next, ``fallback_retries`` times; ``None`` for none.
        retries: attempts with ``model`` (at least 1).
        fallback_retries: attempts with ``fallback_model`` (0 skips it).
        timeout: seconds per call.
        temperature: sampling temperature.
        backoff_seconds: the wait before a model's second attempt; it doubles for each next one.
        max_backoff_seconds: the longest wait between two attempts.
        sleep: waits between attempts (tests pass a no-op).
        clock: a monotonic clock for event durations.
        on_event: receives every ``LLMEvent``; events are logged either way.
    """

    def __init__(
        self,
        chat_model: ChatModel,
        *,
        model: str,
        fallback_model: str | None = None,
        retries: int = 3,
        fallback_retries: int = 3,
        timeout: float = 60.0,
        temperature: float = 0.3,
        backoff_seconds: float = 0.5,
        max_backoff_seconds: float = 8.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        on_event: Callable[[LLMEvent], None] | None = None,
    ) -> None:
        if retries < 1 or fallback_retries < 0:
            raise ConfigurationError(
                f"need retries >= 1 and fallback_retries >= 0, got {retries}, {fallback_retries}"
            )
        self.chat_model = chat_model
        self.steps = [(model, retries)]
        if fallback_model is not None and fallback_retries:
            self.steps.append((fallback_model, fallback_retries))
        self._timeout = timeout
        self._temperature = temperature
        self._backoff = backoff_seconds
        self._max_backoff = max_backoff_seconds
        self._sleep = sleep
        self._clock = clock
        self._on_event = on_event

    @classmethod
    def for_settings(
        cls,
        chat_model: ChatModel,
        settings: SummarySettings,
        *,
        temperature: float | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        on_event: Callable[[LLMEvent], None] | None = None,
    ) -> LLMChain:
        """The chain a settings group describes (models, retries, timeout, backoff).

        ``temperature`` overrides the group's (extraction reads; it does not write prose).
        """
        return cls(
            chat_model,
            model=settings.model or DEFAULT_MODEL,
            fallback_model=settings.fallback_model,
            retries=settings.retries,
            fallback_retries=settings.fallback_retries,
            timeout=settings.timeout,
            temperature=settings.temperature if temperature is None else temperature,
            backoff_seconds=settings.backoff_seconds,
            max_backoff_seconds=settings.max_backoff_seconds,
            sleep=sleep,
            clock=clock,
            on_event=on_event,
        )

    def run(
        self,
        messages: list[dict[str, Any]],
        accept: Callable[[str, str], T],
        *,
        max_tokens: int | None = None,
        response_format: ReplyFormat | None = None,
    ) -> ChainResult[T]:
        """Send ``messages`` until a reply is accepted.

        Args:
            messages: the request, as OpenAI-format dicts.
            accept: turns a reply's text (and the model's name) into the value wanted; it
                raises ``LLMError`` for a reply that is not usable (wrong shape, a refusal, too
                long), which counts as a failed attempt like a network error does, and
                ``ReplyFormatError`` for prose where JSON was asked, which ends this model's
                attempts (the fallback model is tried next).
            max_tokens: the most tokens the server may generate.
            response_format: the JSON the reply must be, for a JSON prompt (JSON mode where
                the endpoint takes it).

        Raises:
            LLMChainFailed: every attempt of every model failed.
        """
        tokens_in = tokens_out = attempts = replies = not_json = 0
        errors: list[str] = []
        for model, tries in self.steps:
            for attempt in range(tries):
                if attempt:
                    self._sleep(min(self._backoff * 2 ** (attempt - 1), self._max_backoff))
                self._emit(LLMEvent("attempt", model, 0, 0, 0.0))
                started = self._clock()
                spent_in = spent_out = 0
                prose = False
                try:
                    completion = self.chat_model.complete(
                        messages,
                        model=model,
                        temperature=self._temperature,
                        max_tokens=max_tokens,
                        timeout=self._timeout,
                        response_format=response_format,
                    )
                    spent_in, spent_out = completion.tokens_in, completion.tokens_out
                    replies += 1
                    value = accept(completion.text, model)
                except LLMError as failure:
                    error = str(failure)
                    prose = isinstance(failure, ReplyFormatError)
                else:
                    attempts += 1
                    tokens_in, tokens_out = tokens_in + spent_in, tokens_out + spent_out
                    duration = self._clock() - started
                    self._emit(LLMEvent("success", model, spent_in, spent_out, duration))
                    return ChainResult(value, model, tokens_in, tokens_out, attempts)
                attempts += 1
                not_json += prose
                tokens_in, tokens_out = tokens_in + spent_in, tokens_out + spent_out
                errors.append(error)
                last = prose or attempt + 1 == tries
                event = LLMEvent(
                    "degrade" if last else "retry",
                    model,
                    spent_in,
                    spent_out,
                    self._clock() - started,
                    error,
                )
                self._emit(event)
                if last:
                    break
        raise LLMChainFailed(
            f"every attempt failed ({attempts}); last: {errors[-1] if errors else 'none'}",
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            attempts=attempts,
            replies=replies,
            not_json=not_json,
        )

    def _emit(self, event: LLMEvent) -> None:
        level = logging.WARNING if event.error else logging.DEBUG
        # The fields in declaration order: kind, model, tokens in/out, duration, error.
        template = "llm %s: model %s, tokens %d in / %d out, %.2fs, error: %s"
        logger.log(level, template, *astuple(event))
        if self._on_event is not None:
            self._on_event(event)

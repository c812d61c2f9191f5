"""The rolling summary: fold messages into a self-contained summary, degrading but never failing.

The summariser sees the previous summary plus only the newly folded messages, so its cost
depends on the increment. When the model fails it retries with backoff, then tries the fallback
model, then writes a raw archive (the folded messages as plain text lines); a previous summary
is kept and the archive appended to it, so nothing is lost.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import astuple, dataclass, replace
from typing import Any, Literal

from memory.context.messages import Message
from memory.context.tokens import TokenCounter
from memory.errors import ConfigurationError, LLMError
from memory.llm import ChatModel
from memory.summary.transcript import cut_to_tokens, raw_archive, summary_request

__all__ = [
    "PreviousSummary",
    "Summarizer",
    "SummaryEvent",
    "SummaryKind",
    "SummaryResult",
    "SummarySettings",
]

logger = logging.getLogger(__name__)

SummaryKind = Literal["llm", "raw"]
EventKind = Literal["attempt", "success", "retry", "degrade"]


#: Marks where a raw archive's oldest lines were left out to respect its cap.
ARCHIVE_OMITTED = "[older archived lines omitted; every message is still in the history]"
#: A raw archive may be this many times the summary cap: it is less dense than a summary.
ARCHIVE_CAP_FACTOR = 2


@dataclass(frozen=True, slots=True)
class PreviousSummary:
    """The stored summary a new one replaces."""

    text: str
    kind: SummaryKind = "llm"


@dataclass(frozen=True, slots=True)
class SummaryResult:
    """A new summary, ready to be stored in place of the previous one.

    Attributes:
        text: the summary, within its token limit when ``kind`` is ``llm``.
        kind: ``llm`` (written by a model) or ``raw`` (an archive, possibly after an LLM summary).
        degraded: every model failed and ``text`` is the fallback archive (offline mode,
            where no model is configured, is ``raw`` but not degraded).
        model: the model that wrote the summary; ``None`` for a raw archive.
        tokens_in: prompt tokens over every attempt, as the servers reported them.
        tokens_out: completion tokens over every attempt.
        attempts: chat model calls made.
    """

    text: str
    kind: SummaryKind
    degraded: bool
    model: str | None
    tokens_in: int
    tokens_out: int
    attempts: int


@dataclass(frozen=True, slots=True)
class SummaryEvent:
    """What happened during a summary, for a callback and the log.

    Every ``attempt`` is followed by exactly one of: ``success``; ``retry`` (the same model is
    tried again); ``degrade`` (the next step of the chain follows: the fallback model, or the raw
    archive when no model is left). ``model``, tokens, duration and ``error`` describe the attempt.
    """

    kind: EventKind
    model: str | None
    tokens_in: int
    tokens_out: int
    covered: int
    duration_s: float
    error: str | None = None


@dataclass(frozen=True, slots=True)
class SummarySettings:
    """How summaries are written; the defaults are the documented ones.

    Attributes:
        model: the summariser model.
        fallback_model: tried when ``model`` failed ``retries`` times; ``None`` for none.
        retries: attempts with ``model`` (3 means the first call and two more).
        fallback_retries: attempts with ``fallback_model`` (0 skips it).
        timeout: seconds per call.
        temperature: sampling temperature.
        ratio: a summary is at most this share of what it replaces (previous summary plus
            folded messages, in tokens).
        max_summary_tokens: hard cap on a summary, whatever it replaces.
        min_summary_tokens: the limit never drops below this (or below what is replaced), so
            folding three short messages still leaves room for a usable summary.
        overshoot: a reply up to ``limit * (1 + overshoot)`` tokens is cut to the limit (at a
            line or sentence end when one is near); a longer one is a failed attempt, because a
            model that ignored the limit that much is likely to have ignored the rest too.
        archive_chars: each line of a raw archive is cut to this many characters.
        prompt_chars_per_message: each message in the prompt is cut to this many characters.
        backoff_s: the wait before the second attempt with a model; it doubles for each next one.
        max_backoff_s: the longest wait between two attempts.
    """

    model: str = "gpt-4o-mini"
    fallback_model: str | None = None
    retries: int = 3
    fallback_retries: int = 3
    timeout: float = 60.0
    temperature: float = 0.3
    ratio: float = 0.3
    max_summary_tokens: int = 1_024
    min_summary_tokens: int = 64
    overshoot: float = 0.5
    archive_chars: int = 500
    prompt_chars_per_message: int = 2_000
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0

    def __post_init__(self) -> None:
        rules = {
            "retries >= 1": self.retries >= 1,
            "fallback_retries >= 0": self.fallback_retries >= 0,
            "timeout > 0": self.timeout > 0,
            "0 < ratio <= 1": 0 < self.ratio <= 1,
            "1 <= min_summary_tokens <= max_summary_tokens": (
                1 <= self.min_summary_tokens <= self.max_summary_tokens
            ),
            "overshoot >= 0": self.overshoot >= 0,
            "archive_chars >= 20": self.archive_chars >= 20,
            "prompt_chars_per_message >= 20": self.prompt_chars_per_message >= 20,
            "backoff_s >= 0": self.backoff_s >= 0,
        }
        broken = [rule for rule, holds in rules.items() if not holds]
        if broken:
            raise ConfigurationError("summary settings need " + ", ".join(broken))


class Summarizer:
    """Writes rolling summaries with a chat model, degrading to a raw archive.

    Args:
        chat_model: the model client; ``None`` works offline (every summary is a raw archive).
        counter: counts tokens for the length limit.
        settings: models, retries, limits.
        sleep: waits between attempts (tests pass a no-op).
        on_event: receives every ``SummaryEvent``; events are logged either way.
        clock: a monotonic clock for event durations.
    """

    def __init__(
        self,
        chat_model: ChatModel | None,
        counter: TokenCounter,
        settings: SummarySettings | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        on_event: Callable[[SummaryEvent], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.chat_model = chat_model
        self.counter = counter
        self.settings = settings or SummarySettings()
        self._sleep = sleep
        self._on_event = on_event
        self._clock = clock

    def summarise(
        self, previous: PreviousSummary | None, folded: Sequence[Message]
    ) -> SummaryResult:
        """The summary that replaces ``previous`` once ``folded`` leaves the window.

        Never raises because a model failed: ``LLMError`` (and only it) is the degradation point.

        Raises:
            ValueError: ``folded`` is empty (there is nothing to summarise).
        """
        if not folded:
            raise ValueError("summarise needs at least one folded message")
        chat_model = self.chat_model
        if chat_model is None:
            logger.debug("no chat model configured: archiving %d messages", len(folded))
            return SummaryResult(self._archive(previous, folded), "raw", False, None, 0, 0, 0)
        limit = self.token_limit(previous, folded)
        prompt = self.prompt(previous, folded, limit)
        chain = [(self.settings.model, self.settings.retries)]
        if self.settings.fallback_model is not None:
            chain.append((self.settings.fallback_model, self.settings.fallback_retries))
        covered = len(folded)
        tokens_in = tokens_out = attempts = 0
        for model, tries in chain:
            for attempt in range(tries):
                if attempt:
                    self._sleep(self._backoff(attempt))
                self._emit(SummaryEvent("attempt", model, 0, 0, covered, 0.0))
                text, event = self._attempt(chat_model, prompt, model, limit, covered)
                attempts += 1
                tokens_in, tokens_out = tokens_in + event.tokens_in, tokens_out + event.tokens_out
                if text is not None:
                    self._emit(event)
                    return SummaryResult(text, "llm", False, model, tokens_in, tokens_out, attempts)
                last = attempt + 1 == tries
                self._emit(replace(event, kind="degrade") if last else event)
        archive = self._archive(previous, folded)
        return SummaryResult(archive, "raw", True, None, tokens_in, tokens_out, attempts)

    def token_limit(self, previous: PreviousSummary | None, folded: Sequence[Message]) -> int:
        """The most tokens the new summary may have: ``ratio`` of what it replaces, capped."""
        settings = self.settings
        replaced = sum(self.counter.count_message(message) for message in folded)
        if previous is not None:
            replaced += self.counter.count_text(previous.text)
        floor = min(settings.min_summary_tokens, replaced)
        return min(settings.max_summary_tokens, max(floor, math.ceil(settings.ratio * replaced)))

    def prompt(
        self, previous: PreviousSummary | None, folded: Sequence[Message], limit: int
    ) -> list[dict[str, Any]]:
        """The chat request that asks for the new summary (instructions, then the material)."""
        return summary_request(
            previous.text if previous else None,
            folded,
            limit=limit,
            previous_is_archive=previous is not None and previous.kind == "raw",
            chars_per_message=self.settings.prompt_chars_per_message,
        )

    def _attempt(
        self,
        chat_model: ChatModel,
        prompt: list[dict[str, Any]],
        model: str,
        limit: int,
        covered: int,
    ) -> tuple[str | None, SummaryEvent]:
        """One call: the fitted text (``None`` when it failed) and its ``success`` or ``retry``."""
        started = self._clock()
        # Ask the server to stop where an over-long reply would be rejected anyway.
        max_tokens = math.ceil(limit * (1 + self.settings.overshoot))
        tokens_in = tokens_out = 0
        try:
            completion = chat_model.complete(
                prompt,
                model=model,
                temperature=self.settings.temperature,
                max_tokens=max_tokens,
                timeout=self.settings.timeout,
            )
            tokens_in, tokens_out = completion.tokens_in, completion.tokens_out
            text: str | None = self._fit(completion.text, limit, model)
            error = None
        except LLMError as failure:
            text, error = None, str(failure)
        elapsed = self._clock() - started
        kind: EventKind = "retry" if error else "success"
        return text, SummaryEvent(kind, model, tokens_in, tokens_out, covered, elapsed, error)

    def _fit(self, text: str, limit: int, model: str) -> str:
        text = text.strip()
        tokens = self.counter.count_text(text)
        if tokens <= limit:
            return text
        if tokens > limit * (1 + self.settings.overshoot):
            raise LLMError(f"{model}: over-long reply ({tokens} tokens, limit {limit})")
        return cut_to_tokens(text, limit, self.counter)

    def _archive(self, previous: PreviousSummary | None, folded: Sequence[Message]) -> str:
        """The previous summary with the increment's raw archive appended, newest lines kept.

        A previous LLM summary is kept whole (it is within the cap already). The archive lines
        after it are bounded by ``ARCHIVE_CAP_FACTOR`` times the summary cap, newest kept, so a
        long outage of every model cannot grow the summary without bound; what is left out is
        only left out of the summary, since the messages stay in the history.
        """
        lines = raw_archive(folded, self.settings.archive_chars).split("\n")
        head: list[str] = []
        if previous is not None and previous.kind == "llm":
            head = [previous.text, ""]
        elif previous is not None:
            lines = [line for line in previous.text.split("\n") if line != ARCHIVE_OMITTED] + lines
        budget = ARCHIVE_CAP_FACTOR * self.settings.max_summary_tokens
        budget -= self.counter.count_text("\n".join([*head, ARCHIVE_OMITTED, ""]))
        kept = len(lines)
        while kept > 0:
            cost = self.counter.count_text(lines[kept - 1]) + 1  # + the line break
            if cost > budget:
                break
            budget -= cost
            kept -= 1
        omitted = [ARCHIVE_OMITTED] if kept else []
        return "\n".join([*head, *omitted, *lines[kept:]])

    def _backoff(self, attempt: int) -> float:
        delay = self.settings.backoff_s * 2 ** (attempt - 1)
        return float(min(delay, self.settings.max_backoff_s))

    def _emit(self, event: SummaryEvent) -> None:
        level = logging.WARNING if event.error else logging.DEBUG
        # The fields in declaration order: kind, model, tokens in/out, covered, duration, error.
        template = "summary %s: model %s, tokens %d in / %d out, %d messages, %.2fs, error: %s"
        logger.log(level, template, *astuple(event))
        if self._on_event is not None:
            self._on_event(event)

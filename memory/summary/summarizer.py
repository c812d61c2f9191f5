"""The rolling summary: fold messages into a self-contained summary, degrading but never failing.

The summariser sees the previous summary plus only the newly folded messages, so its cost
depends on the increment. When the model fails it retries with backoff, then tries the fallback
model, then writes a raw archive (the folded messages as plain text lines); a previous summary
is kept and the archive appended to it, so nothing is lost. A reply that is a refusal, not a
plain summary, or forgets most of the previous summary's key facts counts as a failure (see
``memory.summary.acceptance``). A raw archive is sent again by the next folds a bounded number
of times (``memory.summary.archive``). Every text it returns is storable (``sanitize_text``).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from memory.context.cut import cut_to_tokens
from memory.context.messages import Message
from memory.context.tokens import TokenCounter
from memory.errors import LLMError
from memory.llm import ChatModel, LLMChain, LLMChainFailed, LLMEvent
from memory.settings import SummarySettings
from memory.summary.acceptance import check_reply
from memory.summary.archive import extend_archive, sendable_archive
from memory.summary.transcript import raw_archive, sanitize_text, summary_request

__all__ = [
    "PreviousSummary",
    "Summarizer",
    "SummaryEvent",
    "SummaryKind",
    "SummaryResult",
]

logger = logging.getLogger(__name__)

SummaryKind = Literal["llm", "raw"]


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
class SummaryEvent(LLMEvent):
    """An ``LLMEvent`` of the summariser, with how many messages the summary folds.

    Every ``attempt`` is followed by exactly one of: ``success``; ``retry`` (the same model is
    tried again); ``degrade`` (the next step of the chain follows: the fallback model, or the raw
    archive when no model is left). ``model``, tokens, duration and ``error`` describe the attempt.
    """

    covered: int = 0


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
        if self.chat_model is None:
            logger.debug("no chat model configured: archiving %d messages", len(folded))
            return SummaryResult(self._archive(previous, folded), "raw", False, None, 0, 0, 0)
        limit = self.token_limit(previous, folded)
        settings = self.settings
        covered = len(folded)

        def on_event(event: LLMEvent) -> None:
            if self._on_event is not None:
                self._on_event(SummaryEvent(**asdict(event), covered=covered))

        chain = LLMChain.for_settings(
            self.chat_model, settings, sleep=self._sleep, clock=self._clock, on_event=on_event
        )
        try:
            result = chain.run(
                self.prompt(previous, folded, limit),
                lambda text, model: self.accept(text, previous, limit, model),
                # Ask the server to stop where an over-long reply would be rejected anyway.
                max_tokens=math.ceil(limit * (1 + settings.overshoot)),
            )
        except LLMChainFailed as failure:
            return self.degraded(
                previous,
                folded,
                failure.tokens_in,
                failure.tokens_out,
                failure.attempts,
                read=failure.replies > 0,
            )
        return SummaryResult(
            result.value,
            "llm",
            False,
            result.model,
            result.tokens_in,
            result.tokens_out,
            result.attempts,
        )

    def token_limit(self, previous: PreviousSummary | None, folded: Sequence[Message]) -> int:
        """The most tokens the new summary may have: ``ratio`` of what it replaces, capped."""
        settings = self.settings
        replaced = sum(self.counter.count_message(message) for message in folded)
        if previous is not None:
            replaced += self.counter.count_text(previous.text)
        floor = min(settings.min_tokens, replaced)
        return min(settings.max_tokens, max(floor, math.ceil(settings.ratio * replaced)))

    def prompt(
        self, previous: PreviousSummary | None, folded: Sequence[Message], limit: int
    ) -> list[dict[str, Any]]:
        """The chat request that asks for the new summary (instructions, then the material)."""
        return summary_request(
            self.sendable(previous),
            folded,
            limit=limit,
            previous_is_archive=previous is not None and previous.kind == "raw",
            chars_per_message=self.settings.prompt_chars_per_message,
        )

    def sendable(self, previous: PreviousSummary | None) -> str | None:
        """What a request shows of ``previous``: a raw archive without what was tried enough.

        ``None`` when there is nothing to show (no summary, or an archive every line of which
        was sent ``ARCHIVE_MAX_TRIES`` times already).
        """
        if previous is None or previous.kind == "llm":
            return previous.text if previous else None
        return sendable_archive(previous.text) or None

    def degraded(
        self,
        previous: PreviousSummary | None,
        folded: Sequence[Message],
        tokens_in: int,
        tokens_out: int,
        attempts: int,
        *,
        read: bool = False,
    ) -> SummaryResult:
        """What every model failing leaves: the previous summary with the increment's archive.

        ``read``: a model answered (its replies were refused), so what the request held
        counts one more try (``memory.summary.archive``).
        """
        archive = self._archive(previous, folded, read=read)
        return SummaryResult(archive, "raw", True, None, tokens_in, tokens_out, attempts)

    def accept(self, text: str, previous: PreviousSummary | None, limit: int, model: str) -> str:
        """The reply as the new summary, or ``LLMError`` when it may not replace ``previous``.

        The checks of ``memory.summary.acceptance`` (refusal, shape, retention), then the
        length: a reply over ``limit`` is cut to it, one over ``limit * (1 + overshoot)`` is
        refused.
        """
        # Only an LLM summary is held to keeping its facts: an archive holds whole messages.
        kept = previous.text if previous is not None and previous.kind == "llm" else None
        text = sanitize_text(text).strip()
        try:
            check_reply(text, kept, min_retention=self.settings.min_retention)
        except LLMError as error:
            raise LLMError(f"{model}: {error}") from error
        tokens = self.counter.count_text(text)
        if tokens <= limit:
            return text
        if tokens > limit * (1 + self.settings.overshoot):
            raise LLMError(f"{model}: over-long reply ({tokens} tokens, limit {limit})")
        cut = cut_to_tokens(text, limit, self.counter, keep="head")
        if cut is None:
            raise LLMError(f"{model}: a reply cannot be cut to {limit} tokens")
        return cut

    def _archive(
        self, previous: PreviousSummary | None, folded: Sequence[Message], *, read: bool = False
    ) -> str:
        """The previous summary with the increment's raw archive appended, newest lines kept.

        See ``memory.summary.archive``: a previous LLM summary is kept whole, the archive is
        bounded by ``ARCHIVE_CAP_FACTOR`` times the summary cap, and ``read`` counts a try.
        """
        return extend_archive(
            previous.text if previous else None,
            previous is not None and previous.kind == "raw",
            raw_archive(folded, self.settings.archive_chars).split("\n"),
            read=read,
            max_tokens=self.settings.max_tokens,
            counter=self.counter,
        )

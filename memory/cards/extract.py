"""Card extraction: one LLM call per batch of folded messages, the rules when the LLM fails.

The model reads the batch (each message numbered, with its date and speaker) and answers JSON
``{"cards": [...]}``; the reply is validated with pydantic inside the shared ``LLMChain``, so a
malformed reply is a failed attempt that is retried and then handed to the fallback model.
When every attempt fails, or no model is configured, the rule-based extractor reads the batch
instead and an event says so: extraction never raises because a model failed.

A fold extracts in the summariser's call instead (``memory.longterm.summary_and_cards``); its
reply's cards go through the same checks (``drafts_from_reply``) and, when every attempt fails, the
same rules (``CardExtractor.by_rules``). This extractor reads what no fold read: a session's end.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import date, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from memory.cards.caps import MAX_CARDS_PER_REPLY, cap_drafts
from memory.cards.claims import refuse_card
from memory.cards.model import DatePrecision, ExtractedCard, SourceMessage, normalize_text
from memory.cards.prompts import EXTRACTION_FORMAT, EXTRACTION_INSTRUCTIONS, render_numbered
from memory.cards.rules import extract_by_rules
from memory.cards.supersede import task_attribute
from memory.errors import LLMError
from memory.llm import ChatModel, LLMChain, LLMChainFailed, LLMEvent, json_text
from memory.settings import SummarySettings

__all__ = [
    "CardExtractor",
    "Extraction",
    "ExtractionEvent",
    "RulesFallback",
    "drafts_from_reply",
    "parse_reply",
]

logger = logging.getLogger(__name__)

#: Card types only the user's own words can establish.
_ABOUT_THE_USER = ("profile", "preference")


@dataclass(frozen=True, slots=True)
class ExtractionEvent(LLMEvent):
    """An ``LLMEvent`` of extraction, with how many messages the batch holds."""

    messages: int = 0


@dataclass(frozen=True, slots=True)
class RulesFallback:
    """The rules extracted a batch instead of a model.

    Attributes:
        reason: ``no_model`` (offline, the normal case without an LLM) or ``llm_failed``
            (every attempt of every model failed: a degradation worth counting).
        messages: messages in the batch.
        cards: cards the rules found.
        error: the last model error, for ``llm_failed``.
    """

    reason: Literal["no_model", "llm_failed"]
    messages: int
    cards: int
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Extraction:
    """The cards of one batch and what they cost.

    Attributes:
        cards: the drafts, in the order the reply (or the messages) gave them.
        method: ``llm`` or ``rules``.
        degraded: the rules took over because every model failed.
        model: the model whose reply was used; ``None`` for the rules.
        tokens_in: prompt tokens over every attempt, as the servers reported them.
        tokens_out: completion tokens over every attempt.
        calls: chat model calls made (0 offline).
    """

    cards: tuple[ExtractedCard, ...]
    method: Literal["llm", "rules"]
    degraded: bool
    model: str | None
    tokens_in: int
    tokens_out: int
    calls: int


class ReplyCard(BaseModel):
    """One card of a model's reply, as the prompt's schema describes it."""

    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True)

    type: Literal["fact", "preference", "task", "event", "profile"]
    text: str = Field(min_length=1)  # an over-long one is dropped alone (``caps``)
    topic: str | None = None
    tags: list[str] = Field(default_factory=list)
    occurred_at: str | None = None
    subject: str | None = None
    attribute: str | None = None
    source: list[int] = Field(min_length=1)


class _ExtractionReply(BaseModel):
    model_config = ConfigDict(extra="ignore")

    cards: list[ReplyCard]


class _Cards(BaseModel):
    """The ``cards`` list of a reply that holds other parts too (the fold's shared reply)."""

    model_config = ConfigDict(extra="ignore")

    cards: list[ReplyCard]


class CardExtractor:
    """Extracts cards from batches of messages with a chat model, falling back to rules.

    Args:
        chat_model: the model client; ``None`` works offline (the rules read every batch).
        settings: models, retries, timeout and backoff of the chain (the summariser's, so one
            configuration serves both LLM uses), and ``prompt_chars_per_message``.
        max_reply_tokens: the most tokens a reply may have.
        sleep: waits between attempts (tests pass a no-op).
        clock: a monotonic clock for event durations.
        on_event: receives every ``ExtractionEvent`` and ``RulesFallback``; both are logged.
    """

    def __init__(
        self,
        chat_model: ChatModel | None,
        settings: SummarySettings | None = None,
        *,
        max_reply_tokens: int = 2_000,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        on_event: Callable[[ExtractionEvent | RulesFallback], None] | None = None,
    ) -> None:
        self.chat_model = chat_model
        self.settings = settings or SummarySettings()
        self.max_reply_tokens = max_reply_tokens
        self._sleep = sleep
        self._clock = clock
        self._on_event = on_event

    def extract(self, messages: Sequence[SourceMessage]) -> Extraction:
        """The cards of one batch (one model call when it answers well at the first attempt).

        Never raises because a model failed: ``LLMChainFailed`` is the degradation point.
        """
        if not messages:
            return Extraction((), "rules", False, None, 0, 0, 0)
        if self.chat_model is None:
            return self.by_rules(messages, "no_model", None, 0, 0, 0)
        settings = self.settings
        size = len(messages)

        def on_event(event: LLMEvent) -> None:
            if self._on_event is not None:
                self._on_event(ExtractionEvent(**asdict(event), messages=size))

        # Extraction reads, it does not write prose: no sampling.
        chain = LLMChain.for_settings(
            self.chat_model,
            settings,
            temperature=0.0,
            sleep=self._sleep,
            clock=self._clock,
            on_event=on_event,
        )
        try:
            result = chain.run(
                self.prompt(messages),
                lambda text, model: parse_reply(text, messages, model),
                max_tokens=self.max_reply_tokens,
                response_format=EXTRACTION_FORMAT,
            )
        except LLMChainFailed as failure:
            return self.by_rules(
                messages,
                "llm_failed",
                str(failure),
                failure.tokens_in,
                failure.tokens_out,
                failure.attempts,
            )
        return Extraction(
            result.value,
            "llm",
            False,
            result.model,
            result.tokens_in,
            result.tokens_out,
            result.attempts,
        )

    def prompt(self, messages: Sequence[SourceMessage]) -> list[dict[str, Any]]:
        """The chat request: the instructions, then the numbered, dated messages."""
        lines = render_numbered(messages, self.settings.prompt_chars_per_message)
        return [
            {"role": "system", "content": EXTRACTION_INSTRUCTIONS},
            {"role": "user", "content": f"Messages:\n{lines}"},
        ]

    def by_rules(
        self,
        messages: Sequence[SourceMessage],
        reason: Literal["no_model", "llm_failed"],
        error: str | None,
        tokens_in: int = 0,
        tokens_out: int = 0,
        calls: int = 0,
    ) -> Extraction:
        """The rules' cards of a batch, with a ``RulesFallback`` event (logged, passed on).

        For ``llm_failed`` the tokens and calls are what the failed model attempts cost.
        """
        cards = tuple(extract_by_rules(messages))
        event = RulesFallback(reason, len(messages), len(cards), error)
        level = logging.WARNING if reason == "llm_failed" else logging.DEBUG
        logger.log(level, "card extraction by rules (%s): %d messages, %d cards, error: %s",
                   reason, len(messages), len(cards), error)  # fmt: skip
        if self._on_event is not None:
            self._on_event(event)
        return Extraction(
            cards, "rules", reason == "llm_failed", None, tokens_in, tokens_out, calls
        )


def parse_reply(
    text: str, messages: Sequence[SourceMessage], model: str = "model"
) -> tuple[ExtractedCard, ...]:
    """The drafts a model's reply ``{"cards": [...]}`` describes (see ``drafts_from_reply``).

    Raises:
        LLMError: the reply is not the JSON asked for, a card cites a message that is not in
            the batch, or a date is not an ISO date.
    """
    try:
        reply = _ExtractionReply.model_validate_json(json_text(text, model))
    except ValidationError as error:
        raise _malformed(error, model) from error
    return _drafts(reply.cards, messages, model)


def drafts_from_reply(
    reply: object, messages: Sequence[SourceMessage], model: str = "model"
) -> tuple[ExtractedCard, ...]:
    """The drafts of an already decoded reply object holding a ``cards`` list.

    The same checks as ``parse_reply``, for a reply that carries other parts beside the cards
    (the fold's shared reply also holds the summary). Profile and preference cards that only
    the assistant's messages support are dropped: they are the assistant's guesses, not what
    the user said. A card said twice in one batch is one card with both sources.

    Raises:
        LLMError: there is no valid ``cards`` list, a card cites a message not in the batch,
            or a date is not an ISO date.
    """
    try:
        cards = _Cards.model_validate(reply).cards
    except ValidationError as error:
        raise _malformed(error, model) from error
    return _drafts(cards, messages, model)


def _malformed(error: ValidationError, model: str) -> LLMError:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "reply"
    return LLMError(f"{model}: malformed cards reply: {where}: {first['msg']}")


def _drafts(
    cards: Sequence[ReplyCard], messages: Sequence[SourceMessage], model: str
) -> tuple[ExtractedCard, ...]:
    drafts: dict[str, ExtractedCard] = {}
    for card in cards:
        if any(not 1 <= number <= len(messages) for number in card.source):
            raise LLMError(f"{model}: a card cites a message not in the batch: {card.source}")
        sources = [messages[number - 1] for number in sorted(set(card.source))]
        if card.type in _ABOUT_THE_USER and all(m.role != "user" for m in sources):
            continue
        if refuse_card(card.text, [m.text for m in sources], by=model):
            continue
        draft = _draft(card, sources, model)
        same = drafts.get(draft.normalized)
        drafts[draft.normalized] = draft if same is None else _merged(same, draft)
    # A fold may read more lines than an extraction batch: a card per line is no runaway.
    capped = cap_drafts(tuple(drafts.values()), max_cards=max(MAX_CARDS_PER_REPLY, len(messages)))
    if capped.changed:
        logger.warning("cards of a %s reply over their bounds: %s", model, capped.describe())
    return capped.cards


def _merged(first: ExtractedCard, again: ExtractedCard) -> ExtractedCard:
    return replace(
        first,
        source_indices=tuple(dict.fromkeys(first.source_indices + again.source_indices)),
        source_ids=tuple(dict.fromkeys(first.source_ids + again.source_ids)),
        observed_at=max(first.observed_at, again.observed_at),
    )


def _draft(card: ReplyCard, sources: list[SourceMessage], model: str) -> ExtractedCard:
    observed_at = max(message.time for message in sources)
    when = _when(card.occurred_at, observed_at, model)
    attribute = card.attribute and normalize_text(card.attribute)
    if card.type == "task":
        # Task keys come from the task's words, the same way for the rules and every model,
        # so that "done" finds the open task whoever extracted it.
        attribute = task_attribute(card.text)
    return ExtractedCard(
        type=card.type,
        text=card.text,
        observed_at=observed_at,
        topic=card.topic or None,
        tags=tuple(tag for tag in card.tags if tag),
        occurred_at=when[0] if when else None,
        precision=when[1] if when else None,
        subject=normalize_text(card.subject) if card.subject else None,
        attribute=attribute or None,
        source_indices=tuple(message.index for message in sources),
        source_ids=tuple(message.id for message in sources if message.id is not None),
    )


def _when(
    value: str | None, observed_at: datetime, model: str
) -> tuple[datetime, DatePrecision] | None:
    """``YYYY``, ``YYYY-MM`` or an ISO date as the start of that period, in the message's zone."""
    if value is None or value.strip().lower() in ("", "null", "none", "unknown"):
        return None  # models write "no date" in several ways
    value = value.strip()
    try:
        if re.fullmatch(r"\d{4}", value):
            return datetime(int(value), 1, 1, tzinfo=observed_at.tzinfo), "year"
        if re.fullmatch(r"\d{4}-\d{2}", value):
            year, month = map(int, value.split("-"))
            return datetime(year, month, 1, tzinfo=observed_at.tzinfo), "month"
        day = date.fromisoformat(value[:10])
    except ValueError as error:
        raise LLMError(f"{model}: occurred_at is not an ISO date: {json.dumps(value)}") from error
    return datetime(day.year, day.month, day.day, tzinfo=observed_at.tzinfo), "day"

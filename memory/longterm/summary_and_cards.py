"""One model call per fold: the new rolling summary and the cards of the folded messages together.

A fold sends the folded messages to the summariser; extraction needs the same messages. So one
request carries them once, with both sets of instructions, and one JSON reply
``{"summary": "...", "cards": [...]}`` answers both. Each part is held to its own checks: the
summary to ``memory.summary.acceptance`` and its length limit, the cards to the extractor's
(``drafts_from_reply``). A reply with either part bad is a failed attempt of the shared
``LLMChain`` (retries, then the fallback model), and the good part of any attempt is kept: when
the chain gives up, a part that was good once is used, and only the other part degrades as it
would alone (the summary to the previous summary plus the raw archive of the increment, the
cards to the rule-based extractor, with a ``RulesFallback`` event). Nothing raises because a
model failed.

The request asks for JSON by its words and by JSON mode (``FOLD_FORMAT``, sent as
``response_format`` where the endpoint takes it). A model that answers in prose anyway is not
asked again: the summary comes from the summariser's own plain-text call instead (not a raw
archive: that summary was fine on its own), the cards from the rules. Such a model would answer
the next folds in prose too, each costing a second request: the next ``PROSE_PAUSE_FOLDS``
folds ask it for the summary alone, then JSON is tried again.

``ArchivingFold`` is the consolidator's fold step that uses it: the lines extraction may cite
are the fold's user and assistant messages not archived yet, and the cards are stored (and the
archive mark moved) before the consolidator stores the summary. A crash in between leaves the
cards and the old summary; the retry folds again and finds those messages archived, so it
extracts nothing twice.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import date
from typing import Any

from memory.cards import CardExtractor, ExtractedCard, Extraction, SourceMessage
from memory.cards.extract import drafts_from_reply
from memory.cards.prompts import CARD_JSON_SCHEMA, CARD_RULES, CARD_SCHEMA
from memory.context.messages import Message
from memory.context.tokens import DEFAULT_MODEL
from memory.errors import LLMError
from memory.llm import LLMChain, LLMChainFailed, LLMEvent, ReplyFormat, json_text
from memory.longterm.archiving import MessageArchiver, source_message
from memory.summary.summarizer import PreviousSummary, Summarizer, SummaryEvent, SummaryResult
from memory.summary.transcript import SUMMARY_RULES, render_fold_transcript, summary_material
from storage import StoredMessage

__all__ = [
    "FOLD_FORMAT",
    "FOLD_INSTRUCTIONS",
    "PROSE_PAUSE_FOLDS",
    "ArchivingFold",
    "FoldLine",
    "FoldResult",
    "SharedFold",
]

logger = logging.getLogger(__name__)

#: The shared call's system message; ``{limit}`` (replaced, not ``format``: the card schema
#: holds braces) is the summary's token limit.
FOLD_INSTRUCTIONS = f"""\
You keep the memory of a conversation between a user and an AI assistant. You get the current \
summary (maybe empty) and the new messages, one per line, long ones cut; "-- YYYY-MM-DD" dates \
the lines after it; the lines cards may cite are numbered [n].
Reply with JSON only: {{"summary": "...", "cards": [card, ...]}}
summary: the new summary. It replaces the current one, so it must hold all that still matters \
of both. {SUMMARY_RULES} Compact plain notes in the conversation's language, at most {{limit}} \
tokens.
cards: long-term memories from the numbered lines. {CARD_RULES}
Each card: {CARD_SCHEMA} "cards": [] when nothing is worth keeping."""

#: The shared call's reply as a JSON Schema, for JSON mode: what ``SharedFold`` accepts.
FOLD_FORMAT = ReplyFormat(
    "fold",
    {
        "type": "object",
        "properties": {
            "summary": {"type": "string"},
            "cards": {"type": "array", "items": CARD_JSON_SCHEMA},
        },
        "required": ["summary", "cards"],
        "additionalProperties": False,
    },
)

#: Tool results in the fold's request are cut to this many characters, as every other message
#: is by default (``prompt_chars_per_message``). Cards never cite them, but the summary keeps
#: their names, numbers and identifiers: on the benchmark's conversation a cut at 1,000
#: characters would save 28% of the tool results' tokens and leave 40% of their key facts
#: unseen, against 16% at 2,000 (``benchmarks/extraction.py`` prints the table), so the saving
#: is taken losslessly instead, by sending JSON compact (``compact_json``).
TOOL_RESULT_CHARS = 2_000
#: After a model answered the fold's JSON request in prose, this many next folds (of this
#: ``SharedFold``, per model) ask it for the summary alone and leave the cards to the rules.
PROSE_PAUSE_FOLDS = 10


@dataclass(frozen=True, slots=True)
class FoldLine:
    """One folded message as the shared call reads it.

    Attributes:
        message: the message.
        source: what extraction reads of it, when a card may cite it (a user or assistant
            message not archived yet); ``None`` for context only.
        day: its date (the transcript dates its lines once per day).
    """

    message: Message
    source: SourceMessage | None
    day: date


@dataclass(frozen=True, slots=True)
class FoldResult:
    """What one fold's call produced.

    Attributes:
        summary: the new summary; its tokens and attempts are the whole shared call's.
        extraction: the fold's cards; its own tokens and calls are 0 when they came from the
            shared call (the cost is counted once, in ``summary``).
    """

    summary: SummaryResult
    extraction: Extraction


@dataclass
class _Parts:
    """The good part of each kind seen so far: the latest valid summary and cards."""

    summary: tuple[str, str] | None = None  # (text, model)
    cards: tuple[tuple[ExtractedCard, ...], str] | None = None  # (drafts, model)


class SharedFold:
    """Summarises a fold and extracts its cards in one model call (see the module).

    The call runs at the summariser's temperature (it writes prose), not extraction's 0: a
    retry never asks again for cards already stored, since the archive mark moves with them.
    It remembers, per model, the folds left before a model that answered in prose is asked for
    JSON again (``PROSE_PAUSE_FOLDS``); it is safe to share between threads.

    Args:
        summarizer: the summariser (its model, settings, limits and raw archive).
        extractor: the extractor (its reply limit and its rules for the fallback).
        tool_result_chars: tool results in the request are cut to this many characters.
        sleep: waits between attempts (tests pass a no-op).
        clock: a monotonic clock for event durations.
        on_event: receives every ``SummaryEvent`` of the shared call.
    """

    def __init__(
        self,
        summarizer: Summarizer,
        extractor: CardExtractor,
        *,
        tool_result_chars: int = TOOL_RESULT_CHARS,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        on_event: Callable[[SummaryEvent], None] | None = None,
    ) -> None:
        self.summarizer = summarizer
        self.extractor = extractor
        self.tool_result_chars = tool_result_chars
        self._sleep = sleep
        self._clock = clock
        self._on_event = on_event
        self._lock = threading.Lock()
        self._prose_pause: dict[str, int] = {}

    def fold(self, previous: PreviousSummary | None, lines: Sequence[FoldLine]) -> FoldResult:
        """The summary replacing ``previous`` and the cards of ``lines``, in one call.

        Without a model, a raw archive and the rules, as each alone would do; with no line to
        cite, the summariser alone (its request is the shorter one).

        Raises:
            ValueError: ``lines`` is empty.
        """
        if not lines:
            raise ValueError("a fold needs at least one message")
        folded = [line.message for line in lines]
        sources = [line.source for line in lines if line.source is not None]
        summarizer = self.summarizer
        if summarizer.chat_model is None or not sources:
            return FoldResult(
                summarizer.summarise(previous, folded), self.extractor.extract(sources)
            )
        settings = summarizer.settings
        model = settings.model or DEFAULT_MODEL
        if self._paused(model):
            reason = f"{model} answered a JSON request in prose: the summary is asked alone"
            return FoldResult(
                summarizer.summarise(previous, folded),
                self.extractor.by_rules(sources, "llm_failed", reason),
            )
        limit = summarizer.token_limit(previous, folded)

        def on_event(event: LLMEvent) -> None:
            if self._on_event is not None:
                self._on_event(SummaryEvent(**asdict(event), covered=len(folded)))

        chain = LLMChain.for_settings(
            summarizer.chat_model, settings, sleep=self._sleep, clock=self._clock, on_event=on_event
        )
        good = _Parts()
        try:
            result = chain.run(
                self.prompt(previous, lines, limit),
                lambda text, model: self._accept(text, model, previous, limit, sources, good),
                max_tokens=math.ceil(limit * (1 + settings.overshoot))
                + self.extractor.max_reply_tokens,
                response_format=FOLD_FORMAT,
            )
        except LLMChainFailed as failure:
            return self._degraded(previous, folded, sources, good, failure)
        summary, cards = result.value
        logger.info(
            "fold call: model %s, %d messages, %d card(s), %d+%d tokens, %d attempt(s)",
            result.model, len(folded), len(cards), result.tokens_in, result.tokens_out,
            result.attempts,
        )  # fmt: skip
        return FoldResult(
            SummaryResult(
                summary,
                "llm",
                False,
                result.model,
                result.tokens_in,
                result.tokens_out,
                result.attempts,
            ),
            Extraction(cards, "llm", False, result.model, 0, 0, 0),
        )

    def prompt(
        self, previous: PreviousSummary | None, lines: Sequence[FoldLine], limit: int
    ) -> list[dict[str, Any]]:
        """The chat request: the instructions, the current summary, the numbered messages."""
        numbers: dict[int, int] = {}
        for position, line in enumerate(lines):
            if line.source is not None:
                numbers[position] = len(numbers) + 1
        transcript = render_fold_transcript(
            [line.message for line in lines],
            [line.day for line in lines],
            numbers,
            chars_per_message=self.summarizer.settings.prompt_chars_per_message,
            tool_result_chars=self.tool_result_chars,
        )
        material = summary_material(
            self.summarizer.sendable(previous),
            previous is not None and previous.kind == "raw",
            transcript,
        )
        return [
            {"role": "system", "content": FOLD_INSTRUCTIONS.replace("{limit}", str(limit))},
            {"role": "user", "content": material},
        ]

    def _accept(
        self,
        text: str,
        model: str,
        previous: PreviousSummary | None,
        limit: int,
        sources: Sequence[SourceMessage],
        good: _Parts,
    ) -> tuple[str, tuple[ExtractedCard, ...]]:
        """Both parts of a reply, or ``LLMError`` naming what was wrong (good parts kept)."""
        try:
            reply = json.loads(json_text(text, model))
        except ValueError as error:
            raise LLMError(f"{model}: the fold reply is not JSON: {error}") from error
        if not isinstance(reply, dict):
            raise LLMError(f"{model}: the fold reply is not a JSON object")
        problems: list[str] = []
        summary = cards = None
        try:
            written = reply.get("summary")
            if not isinstance(written, str):
                raise LLMError(f"{model}: the fold reply has no summary text")
            summary = self.summarizer.accept(written, previous, limit, model)
            good.summary = (summary, model)
        except LLMError as error:
            problems.append(f"summary: {error}")
        try:
            cards = drafts_from_reply(reply, sources, model)
            good.cards = (cards, model)
        except LLMError as error:
            problems.append(f"cards: {error}")
        if summary is None or cards is None:
            raise LLMError("; ".join(problems))
        return summary, cards

    def _paused(self, model: str) -> bool:
        """Whether this fold asks ``model`` for the summary alone (and counts the fold)."""
        with self._lock:
            left = self._prose_pause.get(model, 0)
            if left:
                self._prose_pause[model] = left - 1
            return left > 0

    def _degraded(
        self,
        previous: PreviousSummary | None,
        folded: Sequence[Message],
        sources: Sequence[SourceMessage],
        good: _Parts,
        failure: LLMChainFailed,
    ) -> FoldResult:
        """Every attempt failed: keep a part that was good once, degrade the other alone.

        A model that answered in prose is asked for the summary alone, in the summariser's own
        plain-text request; otherwise the summary degrades to the raw archive.
        """
        spent = (failure.tokens_in, failure.tokens_out, failure.attempts)
        if good.summary is not None:
            text, model = good.summary
            summary = SummaryResult(text, "llm", False, model, *spent)
        elif failure.not_json:
            with self._lock:
                self._prose_pause[self.summarizer.settings.model or DEFAULT_MODEL] = (
                    PROSE_PAUSE_FOLDS
                )
            alone = self.summarizer.summarise(previous, folded)
            summary = replace(
                alone,
                tokens_in=alone.tokens_in + failure.tokens_in,
                tokens_out=alone.tokens_out + failure.tokens_out,
                attempts=alone.attempts + failure.attempts,
            )
        else:
            summary = self.summarizer.degraded(previous, folded, *spent, read=failure.replies > 0)
        if good.cards is not None:
            drafts, model = good.cards
            extraction = Extraction(drafts, "llm", False, model, 0, 0, 0)
        else:
            extraction = self.extractor.by_rules(sources, "llm_failed", str(failure))
        logger.warning(
            "fold call failed after %d attempt(s): summary %s, cards %s; last error: %s",
            failure.attempts,
            "kept" if good.summary else f"{summary.kind} (alone)" if failure.not_json else "raw",
            "kept" if good.cards else "by rules", failure,
        )  # fmt: skip
        return FoldResult(summary, extraction)


class ArchivingFold:
    """The consolidator's fold step: one call for the summary and the cards, cards stored first.

    The lines extraction may cite are the fold's user and assistant messages after the
    session's archive mark (a session ended earlier archived some already: they are context,
    never extracted twice). The fold's messages are then archived as cards with what the call
    extracted, the mark moved to the fold's last message, and the summary handed back to the
    consolidator, which stores it.
    """

    def __init__(self, shared: SharedFold, archiver: MessageArchiver) -> None:
        self.shared = shared
        self._archiver = archiver

    def __call__(
        self,
        user_id: str,
        session_id: str,
        previous: PreviousSummary | None,
        stored: Sequence[StoredMessage],
        folded: Sequence[Message],
    ) -> SummaryResult:
        """Summarise the fold, extract and store its cards; see the class."""
        archiver = self._archiver
        mark = archiver.archive_mark(user_id, session_id)
        if mark < stored[0].seq - 1:
            # Messages before the fold are not archived (folded while long-term memory was
            # off, or by a raw archive whose cards job has not run): archive them on their own
            # first, or moving the mark past them would skip them.
            archiver.archive_through(user_id, session_id, stored[0].seq - 1)
            mark = archiver.archive_mark(user_id, session_id)
        lines = [
            FoldLine(
                message,
                source_message(row, message) if row.seq > mark else None,
                row.created_at.date(),
            )
            for row, message in zip(stored, folded, strict=True)
        ]
        result = self.shared.fold(previous, lines)
        archiver.store_fold(user_id, session_id, mark, stored[-1], result.extraction.cards)
        return result.summary

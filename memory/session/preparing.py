"""One ``prepare``: store the input, load the window, fold, recall, assemble, and archive
what the hard cap would otherwise drop, so that no message leaves the context unsummarised."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from pydantic import BaseModel

from memory.context.assembler import AssembledContext, SummaryContext, assemble
from memory.context.messages import Message
from memory.context.parts import RetrievedMemory
from memory.context.report import Dropped, InterruptedCall, MessageRef, RecallState
from memory.context.tokens import TokenCounter
from memory.errors import InvalidHistoryError
from memory.longterm.long_term_memory import LongTermMemory
from memory.longterm.recall_ahead import RecallAhead
from memory.longterm.recalled_memories import Recall
from memory.session.folding import Folding
from memory.session.incoming import check_system, name_stored, parse_input
from memory.session.recent import RecentMessages, RecentWindow, WindowCounter
from memory.session.writer import SessionWriter
from memory.settings import Settings
from memory.summary.policy import FoldPolicy
from storage import SummaryRecord

__all__ = ["Preparer"]

logger = logging.getLogger(__name__)


class Preparer:
    """Assembles each request's context; ``Memory.prepare`` is its public face.

    Args:
        settings: the recent messages kept whole and the tool results' cap.
        folding: folds (or queues the fold) when the window passes the trigger, and archives
            raw what the hard cap would drop.
        recent: the recent windows: the input stored and the window read in one round trip.
        writer: stores an input that closes open calls (or is a replay); refuses one that
            could never fit.
        counter: counts the system message and the window's messages.
        history_budget: the tokens a request's history may take.
        fold_policy: when the window is due to fold.
        longterm: recalls the memories of a request (``None``: long-term memory is off).
        llm_configured: whether a chat model writes summaries (a raw one is then degraded).

    Attributes:
        recall_failures: recalls that failed (database or embedder) and went on without
            memories.
    """

    def __init__(
        self,
        settings: Settings,
        folding: Folding,
        *,
        recent: RecentMessages,
        writer: SessionWriter,
        counter: TokenCounter,
        history_budget: int,
        fold_policy: FoldPolicy,
        longterm: LongTermMemory | None,
        llm_configured: bool,
    ) -> None:
        self._settings = settings
        self._folding = folding
        self._recent = recent
        self._writer = writer
        self._counter = counter
        self._history_budget = history_budget
        self._fold_policy = fold_policy
        self._longterm = longterm
        self._llm_configured = llm_configured
        self.recall_failures = 0

    def prepare(
        self,
        *,
        user_id: str,
        session_id: str,
        input: str | Mapping[str, Any] | BaseModel | None = None,
        system: str | None = None,
    ) -> AssembledContext:
        """What ``Memory.prepare`` does (see its docstring: the promises and the errors)."""
        check_system(system)
        interrupted: tuple[InterruptedCall, ...] = ()
        text = input.get("content") if isinstance(input, Mapping) else input
        ahead = None
        if isinstance(text, str) and self._longterm is not None:
            # Recall will most likely search the input as written: MiniLM embeds it, and the
            # pins are read and the cards searched, on other threads while the input is stored
            # and the window read (recall searches again if the rewrite changed the query).
            self._longterm.prefetch(text)
            ahead = self._longterm.recall_ahead(user_id, text)
        if input is not None:
            interrupted, summary, window = self._store_input(user_id, session_id, input, system)
        else:
            summary, window = self._folding.load_window(user_id, session_id)
        if window.tokens > self._fold_policy.trigger_tokens:
            summary, window = self._folding.schedule(user_id, session_id, summary, window)
        recall = self._recall(user_id, window, ahead)
        memories = recall.memories if recall else ()
        context = self._assemble(summary, window, system, memories)
        archived = 0
        if _drops_window_units(context):
            # The window outgrew the budget before a summary arrived (a fast loop, a worker
            # behind): what the cap would drop is archived raw first, so it is never lost.
            archived, summary, window = self._folding.archive_inline(user_id, session_id, summary)
            context = self._assemble(summary, window, system, memories)
        if _drops_window_units(context):
            # Still dropping (a long system prompt or summary leaves the window little room):
            # archive exactly what the cap drops.
            through = _last_dropped_seq(context, window)
            more, summary, window = self._folding.archive_inline(
                user_id, session_id, summary, through
            )
            archived += more
            context = self._assemble(summary, window, system, memories)
        return _named_by_seq(
            context, window, interrupted, archived, recall.state if recall else None
        )

    def _assemble(
        self,
        summary: SummaryRecord | None,
        window: RecentWindow,
        system: str | None,
        memories: Sequence[RetrievedMemory],
    ) -> AssembledContext:
        """The context of one request from the loaded summary, window and recalled memories."""
        # The window's messages were counted and rendered once, as they entered the recent
        # cache. They were checked as they were stored, and a run of stored messages that
        # starts a unit is a valid history on its own (only its last calls may be open).
        known = WindowCounter(self._counter, window)
        messages = window.messages
        starts_a_unit = bool(messages) and messages[0].role != "tool"
        return assemble(
            messages,
            budget=self._history_budget,
            counter=known,
            system=system,
            summary=self._summary_context(summary),
            memories=memories,
            recent_messages=self._settings.recent_messages,
            tool_result_max_tokens=self._settings.tool_result_max_tokens,
            valid_through=len(messages) if starts_a_unit else 0,
            render=known.render,
        )

    def _store_input(
        self,
        user_id: str,
        session_id: str,
        input: str | Mapping[str, Any] | BaseModel,
        system: str | None,
    ) -> tuple[tuple[InterruptedCall, ...], SummaryRecord | None, RecentWindow]:
        """Store the user's input and load the window: the calls it closed, summary, window.

        Refused first if it is not a user message, or can never fit with the system message.
        In the common case (an existing session with no open tool call, a new client id) the
        input is stored and the window read in one round trip; otherwise the writer closes
        any open calls first (or recognises a replay) and the window is loaded after.
        """
        payload = {"role": "user", "content": input} if isinstance(input, str) else input
        message, client_id, metadata, timestamp = parse_input(0, payload)
        if message.role != "user":
            raise InvalidHistoryError(
                [
                    f"message 0: input must be a user message, not {message.role!r} "
                    "(record other roles with record)"
                ]
            )
        counter = self._counter
        system_tokens = (
            counter.count_message(Message(role="system", content=system)) if system else 0
        )
        new = self._writer.new_message(
            0, message, client_id, metadata, timestamp, reserved=system_tokens
        )
        budget = self._history_budget
        appended = self._recent.append_and_load(user_id, session_id, new, budget=budget)
        if appended is not None:
            _, summary, window = appended
            return (), summary, window
        interrupted = self._writer.store_input(user_id, session_id, new)
        return interrupted, *self._folding.load_window(user_id, session_id)

    def _recall(
        self, user_id: str, window: RecentWindow, ahead: RecallAhead | None
    ) -> Recall | None:
        """Memories recalled for this request: pins first, then the cards best matching it
        (``ahead``: the pins and the search started with the request).

        A documented degradation point: a failure of the database or the embedder while
        recalling (ahead or not) is logged and counted (``recall_failures``), and the request
        goes on without memories; recall never fails a request.
        """
        longterm = self._longterm
        if longterm is None:
            return None
        try:
            messages = list(zip(window.stored, window.messages, strict=True))
            return longterm.recall(user_id, messages, ahead)
        except Exception:  # a degradation point: see the docstring
            self.recall_failures += 1
            logger.exception("recall failed for user %s; going on without memories", user_id)
            return Recall((), RecallState(None, None, (), failed=True))

    def _summary_context(self, summary: SummaryRecord | None) -> SummaryContext | None:
        if summary is None:
            return None
        return SummaryContext(
            text=summary.content,
            covered=summary.covered,
            kind=summary.kind,
            degraded=summary.kind == "raw" and self._llm_configured,
        )


def _last_dropped_seq(context: AssembledContext, window: RecentWindow) -> int:
    """The seq of the newest window message the cap dropped (0 when it dropped none)."""
    spans = [drop.span for drop in context.report.dropped if drop.span is not None]
    return max((window.stored[last].seq for _, last in spans), default=0)


def _drops_window_units(context: AssembledContext) -> bool:
    """Whether the hard cap left out messages of the window (not memories, not the summary)."""
    return any(drop.layer in ("window", "recent") for drop in context.report.dropped)


def _named_by_seq(
    context: AssembledContext,
    window: RecentWindow,
    interrupted: tuple[InterruptedCall, ...],
    archived: int,
    recall: RecallState | None = None,
) -> AssembledContext:
    """The context with its report naming stored messages by seq, not by window position.

    ``interrupted`` are the calls closed before this request's input, for the report.
    """
    stored = window.stored
    report = context.report

    def renamed(drop: Dropped) -> Dropped:
        if drop.span is None:
            return drop
        first, last = stored[drop.span[0]], stored[drop.span[1]]
        if first is last:
            span = f"message {name_stored(first)}"
        else:
            span = f"messages seq {first.seq}-{last.seq}"
        detail = _POSITIONS.sub(span, drop.detail, count=1)
        return replace(drop, detail=detail, span=(first.seq, last.seq))

    report = replace(
        report,
        dropped=tuple(map(renamed, report.dropped)),
        cut_tool_results=tuple(
            replace(cut, index=stored[cut.index].seq) for cut in report.cut_tool_results
        ),
        interrupted_calls=interrupted,
        archived=archived,
        recall=recall,
        newest=MessageRef(stored[-1].seq, stored[-1].id) if stored else None,
    )
    return AssembledContext(context.messages, report)


#: How the pure core names a window unit: by position in the history it was given.
_POSITIONS = re.compile(r"^messages? \d+(?:-\d+)?")

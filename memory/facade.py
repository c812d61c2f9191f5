"""``Memory``: the object an application keeps a long conversation going with."""

from __future__ import annotations

import itertools
import logging
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Self

from pydantic import BaseModel, ValidationError

from memory.calls import OpenCall
from memory.context.assembler import AssembledContext, SummaryContext, assemble
from memory.context.budget import Budget, plan_budget
from memory.context.messages import Message
from memory.context.parts import RetrievedMemory
from memory.context.report import Dropped, InterruptedCall, RecallState
from memory.context.tokens import REPLY_PRIMING_TOKENS, TiktokenCounter, TokenCounter
from memory.errors import (
    CardNotFoundError,
    ConfigurationError,
    ContextOverflowError,
    InvalidHistoryError,
)
from memory.idle import IdleSessions
from memory.intake import name_stored, parse_input
from memory.jobs import ConsolidationJobs, WorkerRun
from memory.llm import ChatModel, OpenAIChatModel
from memory.longterm import LongTermMemory, Recall, default_embedder
from memory.queued import QueuedConsolidations
from memory.recent import RecentMessages, RecentWindow, WindowCounter
from memory.settings import Settings
from memory.summary.consolidator import Consolidator
from memory.summary.policy import FoldPolicy
from memory.summary.summarizer import Summarizer, SummaryEvent
from memory.worker import CARDS, CONSOLIDATE, END_OF_SESSION, JobHandler, Worker
from memory.writer import SessionWriter
from retrieval import CardQuery, Embedder, ScoredCard
from storage import (
    ArchiveMarks,
    Card,
    CardFilter,
    CardType,
    Database,
    InvalidInputError,
    Job,
    JobQueue,
    MessageStore,
    NewMessage,
    StoredMessage,
    SummaryRecord,
    SummaryStore,
    check_encodable,
    check_text,
    erase_conversations,
)

__all__ = ["Forgotten", "Memory", "OpenCall", "Parts", "build_parts"]

logger = logging.getLogger(__name__)


class Memory:
    """Stores every message of every session and assembles each request's context.

    Open it with ``Memory.open()``; use it from any number of threads; close it (or use it as a
    context manager) when done.
    """

    def __init__(
        self,
        database: Database,
        settings: Settings,
        *,
        chat: ChatModel | None = None,
        counter: TokenCounter | None = None,
        on_summary_event: Callable[[SummaryEvent], None] | None = None,
        embedder: Embedder | None = None,
    ) -> None:
        self.settings = settings
        self._database = database
        self._parts = build_parts(
            database,
            settings,
            chat=chat,
            counter=counter,
            on_summary_event=on_summary_event,
            embedder=embedder,
        )
        #: Recalls that failed (database or embedder) and went on without memories.
        self.recall_failures = 0
        self.budget: Budget = self._parts.budget
        self._stop = threading.Event()
        self._worker_threads: list[threading.Thread] = []

    @classmethod
    def open(
        cls,
        database_url: str | None = None,
        *,
        chat: ChatModel | None = None,
        counter: TokenCounter | None = None,
        on_summary_event: Callable[[SummaryEvent], None] | None = None,
        embedder: Embedder | None = None,
        **settings: Any,
    ) -> Memory:
        """Open the database (the embedded one when no URL is given or configured).

        Args:
            database_url: a ``postgresql+psycopg://`` URL; overrides ``STRATAMEM_DATABASE_URL``.
            chat: the summariser's chat model; by default an OpenAI client when a key or base
                URL is configured, else none (offline: summaries are raw archives).
            counter: the token counter; by default tiktoken for ``model``.
            on_summary_event: called with every summariser event (attempt, retry, ...).
            embedder: the embedder of long-term memory; by default the one ``cards.embedder``
                names (MiniLM, loaded on first use, never at open).
            **settings: any field of ``Settings`` (``model``, ``context_window``, ...).
        """
        if database_url is not None:
            settings["database_url"] = database_url
        resolved = Settings(**settings)
        database = Database.open(resolved.database_url, data_dir=resolved.data_dir)
        try:
            return cls(
                database,
                resolved,
                chat=chat,
                counter=counter,
                on_summary_event=on_summary_event,
                embedder=embedder,
            )
        except BaseException:
            database.close()
            raise

    @property
    def _background(self) -> bool:
        return self.settings.summary.mode == "background"

    @property
    def database_url(self) -> str:
        """The URL of the database in use (for the embedded one, its Unix-socket URL)."""
        return self._database.url

    def prepare(
        self,
        *,
        user_id: str,
        session_id: str,
        input: str | Mapping[str, Any] | BaseModel | None = None,
        system: str | None = None,
    ) -> AssembledContext:
        """Store the user's input (when given) and assemble the context for the next call.

        With ``input=None`` the current turn goes on (an agent's tool loop: record the
        assistant's tool calls and their results, then prepare again). A new input while tool
        calls wait for results closes them first with stored "interrupted: no result" results
        (``report.interrupted_calls``). When the window outgrew the budget before a summary
        arrived, what the cap would drop is archived raw into the summary first
        (``report.archived``), so no message leaves the context unsummarised.

        Raises:
            InvalidHistoryError: the input is malformed or not a user message, or (with
                ``input=None``) tool calls still wait for results.
            RecordConflictError: the input's client id is stored with other content.
            ContextOverflowError: the system message and current turn cannot fit the budget.
        """
        interrupted: tuple[InterruptedCall, ...] = ()
        text = input.get("content") if isinstance(input, Mapping) else input
        if isinstance(text, str) and self._parts.longterm is not None:
            # Recall will most likely search the input as written: MiniLM embeds it on another
            # thread while the input is stored and the window read.
            self._parts.longterm.prefetch(text)
        if input is not None:
            interrupted, summary, window = self._store_input(user_id, session_id, input, system)
        else:
            summary, window = self._load_window(user_id, session_id)
        if window.tokens > self._parts.fold_policy.trigger_tokens:
            summary, window = self._schedule_folding(user_id, session_id, summary, window)
        recall = self._recall(user_id, window)
        memories = recall.memories if recall else ()
        context = self._assemble(summary, window, system, memories)
        archived = 0
        if _drops_window_units(context):
            # The window outgrew the budget before a summary arrived (a fast loop, a worker
            # behind): what the cap would drop is archived raw first, so it is never lost.
            archived, summary, window = self._archive_inline(user_id, session_id, summary)
            context = self._assemble(summary, window, system, memories)
        if _drops_window_units(context):
            # Still dropping (a long system prompt or summary leaves the window little room):
            # archive exactly what the cap drops.
            through = _last_dropped_seq(context, window)
            more, summary, window = self._archive_inline(user_id, session_id, summary, through)
            archived += more
            context = self._assemble(summary, window, system, memories)
        return _named_by_seq(
            context, window, interrupted, archived, recall.state if recall else None
        )

    def _archive_inline(
        self,
        user_id: str,
        session_id: str,
        summary: SummaryRecord | None,
        through: int | None = None,
    ) -> tuple[int, SummaryRecord | None, RecentWindow]:
        """Fold what left the window into the summary as a raw archive now (no model).

        Folds as the fold policy plans, or, with ``through``, every message up to that seq.

        With a model configured, the queued job later rewrites the archive as a model summary
        from the same boundary (``Consolidator.upgrade``).

        Returns:
            How many messages were archived, then the summary and window to use now.
        """
        archiver = self._parts.archiver
        if through is None:
            saved = archiver.consolidate(user_id, session_id)
        else:
            saved = archiver.fold_through(user_id, session_id, through)
        upgrading = saved is not None and self._parts.llm_configured and self._background
        if upgrading:
            if summary is None or summary.kind == "llm":
                base = summary or _NO_SUMMARY
                params = self._parts.consolidations.params(upgrade_from=base)
            else:
                # A raw summary already waits for its upgrade: the queued job keeps its base.
                params = self._parts.consolidations.params()
            self._parts.jobs.enqueue(
                CONSOLIDATE,
                user_id,
                session_id,
                delay_seconds=self.settings.summary.debounce_seconds,
                params=params,
            )
        archived = (saved.covered if saved else 0) - (summary.covered if summary else 0)
        if saved is not None and not upgrading:
            # An upgrade job extracts the archived messages' cards in its summariser call, and
            # archives whatever is left through the boundary after it: no ``cards`` job needed.
            self._archive_folded(user_id, session_id, saved)
        reloaded, window = self._load_window(user_id, session_id)
        return max(archived, 0), reloaded, window

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
        known = WindowCounter(self._parts.counter, window)
        messages = window.messages
        starts_a_unit = bool(messages) and messages[0].role != "tool"
        return assemble(
            messages,
            budget=self.budget.history,
            counter=known,
            system=system,
            summary=self._summary_context(summary),
            memories=memories,
            recent_messages=self.settings.recent_messages,
            tool_result_max_tokens=self.settings.tool_result_max_tokens,
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
        counter = self._parts.counter
        system_tokens = (
            counter.count_message(Message(role="system", content=system)) if system else 0
        )
        new = self._new_message(0, message, client_id, metadata, timestamp, reserved=system_tokens)
        budget = self.budget.history
        appended = self._parts.recent.append_and_load(user_id, session_id, new, budget=budget)
        if appended is not None:
            _, summary, window = appended
            return (), summary, window
        interrupted = self._parts.writer.store_input(user_id, session_id, new)
        return interrupted, *self._load_window(user_id, session_id)

    def _load_window(
        self, user_id: str, session_id: str
    ) -> tuple[SummaryRecord | None, RecentWindow]:
        """The stored summary and the newest messages after its boundary that fill the budget.

        Never past the summary boundary, and only a little more than the budget: the cost of a
        request does not grow with the length of the history.
        """
        # The summary and the new rows come back from one connection checkout.
        return self._parts.recent.load_with_summary(user_id, session_id, budget=self.budget.history)

    def _schedule_folding(
        self,
        user_id: str,
        session_id: str,
        summary: SummaryRecord | None,
        window: RecentWindow,
    ) -> tuple[SummaryRecord | None, RecentWindow]:
        """Fold now (inline mode) and reload, or queue the job a worker runs (background).

        A job is queued once per summary version (``QueuedConsolidations``): the requests that
        follow until a worker has folded find the same summary and queue nothing.
        """
        if self._background:
            queued, version = self._parts.queued, summary.version if summary else 0
            if queued.due(user_id, session_id, version):
                self._fold(user_id, session_id)
                queued.queued(user_id, session_id, version)
            return summary, window
        if self._fold(user_id, session_id) is None:
            return summary, window
        return self._load_window(user_id, session_id)

    def _fold(self, user_id: str, session_id: str) -> SummaryRecord | None:
        """Fold what left the window: queue the job (background) or fold and archive now.

        Returns:
            The summary a fold saved now (inline mode), else ``None``.
        """
        if self._background:
            self._parts.jobs.enqueue(
                CONSOLIDATE,
                user_id,
                session_id,
                delay_seconds=self.settings.summary.debounce_seconds,
                params=self._parts.consolidations.params(),
            )
            return None
        saved = self._parts.consolidator.consolidate(user_id, session_id)
        if saved is not None:
            self._archive_folded(user_id, session_id, saved)
        return saved

    def _archive_folded(self, user_id: str, session_id: str, saved: SummaryRecord) -> None:
        """Archive as cards the messages a fold just took out of the window.

        Inline mode archives now; background mode queues a ``cards`` job (the consolidation
        job archives what it folds itself).
        """
        longterm = self._parts.longterm
        if longterm is None:
            return
        if self._background:
            self._parts.jobs.enqueue(CARDS, user_id, session_id)
        else:
            longterm.archive_through(user_id, session_id, saved.boundary_seq)

    def _recall(self, user_id: str, window: RecentWindow) -> Recall | None:
        """Memories recalled for this request: pins first, then the cards best matching it.

        A documented degradation point: a failure of the database or the embedder while
        recalling is logged and counted (``recall_failures``), and the request goes on
        without memories; recall never fails a request.
        """
        longterm = self._parts.longterm
        if longterm is None:
            return None
        try:
            return longterm.recall(user_id, list(zip(window.stored, window.messages, strict=True)))
        except Exception:  # a degradation point: see the docstring
            self.recall_failures += 1
            logger.exception("recall failed for user %s; going on without memories", user_id)
            return Recall((), RecallState(None, None, (), failed=True))

    def search(
        self,
        *,
        user_id: str,
        query: str,
        k: int = 4,
        types: Sequence[CardType] | None = None,
        session_id: str | None = None,
        topic: str | None = None,
        tags: Sequence[str] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        min_score: float | None = None,
        include_superseded: bool = False,
    ) -> list[ScoredCard]:
        """The user's ``k`` cards best matching ``query``, best first, with their scores.

        Hybrid search (vector and keywords fused); every filter is applied in SQL and no other
        user's card is ever returned. ``since``/``until`` compare when a card's event happened
        where known, else when it was said.

        Raises:
            InvalidInputError: ``query`` is not text (a lone surrogate), ``k`` is negative,
                ``types`` or ``tags`` is a single string, or a filter has the wrong type.
            ConfigurationError: long-term memory is disabled (``cards.enabled=False``).
        """
        if not isinstance(query, str):
            raise InvalidInputError(f"query must be a string, not {type(query).__name__}")
        check_encodable("query", query)
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise InvalidInputError(f"k must be a whole number >= 0, not {k!r}")
        for name, listed in (("types", types), ("tags", tags)):
            if isinstance(listed, str):
                raise InvalidInputError(f"{name} must be a list of strings, not one string")
        try:
            where = CardFilter(
                types=tuple(types) if types is not None else None,
                session_id=session_id,
                topic=topic,
                tags=tuple(tags) if tags else None,
                since=since,
                until=until,
                include_superseded=include_superseded,
            )
            query_plan = CardQuery(k=k, where=where, min_score=min_score)
        except ValidationError as error:
            problem = error.errors()[0]
            where_wrong = ".".join(map(str, problem["loc"]))
            raise InvalidInputError(f"search filter {where_wrong}: {problem['msg']}") from None
        return self._longterm().search(user_id, query, query_plan)

    def pin(
        self,
        *,
        user_id: str,
        text: str,
        session_id: str | None = None,
        topic: str | None = None,
        tags: Sequence[str] | None = None,
    ) -> Card:
        """Pin a fact: always in the prompt, first among memories, never dropped by the cap.

        Raises:
            PinBudgetError: the user's pins with this one would exceed the pin budget
                (``cards.pin_budget_ratio`` of the history budget, in tokens).
            ValueError: ``text`` is blank.
            InvalidInputError: ``text`` holds a NUL or a lone surrogate, or ``tags`` is one
                string.
            ConfigurationError: long-term memory is disabled.
        """
        if not isinstance(text, str):
            raise InvalidInputError(f"a pin's text must be a string, not {type(text).__name__}")
        check_text("pin text", text)
        if isinstance(tags, str):
            raise InvalidInputError("tags must be a list of strings, not one string")
        return self._longterm().pin(user_id, text, session_id=session_id, topic=topic, tags=tags)

    def unpin(self, *, user_id: str, card_id: int) -> Card:
        """Unpin one of the user's cards; it stays as an ordinary card.

        Raises:
            CardNotFoundError: the user has no such card.
            ConfigurationError: long-term memory is disabled.
        """
        return self._longterm().unpin(user_id, card_id)

    def pins(self, *, user_id: str) -> list[Card]:
        """The user's pinned cards, oldest first."""
        return self._longterm().pins(user_id)

    def card(self, *, user_id: str, card_id: int) -> Card:
        """One of the user's cards by id (e.g. one a context report lists as recalled).

        Raises:
            CardNotFoundError: the user has no such card.
            ConfigurationError: long-term memory is disabled.
        """
        card = self._longterm().store.get(user_id, card_id)
        if card is None:
            raise CardNotFoundError(f"user {user_id!r} has no card {card_id}")
        return card

    def forget(
        self, *, user_id: str, card_id: int | None = None, session_id: str | None = None
    ) -> Forgotten:
        """Delete for real: one card, one session, or (neither given) everything of the user.

        A session goes with its messages, summary, jobs and cards; everything of the user is
        every session and every card (pins included).

        Returns:
            How many messages, summaries, cards and jobs were deleted (for the caller to say).

        Raises:
            CardNotFoundError: ``card_id`` is not one of the user's cards.
            ValueError: both ``card_id`` and ``session_id`` were given.
        """
        if card_id is not None and session_id is not None:
            raise ValueError("forget one card (card_id) or one session (session_id), not both")
        longterm = self._parts.longterm
        if card_id is not None:
            if longterm is None or not longterm.store.delete(user_id, card_id=card_id):
                raise CardNotFoundError(f"user {user_id!r} has no card {card_id}")
            return Forgotten(messages=0, summaries=0, cards=1, jobs=0)
        # Messages first: a fold racing the erasure then finds nothing left to archive.
        erased = erase_conversations(self._database, user_id, session_id)
        self._parts.recent.forget(user_id, session_id)
        self._parts.queued.forget(user_id, session_id)
        cards = 0
        if longterm is not None:
            cards = longterm.store.delete(user_id, session_id=session_id)
        return Forgotten(
            messages=erased.messages, summaries=erased.summaries, cards=cards, jobs=erased.jobs
        )

    def end_session(self, *, user_id: str, session_id: str) -> None:
        """Archive every message of the session not archived yet, as turn and extracted cards.

        Inline (``summary.mode="inline"``) it runs now; in background mode it is a queued
        ``cards`` job the worker runs. A session that goes on afterwards is archived again from
        where this left off.

        Raises:
            ConfigurationError: long-term memory is disabled.
        """
        longterm = self._longterm()
        if self._background:
            self._parts.jobs.enqueue(CARDS, user_id, session_id, params={END_OF_SESSION: True})
        else:
            longterm.archive_through(user_id, session_id, None)

    def _longterm(self) -> LongTermMemory:
        longterm = self._parts.longterm
        if longterm is None:
            raise ConfigurationError("long-term memory is disabled (cards.enabled=False)")
        return longterm

    def record(
        self,
        *,
        user_id: str,
        session_id: str,
        messages: Sequence[Mapping[str, Any] | BaseModel],
    ) -> list[StoredMessage]:
        """Append messages to the session in one transaction: all of them or none.

        A message is a dict (``None`` values are left out) or an ``openai`` SDK message object;
        response-only fields are never stored. It may carry a client ``id``, an idempotency
        key: a batch whose every id is stored with the same content is a no-op that returns
        the stored messages. ``timestamp`` (an ISO 8601 string or a ``datetime``; naive means
        UTC) is when the message was said, stored as its ``created_at`` (the database clock
        without it): imported conversations keep their dates, and turn cards are dated by it.
        ``metadata`` is any JSON-compatible dict (``datetime``, ``UUID``, ``Decimal`` converted
        as pydantic's JSON mode does). All three are returned by ``history`` and never sent to
        the model. Tool results must answer an open call of the session.

        Once the messages after the summary boundary pass the fold trigger, the fold is queued
        (background mode) or done now, with the archiving of what it folds as cards (inline
        mode), as ``prepare`` would: ``prepare`` need never be called for a session to be
        summarised and remembered.

        Raises:
            InvalidHistoryError: a message is malformed, is one the chat API would refuse, or
                breaks the session's structure; ``ToolCallInterruptedError`` for the result of a
                call already closed as interrupted.
            RecordConflictError: the batch is partly stored, or an id is stored with other
                content; nothing is stored.
            ContextOverflowError: a non-tool message alone is larger than the history budget.
        """
        batch = [
            self._new_message(index, *parse_input(index, data))
            for index, data in enumerate(messages)
        ]
        if not batch:
            return []  # nothing to store, and no session is created for nothing
        stored = self._parts.writer.record(user_id, session_id, batch)
        self._fold_when_due(user_id, session_id)
        return stored

    def _fold_when_due(self, user_id: str, session_id: str) -> None:
        """Fold (or queue the fold) once the messages after the summary pass the trigger.

        ``record`` calls it after every batch, so a session fed only by ``record`` (an agent
        that never calls ``prepare``, an imported conversation) is summarised and archived as
        cards all the same. The test is one statement: the sum of the stored token counts from
        the boundary on.
        """
        # In background mode a fold already queued makes the sum moot (the queue debounces):
        # it is skipped, so its cost is bounded by what one fold leaves, not by the backlog.
        queued = CONSOLIDATE if self._background else None
        tokens = self._parts.messages.tokens_after_summary(
            user_id, session_id, unless_queued=queued
        )
        if tokens is not None and tokens > self._parts.fold_policy.trigger_tokens:
            self._fold(user_id, session_id)

    def open_calls(self, *, user_id: str, session_id: str) -> list[OpenCall]:
        """The session's tool calls still waiting for their results (reads only its tail)."""
        return self._parts.writer.open_calls(user_id, session_id)

    def close_open_calls(self, *, user_id: str, session_id: str) -> list[StoredMessage]:
        """Close the session's open tool calls with stored "interrupted: no result" results.

        What a new user input does by itself; call it to repair a session by hand (an agent
        that crashed mid-loop). A result recorded later for a closed call is refused with
        ``ToolCallInterruptedError``.

        Returns:
            The stored results that closed the calls (none when no call was open).
        """
        return self._parts.writer.close_open_calls(user_id, session_id)

    def history(self, *, user_id: str, session_id: str) -> list[StoredMessage]:
        """Every stored message of the session, in order (summarising never deletes any)."""
        return self._parts.messages.history(user_id, session_id)

    def recent_history(self, *, user_id: str, session_id: str, limit: int) -> list[StoredMessage]:
        """The session's ``limit`` newest stored messages, in order (one short query)."""
        if limit < 1:
            return []
        newest = list(
            itertools.islice(
                self._parts.messages.walk_back(user_id, session_id, batch=limit), limit
            )
        )
        newest.reverse()
        return newest

    def summary(self, *, user_id: str, session_id: str) -> SummaryRecord | None:
        """The session's stored rolling summary, if any."""
        return self._parts.summaries.get(user_id, session_id)

    def consolidate(self, *, user_id: str, session_id: str) -> SummaryRecord | None:
        """Fold what left the window into the summary now, if the trigger is reached."""
        return self._parts.consolidator.consolidate(user_id, session_id)

    def run_worker(
        self, *, until_idle: bool = False, stop: threading.Event | None = None
    ) -> WorkerRun:
        """Run queued consolidations and card archiving.

        By default in a background thread that runs until ``close``; with ``until_idle`` in
        the caller's thread, returning once no job is pending (for scripts and tests) or once
        ``stop`` is set (the running job is finished first). Each job runs with the parameters
        it was queued with, and is logged (session, messages folded, summary kind, duration).
        With long-term memory on, a worker with nothing to do queues the archiving of sessions
        idle for ``cards.idle_seconds`` (as ``end_session`` would), at most once a minute.

        Returns:
            What ran (filled in as jobs finish when the worker runs in a thread).

        Raises:
            storage.DatabaseUnavailableError: with ``until_idle``, the database went away (a
                background worker waits an outage out instead).
        """
        run = WorkerRun()
        worker = Worker(self._parts.jobs, self._parts.job_handlers(run), on_idle=self._idle_task())
        if until_idle:
            worker.run(stop or threading.Event(), until_idle=True)
            run.failures = worker.failures
            return run
        thread = threading.Thread(
            target=worker.run, args=(self._stop,), name="stratamem-worker", daemon=True
        )
        thread.start()
        self._worker_threads.append(thread)
        return run

    def _idle_task(self) -> IdleSessions | None:
        """The worker's sweep of idle sessions (none when long-term memory is off)."""
        if self._parts.longterm is None:
            return None
        return IdleSessions(
            ArchiveMarks(self._database), self._parts.jobs, self.settings.cards.idle_seconds
        )

    def close(self) -> None:
        """Stop the worker threads and release the database connections."""
        self._stop.set()
        for thread in self._worker_threads:
            thread.join()
        self._database.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _new_message(
        self,
        index: int,
        message: Message,
        client_id: str | None,
        metadata: dict[str, Any],
        timestamp: datetime | None,
        *,
        reserved: int = 0,
    ) -> NewMessage:
        """The message to store, refused when it could never fit a request."""
        tokens = self._parts.counter.count_message(message)
        required = reserved + tokens + REPLY_PRIMING_TOKENS
        if message.role != "tool" and required > self.budget.history:
            # A tool result can be cut to fit; any other message would never fit a request.
            detail = f"message {index}" + (" with the system message" if reserved else " alone")
            raise ContextOverflowError(required, self.budget.history, detail)
        return NewMessage(
            payload=message.to_openai(),
            role=message.role,
            tokens=tokens,
            client_id=client_id,
            metadata=metadata,
            created_at=timestamp,
        )

    def _summary_context(self, summary: SummaryRecord | None) -> SummaryContext | None:
        if summary is None:
            return None
        return SummaryContext(
            text=summary.content,
            covered=summary.covered,
            kind=summary.kind,
            degraded=summary.kind == "raw" and self._parts.llm_configured,
        )


def _last_dropped_seq(context: AssembledContext, window: RecentWindow) -> int:
    """The seq of the newest window message the cap dropped (0 when it dropped none)."""
    spans = [drop.span for drop in context.report.dropped if drop.span is not None]
    return max((window.stored[last].seq for _, last in spans), default=0)


def _drops_window_units(context: AssembledContext) -> bool:
    """Whether the hard cap left out messages of the window (not memories, not the summary)."""
    return any(drop.layer in ("window", "recent") for drop in context.report.dropped)


#: Stands for "no summary yet" as the base of an upgrade: boundary 0, no text.
_NO_SUMMARY = SummaryRecord(
    user_id="",
    session_id="",
    content="",
    kind="llm",
    boundary_seq=0,
    covered=0,
    version=0,
    updated_at=datetime.fromtimestamp(0, UTC),
)


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
    )
    return AssembledContext(context.messages, report)


#: How the pure core names a window unit: by position in the history it was given.
_POSITIONS = re.compile(r"^messages? \d+(?:-\d+)?")


@dataclass(frozen=True, slots=True)
class Forgotten:
    """What one ``Memory.forget`` deleted, counted by kind.

    Attributes:
        messages: stored messages.
        summaries: rolling summaries.
        cards: long-term memory cards (pins included).
        jobs: background jobs of the forgotten sessions, whatever their state.
    """

    messages: int
    summaries: int
    cards: int
    jobs: int

    def describe(self) -> str:
        """One line for people, e.g. ``12 messages, 1 summary, 5 cards, 2 jobs``."""
        counts = (
            (self.messages, "message", "messages"),
            (self.summaries, "summary", "summaries"),
            (self.cards, "card", "cards"),
            (self.jobs, "job", "jobs"),
        )
        return ", ".join(
            f"{number:,} {one if number == 1 else many}" for number, one, many in counts
        )


@dataclass(frozen=True, slots=True)
class Parts:
    """What a ``Memory`` is made of, built once from its settings by ``build_parts``."""

    budget: Budget
    counter: TokenCounter
    messages: MessageStore
    recent: RecentMessages
    summaries: SummaryStore
    writer: SessionWriter
    jobs: JobQueue
    fold_policy: FoldPolicy
    consolidations: ConsolidationJobs
    archiver: Consolidator
    llm_configured: bool
    longterm: LongTermMemory | None
    queued: QueuedConsolidations

    @property
    def consolidator(self) -> Consolidator:
        """The consolidator of this process's settings (inline mode, ``Memory.consolidate``)."""
        return self.consolidations.consolidator

    def job_handlers(self, log: WorkerRun | None = None) -> dict[str, JobHandler]:
        """The worker's table: the handler of each job kind (``log`` collects what ran)."""

        longterm = self.longterm

        def consolidate(job: Job) -> None:
            self.consolidations.run(job, log)
            if longterm is not None:
                # What the fold took out of the window became cards in its summariser call
                # (``memory.shared_fold``); this archives what no such call covered (a fold
                # without a model, messages before it), and is one query when there is none.
                summary = self.summaries.get(job.user_id, job.session_id)
                if summary is not None:
                    longterm.archive_through(job.user_id, job.session_id, summary.boundary_seq)

        def archive(job: Job) -> None:
            if longterm is None:
                return  # queued by a process with long-term memory on: nothing to do here
            if job.params.get(END_OF_SESSION):
                longterm.archive_through(job.user_id, job.session_id, None)
            else:
                summary = self.summaries.get(job.user_id, job.session_id)
                if summary is not None:
                    longterm.archive_through(job.user_id, job.session_id, summary.boundary_seq)

        return {CONSOLIDATE: consolidate, CARDS: archive}


def build_parts(
    database: Database,
    settings: Settings,
    *,
    chat: ChatModel | None = None,
    counter: TokenCounter | None = None,
    on_summary_event: Callable[[SummaryEvent], None] | None = None,
    embedder: Embedder | None = None,
) -> Parts:
    """Build every part of a ``Memory`` from its settings: the one place they are wired.

    The embedder is not loaded here (MiniLM loads on its first ``embed``): opening stays fast,
    and a process that never recalls never pays for the model.
    """
    budget = plan_budget(
        settings.model,
        context_window=settings.context_window,
        max_output=settings.max_output,
        safety_margin=settings.safety_margin,
    )
    counter = counter or TiktokenCounter(settings.model)
    if chat is None and settings.llm_configured:
        chat = OpenAIChatModel(base_url=settings.llm_base_url, api_key=settings.llm_api_key)
    summary = settings.summary
    summary = summary.model_copy(
        update={
            "model": summary.model or settings.model,
            # The summary must leave room for the window it sits beside.
            "max_tokens": max(summary.min_tokens, min(summary.max_tokens, budget.history // 4)),
        }
    )
    policy = FoldPolicy.for_history_budget(
        budget.history,
        trigger_ratio=summary.trigger_ratio,
        target_ratio=summary.target_ratio,
        min_recent_messages=settings.recent_messages,
    )
    messages = MessageStore(database)
    summaries = SummaryStore(database)
    longterm = None
    if settings.cards.enabled:
        longterm = LongTermMemory(
            database,
            messages,
            embedder or default_embedder(settings.cards),
            counter,
            settings.cards,
            pin_budget=int(budget.history * settings.cards.pin_budget_ratio),
            # Extraction shares the summariser's model, retries and timeouts.
            chat=chat,
            summary=summary,
        )
    # Without a chat model the summariser writes raw archives: no model, milliseconds.
    archiver = Summarizer(None, counter, summary, on_event=on_summary_event)
    return Parts(
        budget=budget,
        counter=counter,
        messages=messages,
        recent=RecentMessages(messages, counter),
        summaries=summaries,
        writer=SessionWriter(messages, counter),
        jobs=JobQueue(database),
        fold_policy=policy,
        consolidations=ConsolidationJobs(
            messages,
            summaries,
            chat=chat,
            counter=counter,
            model=settings.model,
            policy=policy,
            summary=summary,
            on_summary_event=on_summary_event,
            longterm=longterm,
        ),
        # One step whatever the backlog: writing an archive costs no model call.
        archiver=Consolidator(messages, summaries, archiver, policy, max_step_tokens=2**62),
        llm_configured=chat is not None,
        longterm=longterm,
        # Asked for again after a second (or the debounce) if the summary has not moved.
        queued=QueuedConsolidations(interval_seconds=max(1.0, summary.debounce_seconds)),
    )

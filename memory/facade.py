"""``Memory``: the object an application keeps a long conversation going with."""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import fields
from datetime import datetime
from types import TracebackType
from typing import Any, Self

from pydantic import BaseModel

from memory.arguments import check_fact, check_forget_target, search_plan
from memory.context.assembler import AssembledContext
from memory.context.budget import Budget
from memory.context.tokens import TokenCounter
from memory.errors import CardNotFoundError, ConfigurationError
from memory.forgotten import Forgotten
from memory.jobs.consolidation import WorkerRun
from memory.jobs.idle_work import FinishedJobs, IdleSessions, IdleWork
from memory.jobs.unclaimed import UnclaimedJobs
from memory.jobs.worker import CARDS, END_OF_SESSION, Worker
from memory.llm import ChatModel
from memory.longterm.items import Items
from memory.longterm.long_term_memory import LongTermMemory
from memory.session.folding import Folding
from memory.session.incoming import batch_items, parse_input
from memory.session.kept_reports import ReportKeeper
from memory.session.open_calls import OpenCall
from memory.session.preparing import Preparer
from memory.session.wiring import build_parts
from memory.settings import Settings
from memory.summary.summarizer import SummaryEvent
from memory.transfer.export_import import Imported, export_lines, import_lines
from retrieval import CardDraft, Embedder, ScoredCard
from retrieval.held_texts import forget_held_texts
from storage import (
    ArchiveMarks,
    Card,
    CardType,
    Database,
    StoredMessage,
    SummaryRecord,
    erase,
)
from storage.reports import KeptReport, ReportStore

__all__ = ["Forgotten", "Memory", "OpenCall"]

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
        self.budget: Budget = self._parts.budget
        #: What ``budget`` is measured with (the proxy cuts an oversized message by it).
        self.counter: TokenCounter = self._parts.counter
        self._folding: Folding = self._parts.folding
        self._preparer: Preparer = self._parts.preparer
        self._reports = ReportStore(database)
        self._keeper = ReportKeeper(self._reports, settings.reports)
        self._unclaimed = UnclaimedJobs(self._parts.jobs)
        self._stop = threading.Event()
        self._worker_threads: list[tuple[threading.Thread, threading.Event]] = []

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
    def recall_failures(self) -> int:
        """Recalls that failed (database or embedder) and went on without memories."""
        return self._preparer.recall_failures

    @property
    def _background(self) -> bool:
        return self.settings.summary.mode == "background"

    @property
    def database(self) -> Database:
        """The database this memory stores in, for the stores kept beside it (the proxy's keys)."""
        return self._database

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
            InvalidHistoryError: the input is malformed or not a user message, ``system`` is
                not a string, or (with ``input=None``) tool calls still wait for results.
            RecordConflictError: the input's client id is stored with other content.
            ContextOverflowError: the system message and current turn cannot fit the budget.
        """
        context = self._preparer.prepare(
            user_id=user_id, session_id=session_id, input=input, system=system
        )
        if self.settings.reports.enabled:
            # Queued, written by a thread: the request never waits for it
            # (memory.session.kept_reports).
            self._keeper.keep(user_id, session_id, context.report)
        return context

    def kept_reports(
        self, *, user_id: str, session_id: str, limit: int = 20, before: int | None = None
    ) -> list[KeptReport]:
        """The session's newest kept reports of ``prepare`` (older than id ``before``), newest
        first; this process's reports still queued are written first.

        Every ``prepare`` keeps its report (``reports.enabled``), each session its newest
        ``reports.keep``; ``stratamem ui`` shows them. A report is written off the request
        path, so a crash loses the few still queued (``memory.session.kept_reports``).

        Raises:
            InvalidInputError: an id is not usable.
        """
        self._keeper.flush()
        return self._reports.latest(user_id, session_id, limit=limit, before=before)

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
            InvalidArgumentError: ``query`` is not text (a lone surrogate), ``k`` is negative,
                ``types`` or ``tags`` is a single string, or a filter has the wrong type (an
                ``InvalidInputError``, as before, and a ``ValueError``).
            ConfigurationError: long-term memory is disabled (``cards.enabled=False``).
        """
        query_plan = search_plan(
            query,
            k=k,
            types=types,
            session_id=session_id,
            topic=topic,
            tags=tags,
            since=since,
            until=until,
            min_score=min_score,
            include_superseded=include_superseded,
        )
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
            InvalidArgumentError: ``text`` is not text, is blank or holds a NUL or a lone
                surrogate, or ``tags`` is one string (an ``InvalidInputError``, as before, and
                a ``ValueError``).
            InvalidInputError: a part is over the card bounds (``storage.MAX_CARD_TOPIC_CHARS``
                and the others).
            ConfigurationError: long-term memory is disabled.
        """
        check_fact(text, tags, noun="pin")
        return self._longterm().pin(user_id, text, session_id=session_id, topic=topic, tags=tags)

    def remember(
        self,
        *,
        user_id: str,
        text: str,
        topic: str | None = None,
        tags: Sequence[str] | None = None,
    ) -> Card:
        """Keep a fact the user asked to keep: a ``fact`` card, recalled when it matches (not
        pinned; ``pin`` for one always sent). The same text again is the same card.

        For adapters whose tools store memories directly (``stratamem mcp``): a remembered
        card was said to the tool, not in a conversation, so it has no source messages.

        Raises:
            InvalidArgumentError: ``text`` is not text, is blank or holds a NUL or a lone
                surrogate, or ``tags`` is one string (an ``InvalidInputError`` and a
                ``ValueError``, as before).
            ConfigurationError: long-term memory is disabled.
        """
        check_fact(text, tags, noun="memory")
        draft = CardDraft(type="fact", text=text.strip(), topic=topic, tags=list(tags or ()))
        [card] = self._longterm().index.add(user_id, [draft])
        return card

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

        A session goes with its messages, summary (and its earlier versions), kept reports,
        jobs, archive mark and cards; everything of the user is every session and every card
        (pins included). In one transaction, from
        every table, whatever the settings (long-term memory off included) and without loading
        an embedder. Every process sees it on its next request: a cached window is checked
        against the stored messages by the request's own statement, and every write made from
        messages read before the erasure (a fold, an archive, a reply) is refused.

        This process then keeps none of the user's texts in memory: every ``Memory``'s recent
        windows of the user, every held card vector and keyword postings of the user, and the
        caches keyed by text (lines' terms, stems, queries' dates and attributes, prefetched
        queries) are dropped (``retrieval.held_texts``; a forget of one card or session drops
        the same). Other processes keep theirs until evicted and never serve a forgotten
        message or card from them (``docs/security.md``, "Erasure").

        Returns:
            How many rows were deleted, by table (for the caller to say).

        Raises:
            CardNotFoundError: ``card_id`` is not one of the user's cards.
            InvalidArgumentError: both ``card_id`` and ``session_id`` were given (an
                ``InvalidInputError``, as before).
            InvalidInputError: an id is not usable.
        """
        check_forget_target(card_id, session_id)
        if card_id is None:
            # This process's reports still queued are written first, so the counts say what
            # the requests made so far kept, whatever the writer thread's timing.
            self._keeper.flush()
        erased = erase(self._database, user_id, session_id=session_id, card_id=card_id)
        if card_id is not None and erased.cards == 0:
            raise CardNotFoundError(f"user {user_id!r} has no card {card_id}")
        forget_held_texts(user_id)
        if card_id is None:
            self._parts.queued.forget(user_id, session_id)
            self._parts.queued_archiving.forget(user_id, session_id)
        return Forgotten(**{f.name: getattr(erased, f.name) for f in fields(erased)})

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
            self._parts.queued_archiving.forget(user_id, session_id)  # the job is due now
            self._parts.jobs.enqueue(CARDS, user_id, session_id, params={END_OF_SESSION: True})
        else:
            longterm.archiver.archive_through(user_id, session_id, None)

    @property
    def items(self) -> Items:
        """The items of framework stores (``memory.integrations.langgraph.StratamemStore``):
        JSON objects under a namespace and a key, owned by a user, deleted by ``forget`` of
        the user, found by the cards' embedder and keywords.

        Raises:
            ConfigurationError: long-term memory is disabled (its embedder indexes items).
        """
        items = self._parts.items
        if items is None:
            raise ConfigurationError("long-term memory is disabled (cards.enabled=False)")
        return items

    def export_user(self, *, user_id: str) -> Iterator[str]:
        """Everything of the user as JSON Lines (``memory.transfer.format``), one line at a
        time without its newline: sessions with their messages and summaries, cards with
        their validity and sources, pins, store items. Read in one snapshot; no embedding
        is written, and no embedder is needed.
        """
        return export_lines(self._database, user_id)

    def import_user(
        self, lines: Iterable[str], *, user_id: str | None = None, merge: bool = False
    ) -> Imported:
        """Store an export (``export_user``'s lines) into its user, or into ``user_id``.

        The whole file is read first, then stored in one transaction: a malformed line, or
        anything that cannot be stored, stores nothing. The user must have no data unless
        ``merge`` (then only its sessions must be new to the user). Cards and items are
        embedded again by this memory's embedder.

        Raises:
            ExportFormatError: a line is malformed (named by its number).
            storage.ImportConflictError: the user has data (without ``merge``), or has one
                of the imported sessions.
            ConfigurationError: the export has cards or items and long-term memory is off.
        """
        items = self._parts.items
        return import_lines(
            lines,
            database=self._database,
            counter=self.counter,
            embedder=self._parts.embedder,
            index_items=items.index_texts if items is not None else None,
            user_id=user_id,
            merge=merge,
        )

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
        reply_to: AssembledContext | None = None,
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

        ``reply_to`` is the context (from ``prepare``) the messages answer, e.g. the model's
        reply to it: they are stored only if the session was not erased (``forget``, in any
        process) since that context was assembled; else ``SessionErasedError``, and nothing is
        stored, not even into a session of the same name started again meanwhile.

        Once the messages after the summary boundary pass the fold trigger, the fold is queued
        (background mode) or done now, with the archiving of what it folds as cards (inline
        mode), as ``prepare`` would: ``prepare`` need never be called for a session to be
        summarised and remembered. In background mode the session's messages (those ``prepare``
        stored included) also become cards within ``cards.debounce_seconds`` (a queued
        ``cards`` job; ``cards.archive_promptly``), so the user's other sessions recall them
        without this one ending.

        Those jobs need a worker (``run_worker``, ``stratamem worker``): when a due job has
        waited a minute for one, ``record`` logs a warning that says so
        (``memory.jobs.unclaimed``), at most every ten minutes. It asks at most every 30 s,
        the first time 30 s after this ``Memory`` opened.

        Raises:
            InvalidHistoryError: ``messages`` is a single message rather than a list, a
                message is malformed, is one the chat API would refuse, or breaks the session's
                structure; ``ToolCallInterruptedError`` for the result of a call already closed
                as interrupted.
            RecordConflictError: the batch is partly stored, or an id is stored with other
                content; nothing is stored.
            ContextOverflowError: a non-tool message alone is larger than the history budget.
            storage.SessionErasedError: with ``reply_to``, the session was erased since.
        """
        batch = [
            self._parts.writer.new_message(index, *parse_input(index, data))
            for index, data in enumerate(batch_items(messages))
        ]
        if not batch:
            return []  # nothing to store, and no session is created for nothing
        after = reply_to.report.newest if reply_to is not None else None
        stored = self._parts.writer.record(user_id, session_id, batch, after=after)
        self._folding.fold_when_due(user_id, session_id)
        self._folding.archive_soon(user_id, session_id)
        if self._background:
            self._unclaimed.check()
        return stored

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
        return self._parts.consolidations.consolidator.consolidate(user_id, session_id)

    def run_worker(
        self, *, until_idle: bool = False, stop: threading.Event | None = None
    ) -> WorkerRun:
        """Run queued consolidations and card archiving.

        By default in a background thread that runs until ``close`` (or until ``stop`` is set;
        ``close`` still waits for it); with ``until_idle`` in the caller's thread, returning
        once no job is pending (for scripts and tests) or once ``stop`` is set (the running
        job is finished first). Each job runs with the parameters
        it was queued with, and is logged (session, messages folded, summary kind, duration).
        With long-term memory on, a worker with nothing to do queues the archiving of sessions
        idle for ``cards.idle_seconds`` (as ``end_session`` would), at most once a minute;
        then it deletes the jobs finished longer ago than ``jobs.done_retention_seconds``
        (failed ones: ``jobs.failed_retention_seconds``).

        Returns:
            What ran (filled in as jobs finish when the worker runs in a thread).

        Raises:
            storage.DatabaseUnavailableError: with ``until_idle``, the database went away (a
                background worker waits an outage out instead).
        """
        run = WorkerRun()
        worker = Worker(
            self._parts.jobs,
            self._parts.consolidations.job_handlers(run),
            on_idle=self._idle_task(),
        )
        if until_idle:
            worker.run(stop or threading.Event(), until_idle=True)
            run.failures = worker.failures
            return run
        until = stop if stop is not None else self._stop
        thread = threading.Thread(
            target=worker.run, args=(until,), name="stratamem-worker", daemon=True
        )
        thread.start()
        self._worker_threads.append((thread, until))
        return run

    def _idle_task(self) -> IdleWork:
        """The worker's idle work: the sweep of idle sessions (when long-term memory is on),
        and the deletion of finished jobs past their retention."""
        sweep = None
        if self._parts.longterm is not None:
            sweep = IdleSessions(
                ArchiveMarks(self._database), self._parts.jobs, self.settings.cards.idle_seconds
            )
        return IdleWork(sweep, FinishedJobs(self._parts.jobs, self.settings.jobs))

    def close(self) -> None:
        """Stop the worker threads, write the queued reports, release the database connections."""
        self._stop.set()
        for thread, stop in self._worker_threads:
            stop.set()
            thread.join()
        self._keeper.close()
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

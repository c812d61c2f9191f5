"""``Memory``: the object an application keeps a long conversation going with."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

from memory.context.assembler import AssembledContext, SummaryContext, assemble
from memory.context.budget import Budget, plan_budget
from memory.context.messages import Message, parse_messages
from memory.context.parts import RetrievedMemory
from memory.context.tokens import REPLY_PRIMING_TOKENS, TiktokenCounter, TokenCounter
from memory.context.units import validate_history
from memory.errors import ContextOverflowError, InvalidHistoryError
from memory.llm import ChatModel, OpenAIChatModel
from memory.recent import RecentMessages, RecentWindow
from memory.settings import Settings
from memory.summary.consolidator import Consolidator
from memory.summary.policy import FoldPolicy
from memory.summary.summarizer import Summarizer, SummaryEvent
from memory.worker import CONSOLIDATE, JobHandler, Worker
from storage import (
    Database,
    Job,
    JobQueue,
    MessageStore,
    NewMessage,
    StoredMessage,
    SummaryRecord,
    SummaryStore,
)

__all__ = ["Memory", "Parts", "build_parts"]

#: Keys of a message dict that belong to stratamem and are never sent to the model.
CLIENT_KEYS = ("id", "metadata")


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
    ) -> None:
        self.settings = settings
        self._database = database
        self._parts = build_parts(
            database, settings, chat=chat, counter=counter, on_summary_event=on_summary_event
        )
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
        **settings: Any,
    ) -> Memory:
        """Open the database (the embedded one when no URL is given or configured).

        Args:
            database_url: a ``postgresql+psycopg://`` URL; overrides ``STRATAMEM_DATABASE_URL``.
            chat: the summariser's chat model; by default an OpenAI client when a key or base
                URL is configured, else none (offline: summaries are raw archives).
            counter: the token counter; by default tiktoken for ``model``.
            on_summary_event: called with every summariser event (attempt, retry, ...).
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
            )
        except BaseException:
            database.close()
            raise

    @property
    def database_url(self) -> str:
        """The URL of the database in use (for the embedded one, its Unix-socket URL)."""
        return self._database.url

    def prepare(
        self,
        *,
        user_id: str,
        session_id: str,
        input: str | Mapping[str, Any] | None = None,
        system: str | None = None,
    ) -> AssembledContext:
        """Store the user's input (when given) and assemble the context for the next call.

        With ``input=None`` the current turn goes on (an agent's tool loop: record the
        assistant's tool calls and their results, then prepare again).

        Raises:
            InvalidHistoryError: the input is malformed, or tool calls still wait for results.
            ContextOverflowError: the system message and current turn cannot fit the budget.
            storage.SessionOwnershipError: the session belongs to another user.
        """
        if input is not None:
            self._store_input(user_id, session_id, input, system)
        summary, window = self._load_window(user_id, session_id)
        if window.tokens > self._parts.fold_policy.trigger_tokens:
            summary, window = self._schedule_folding(user_id, session_id, summary, window)
        return assemble(
            list(window.messages),
            budget=self.budget.history,
            counter=self._parts.counter,
            system=system,
            summary=self._summary_context(summary),
            memories=self._recall(user_id, session_id),
            recent_messages=self.settings.recent_messages,
            tool_result_max_tokens=self.settings.tool_result_max_tokens,
        )

    def _store_input(
        self, user_id: str, session_id: str, input: str | Mapping[str, Any], system: str | None
    ) -> None:
        """Store the user's input, refused first if it can never fit with the system message."""
        payload = {"role": "user", "content": input} if isinstance(input, str) else input
        counter = self._parts.counter
        system_tokens = (
            counter.count_message(Message(role="system", content=system)) if system else 0
        )
        message = self._new_message(0, payload, reserved=system_tokens)
        self._parts.messages.append(user_id, session_id, [message], validate=_check_structure)

    def _load_window(
        self, user_id: str, session_id: str
    ) -> tuple[SummaryRecord | None, RecentWindow]:
        """The stored summary and the newest messages after its boundary that fill the budget.

        Never past the summary boundary, and only a little more than the budget: the cost of a
        request does not grow with the length of the history.
        """
        summary = self._parts.summaries.get(user_id, session_id)
        window = self._parts.recent.load(
            user_id,
            session_id,
            after_seq=summary.boundary_seq if summary else 0,
            budget=self.budget.history,
        )
        return summary, window

    def _schedule_folding(
        self,
        user_id: str,
        session_id: str,
        summary: SummaryRecord | None,
        window: RecentWindow,
    ) -> tuple[SummaryRecord | None, RecentWindow]:
        """Fold now (inline mode) and reload, or queue the job a worker runs (background)."""
        if self.settings.summary.mode == "background":
            self._parts.jobs.enqueue(
                CONSOLIDATE,
                user_id,
                session_id,
                delay_seconds=self.settings.summary.debounce_seconds,
            )
            return summary, window
        if self._parts.consolidator.consolidate(user_id, session_id) is None:
            return summary, window
        return self._load_window(user_id, session_id)

    def _recall(self, user_id: str, session_id: str) -> tuple[RetrievedMemory, ...]:
        """Memories recalled for this request: none until long-term memory arrives."""
        return ()

    def record(
        self, *, user_id: str, session_id: str, messages: Sequence[Mapping[str, Any]]
    ) -> list[StoredMessage]:
        """Append messages to the session in one transaction: all of them or none.

        A message may carry a client ``id`` (recording the same id again is a no-op) and
        ``metadata`` (a dict); both are stored and returned by ``history``, never sent to the
        model. Tool results must answer an open call of the session.

        Raises:
            InvalidHistoryError: a message is malformed or breaks the session's structure.
            ContextOverflowError: a non-tool message alone is larger than the history budget.
            storage.SessionOwnershipError: the session belongs to another user.
        """
        batch = [self._new_message(index, data) for index, data in enumerate(messages)]
        if not batch:
            return []  # nothing to store, and no session is created for nothing
        return self._parts.messages.append(user_id, session_id, batch, validate=_check_structure)

    def history(self, *, user_id: str, session_id: str) -> list[StoredMessage]:
        """Every stored message of the session, in order (summarising never deletes any)."""
        return self._parts.messages.history(user_id, session_id)

    def summary(self, *, user_id: str, session_id: str) -> SummaryRecord | None:
        """The session's stored rolling summary, if any."""
        return self._parts.summaries.get(user_id, session_id)

    def consolidate(self, *, user_id: str, session_id: str) -> SummaryRecord | None:
        """Fold what left the window into the summary now, if the trigger is reached."""
        return self._parts.consolidator.consolidate(user_id, session_id)

    def run_worker(self, *, until_idle: bool = False, stop: threading.Event | None = None) -> None:
        """Run queued consolidations.

        By default in a background thread that runs until ``close``; with ``until_idle`` in
        the caller's thread, returning once no job is pending (for scripts and tests) or once
        ``stop`` is set (the running job is finished first).

        Raises:
            storage.DatabaseUnavailableError: with ``until_idle``, the database went away (a
                background worker waits an outage out instead).
        """
        worker = Worker(self._parts.jobs, self._parts.job_handlers())
        if until_idle:
            worker.run(stop or threading.Event(), until_idle=True)
            return
        thread = threading.Thread(
            target=worker.run, args=(self._stop,), name="stratamem-worker", daemon=True
        )
        thread.start()
        self._worker_threads.append(thread)

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

    def _new_message(self, index: int, data: Mapping[str, Any], *, reserved: int = 0) -> NewMessage:
        if not isinstance(data, Mapping):
            raise InvalidHistoryError(
                [f"message {index}: expected a dict, got {type(data).__name__}"]
            )
        client_id = data.get("id")
        metadata = data.get("metadata", {})
        if client_id is not None and not isinstance(client_id, str):
            raise InvalidHistoryError([f"message {index}: id must be a string"])
        if not isinstance(metadata, Mapping):
            raise InvalidHistoryError([f"message {index}: metadata must be a dict"])
        payload = {key: value for key, value in data.items() if key not in CLIENT_KEYS}
        try:
            [message] = parse_messages([payload])
        except InvalidHistoryError as error:
            # parse_messages numbers the one message it was given 0: name its place in the batch.
            problems = [p.replace("message 0:", f"message {index}:", 1) for p in error.problems]
            raise InvalidHistoryError(problems) from error
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
            metadata=dict(metadata),
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


def _check_structure(tail: list[StoredMessage], batch: list[NewMessage]) -> None:
    """Check a batch against the session's open tail; raise ``InvalidHistoryError``."""
    messages = [message.payload for message in tail] + [message.payload for message in batch]
    problems = validate_history(messages, allow_pending_calls=True)
    if problems:
        offset = len(tail)

        def renumber(match: re.Match[str]) -> str:
            index = int(match.group(1))
            if index < offset:
                return f"stored message {index - offset}"
            return f"message {index - offset}"

        raise InvalidHistoryError([re.sub(r"message (\d+)", renumber, p) for p in problems])


@dataclass(frozen=True, slots=True)
class Parts:
    """What a ``Memory`` is made of, built once from its settings by ``build_parts``."""

    budget: Budget
    counter: TokenCounter
    messages: MessageStore
    recent: RecentMessages
    summaries: SummaryStore
    jobs: JobQueue
    fold_policy: FoldPolicy
    consolidator: Consolidator
    llm_configured: bool

    def job_handlers(self) -> dict[str, JobHandler]:
        """The worker's table: the handler of each job kind."""
        return {CONSOLIDATE: self._consolidate}

    def _consolidate(self, job: Job) -> None:
        self.consolidator.consolidate(job.user_id, job.session_id)


def build_parts(
    database: Database,
    settings: Settings,
    *,
    chat: ChatModel | None = None,
    counter: TokenCounter | None = None,
    on_summary_event: Callable[[SummaryEvent], None] | None = None,
) -> Parts:
    """Build every part of a ``Memory`` from its settings: the one place they are wired."""
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
    summarizer = Summarizer(chat, counter, summary, on_event=on_summary_event)
    return Parts(
        budget=budget,
        counter=counter,
        messages=messages,
        recent=RecentMessages(messages),
        summaries=summaries,
        jobs=JobQueue(database),
        fold_policy=policy,
        consolidator=Consolidator(messages, summaries, summarizer, policy),
        llm_configured=chat is not None,
    )

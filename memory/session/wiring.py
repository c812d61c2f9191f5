"""What a ``Memory`` is made of, and the one place it is wired from the settings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memory.context.budget import Budget, plan_budget
from memory.context.messages import Message
from memory.context.tokens import REPLY_PRIMING_TOKENS, TiktokenCounter, TokenCounter
from memory.errors import ContextOverflowError
from memory.jobs.consolidation import ConsolidationJobs, WorkerRun
from memory.jobs.worker import CARDS, CONSOLIDATE, END_OF_SESSION, JobHandler
from memory.llm import ChatModel, OpenAIChatModel
from memory.longterm.items import Items
from memory.longterm.long_term_memory import LongTermMemory, default_embedder
from memory.session.queued_jobs import QueuedArchiving, QueuedConsolidations
from memory.session.recent import RecentMessages, RecentWindow
from memory.session.writer import SessionWriter
from memory.settings import Settings
from memory.summary.consolidator import Consolidator
from memory.summary.policy import FoldPolicy
from memory.summary.summarizer import Summarizer, SummaryEvent
from retrieval import Embedder
from retrieval.items import ItemIndex
from storage import (
    Database,
    Job,
    JobQueue,
    MessageStore,
    NewMessage,
    SummaryRecord,
    SummaryStore,
)
from storage.items import ItemStore

__all__ = ["Parts", "build_parts"]


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
    queued_archiving: QueuedArchiving
    #: Framework stores' items, found by the cards' embedder (none with long-term memory off).
    items: Items | None = None
    #: The embedder of cards and items (none with long-term memory off).
    embedder: Embedder | None = None

    @property
    def consolidator(self) -> Consolidator:
        """The consolidator of this process's settings (inline mode, ``Memory.consolidate``)."""
        return self.consolidations.consolidator

    def load_window(
        self, user_id: str, session_id: str
    ) -> tuple[SummaryRecord | None, RecentWindow]:
        """The stored summary and the newest messages after its boundary that fill the budget.

        Never past the summary boundary, and only a little more than the budget: the cost of a
        request does not grow with the length of the history. One connection checkout.
        """
        return self.recent.load_with_summary(user_id, session_id, budget=self.budget.history)

    def new_message(
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
        tokens = self.counter.count_message(message)
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

    def job_handlers(self, log: WorkerRun | None = None) -> dict[str, JobHandler]:
        """The worker's table: the handler of each job kind (``log`` collects what ran)."""

        longterm = self.longterm

        def consolidate(job: Job) -> None:
            self.consolidations.run(job, log)
            if longterm is not None:
                # What the fold took out of the window became cards in its summariser call
                # (``memory.longterm.summary_and_cards``); this archives what no such call
                # covered (a fold without a model, messages before it), and is one query when
                # there is none.
                summary = self.summaries.get(job.user_id, job.session_id)
                if summary is not None:
                    longterm.archiver.archive_through(
                        job.user_id, job.session_id, summary.boundary_seq
                    )

        def archive(job: Job) -> None:
            if longterm is None:
                return  # queued by a process with long-term memory on: nothing to do here
            if job.params.get(END_OF_SESSION):
                longterm.archiver.archive_through(job.user_id, job.session_id, None)
            else:
                summary = self.summaries.get(job.user_id, job.session_id)
                if summary is not None:
                    longterm.archiver.archive_through(
                        job.user_id, job.session_id, summary.boundary_seq
                    )

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
    items = None
    if settings.cards.enabled:
        embedder = embedder or default_embedder(settings.cards)
        items = Items(ItemIndex(ItemStore(database), embedder))
        longterm = LongTermMemory(
            database,
            messages,
            embedder,
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
        items=items,
        embedder=embedder if settings.cards.enabled else None,
        # Asked for again after a second (or the debounce) if the summary has not moved.
        queued=QueuedConsolidations(interval_seconds=max(1.0, summary.debounce_seconds)),
        queued_archiving=QueuedArchiving(),
    )

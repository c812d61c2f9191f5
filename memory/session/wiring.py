"""What a ``Memory`` is made of, and the one place it is wired from the settings.

Each part takes what it uses in its constructor; ``Parts`` is only the facade's holder of the
built objects, never handed on whole.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from memory.context.budget import Budget, plan_budget
from memory.context.tokens import TiktokenCounter, TokenCounter
from memory.jobs.consolidation import ConsolidationJobs
from memory.llm import ChatModel, OpenAIChatModel
from memory.longterm.items import Items
from memory.longterm.long_term_memory import LongTermMemory, default_embedder
from memory.session.folding import Folding
from memory.session.preparing import Preparer
from memory.session.queued_jobs import QueuedArchiving, QueuedConsolidations
from memory.session.recent import RecentMessages
from memory.session.writer import SessionWriter
from memory.settings import Settings
from memory.summary.consolidator import Consolidator
from memory.summary.policy import FoldPolicy
from memory.summary.summarizer import Summarizer, SummaryEvent
from retrieval import Embedder
from retrieval.items import ItemIndex
from storage import Database, JobQueue, MessageStore, SummaryStore
from storage.items.store import ItemStore

__all__ = ["Parts", "build_parts"]


@dataclass(frozen=True, slots=True)
class Parts:
    """What a ``Memory`` is made of, built once from its settings by ``build_parts``.

    The facade's holder of the built objects: nothing below the facade is given the whole.
    """

    budget: Budget
    counter: TokenCounter
    messages: MessageStore
    recent: RecentMessages
    summaries: SummaryStore
    writer: SessionWriter
    jobs: JobQueue
    fold_policy: FoldPolicy
    consolidations: ConsolidationJobs
    longterm: LongTermMemory | None
    queued: QueuedConsolidations
    queued_archiving: QueuedArchiving
    folding: Folding
    preparer: Preparer
    #: Framework stores' items, found by the cards' embedder (none with long-term memory off).
    items: Items | None = None
    #: The embedder of cards and items (none with long-term memory off).
    embedder: Embedder | None = None


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
    raw_summarizer = Summarizer(None, counter, summary, on_event=on_summary_event)
    recent = RecentMessages(messages, counter)
    writer = SessionWriter(messages, counter, history_budget=budget.history)
    jobs = JobQueue(database)
    consolidations = ConsolidationJobs(
        messages,
        summaries,
        chat=chat,
        counter=counter,
        model=settings.model,
        policy=policy,
        summary=summary,
        on_summary_event=on_summary_event,
        archiver=longterm.archiver if longterm is not None else None,
        extractor_for=longterm.extractor_for if longterm is not None else None,
    )
    # Asked for again after a second (or the debounce) if the summary has not moved.
    queued = QueuedConsolidations(interval_seconds=max(1.0, summary.debounce_seconds))
    queued_archiving = QueuedArchiving()
    folding = Folding(
        settings,
        messages=messages,
        recent=recent,
        history_budget=budget.history,
        fold_policy=policy,
        jobs=jobs,
        consolidations=consolidations,
        # One step whatever the backlog: writing an archive costs no model call.
        raw_archiver=Consolidator(
            messages, summaries, raw_summarizer, policy, max_step_tokens=2**62
        ),
        archiver=longterm.archiver if longterm is not None else None,
        queued=queued,
        queued_archiving=queued_archiving,
        llm_configured=chat is not None,
    )
    preparer = Preparer(
        settings,
        folding,
        recent=recent,
        writer=writer,
        counter=counter,
        history_budget=budget.history,
        fold_policy=policy,
        longterm=longterm,
        llm_configured=chat is not None,
    )
    return Parts(
        budget=budget,
        counter=counter,
        messages=messages,
        recent=recent,
        summaries=summaries,
        writer=writer,
        jobs=jobs,
        fold_policy=policy,
        consolidations=consolidations,
        longterm=longterm,
        items=items,
        embedder=embedder if settings.cards.enabled else None,
        queued=queued,
        queued_archiving=queued_archiving,
        folding=folding,
        preparer=preparer,
    )

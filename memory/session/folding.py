"""Folding what left the window into the summary: now (inline mode) or as a queued job.

``prepare`` folds once the window passes the trigger and archives raw what the cap would
otherwise drop; ``record`` folds once the stored tokens after the summary pass the trigger.
What a fold takes out of the window is also archived as cards (long-term memory), and in
background mode what ``record`` and ``prepare`` store is archived within seconds anyway
(``archive_soon``), so that the user's other sessions recall it.
"""

from __future__ import annotations

from datetime import UTC, datetime

from memory.jobs.consolidation import ConsolidationJobs
from memory.jobs.worker import CARDS, CONSOLIDATE, END_OF_SESSION
from memory.longterm.archiving import MessageArchiver
from memory.session.queued_jobs import QueuedArchiving, QueuedConsolidations
from memory.session.recent import RecentMessages, RecentWindow
from memory.settings import Settings
from memory.summary.consolidator import Consolidator
from memory.summary.policy import FoldPolicy
from storage import JobQueue, MessageStore, SummaryRecord

__all__ = ["Folding"]


class Folding:
    """Folds a session's summary forward, inline or through the job queue, per the settings.

    Args:
        settings: the fold mode (inline or background), its debounce, and the cards settings.
        messages: the message store (the tokens stored after the summary).
        recent: the recent windows, reloaded after a fold.
        history_budget: the tokens a request's history may take (the window reloaded).
        fold_policy: when a fold is due.
        jobs: the queue consolidation and cards jobs go to (background mode).
        consolidations: this process's fold (inline) and the params of the jobs it queues.
        raw_archiver: folds into a raw archive, no model (what the hard cap would drop).
        archiver: archives folded messages as cards (``None``: long-term memory is off).
        queued: the sessions this process queued a consolidation for (one per burst).
        queued_archiving: the sessions this process queued a cards job for.
        llm_configured: whether a chat model writes summaries (a raw archive is upgraded).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        messages: MessageStore,
        recent: RecentMessages,
        history_budget: int,
        fold_policy: FoldPolicy,
        jobs: JobQueue,
        consolidations: ConsolidationJobs,
        raw_archiver: Consolidator,
        archiver: MessageArchiver | None,
        queued: QueuedConsolidations,
        queued_archiving: QueuedArchiving,
        llm_configured: bool,
    ) -> None:
        self._settings = settings
        self._messages = messages
        self._recent = recent
        self._history_budget = history_budget
        self._fold_policy = fold_policy
        self._jobs = jobs
        self._consolidations = consolidations
        self._raw_archiver = raw_archiver
        self._archiver = archiver
        self._queued = queued
        self._queued_archiving = queued_archiving
        self._llm_configured = llm_configured

    def load_window(
        self, user_id: str, session_id: str
    ) -> tuple[SummaryRecord | None, RecentWindow]:
        """The stored summary and the newest messages after its boundary that fill the budget.

        Never past the summary boundary, and only a little more than the budget: the cost of a
        request does not grow with the length of the history. One connection checkout.
        """
        return self._recent.load_with_summary(user_id, session_id, budget=self._history_budget)

    @property
    def _background(self) -> bool:
        return self._settings.summary.mode == "background"

    def schedule(
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
            queued, version = self._queued, summary.version if summary else 0
            if queued.due(user_id, session_id, version):
                self.fold(user_id, session_id)
                queued.queued(user_id, session_id, version)
            return summary, window
        if self.fold(user_id, session_id) is None:
            return summary, window
        return self.load_window(user_id, session_id)

    def fold(self, user_id: str, session_id: str) -> SummaryRecord | None:
        """Fold what left the window: queue the job (background) or fold and archive now.

        Returns:
            The summary a fold saved now (inline mode), else ``None``.
        """
        if self._background:
            self._jobs.enqueue(
                CONSOLIDATE,
                user_id,
                session_id,
                delay_seconds=self._settings.summary.debounce_seconds,
                params=self._consolidations.params(),
            )
            return None
        saved = self._consolidations.consolidator.consolidate(user_id, session_id)
        if saved is not None:
            self.archive_folded(user_id, session_id, saved)
        return saved

    def archive_folded(self, user_id: str, session_id: str, saved: SummaryRecord) -> None:
        """Archive as cards the messages a fold just took out of the window.

        Inline mode archives now; background mode queues a ``cards`` job (the consolidation
        job archives what it folds itself).
        """
        archiver = self._archiver
        if archiver is None:
            return
        if self._background:
            # Due now: a pending job of the session is moved earlier, and no longer surely
            # pending when the next records come.
            self._queued_archiving.forget(user_id, session_id)
            self._jobs.enqueue(CARDS, user_id, session_id)
        else:
            archiver.archive_through(user_id, session_id, saved.boundary_seq)

    def archive_soon(self, user_id: str, session_id: str) -> None:
        """Queue the archiving of the session's stored messages as cards, debounced.

        Background mode with ``cards.archive_promptly`` (``record`` calls it): a ``cards`` job
        that archives every message not archived yet (turn cards, then one extraction per
        range), due ``cards.debounce_seconds`` from now. Messages stored meanwhile, by
        ``record`` or ``prepare``, join it: a pending job keeps its earlier time
        (``JobQueue.enqueue``), and while the job this process created is surely pending, a
        record queues nothing (``QueuedArchiving``). A fold that comes later finds those
        messages archived and asks its model for the summary alone
        (``memory.longterm.summary_and_cards``): nothing is extracted twice. Inline mode
        archives at folds and ``end_session``.
        """
        cards = self._settings.cards
        if self._archiver is None or not self._background or not cards.archive_promptly:
            return
        queued = self._queued_archiving
        if queued.pending(user_id, session_id):
            return
        asked = queued.now()
        created = self._jobs.enqueue(
            CARDS,
            user_id,
            session_id,
            delay_seconds=cards.debounce_seconds,
            params={END_OF_SESSION: True},
        )
        if created:
            queued.created(user_id, session_id, asked, cards.debounce_seconds)

    def archive_inline(
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
        raw = self._raw_archiver
        if through is None:
            saved = raw.consolidate(user_id, session_id)
        else:
            saved = raw.fold_through(user_id, session_id, through)
        upgrading = saved is not None and self._llm_configured and self._background
        if upgrading:
            if summary is None or summary.kind == "llm":
                base = summary or _NO_SUMMARY
                params = self._consolidations.params(upgrade_from=base)
            else:
                # A raw summary already waits for its upgrade: the queued job keeps its base.
                params = self._consolidations.params()
            self._jobs.enqueue(
                CONSOLIDATE,
                user_id,
                session_id,
                delay_seconds=self._settings.summary.debounce_seconds,
                params=params,
            )
        archived = (saved.covered if saved else 0) - (summary.covered if summary else 0)
        if saved is not None and not upgrading:
            # An upgrade job extracts the archived messages' cards in its summariser call, and
            # archives whatever is left through the boundary after it: no ``cards`` job needed.
            self.archive_folded(user_id, session_id, saved)
        reloaded, window = self.load_window(user_id, session_id)
        return max(archived, 0), reloaded, window

    def fold_when_due(self, user_id: str, session_id: str) -> None:
        """Fold (or queue the fold) once the messages after the summary pass the trigger.

        ``record`` calls it after every batch, so a session fed only by ``record`` (an agent
        that never calls ``prepare``, an imported conversation) is summarised and archived as
        cards all the same. The test is one statement: the sum of the stored token counts from
        the boundary on.
        """
        # In background mode a fold already queued makes the sum moot (the queue debounces):
        # it is skipped, so its cost is bounded by what one fold leaves, not by the backlog.
        queued = CONSOLIDATE if self._background else None
        tokens = self._messages.tokens_after_summary(user_id, session_id, unless_queued=queued)
        if tokens is not None and tokens > self._fold_policy.trigger_tokens:
            self.fold(user_id, session_id)


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

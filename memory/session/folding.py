"""Folding what left the window into the summary: now (inline mode) or as a queued job.

``prepare`` folds once the window passes the trigger and archives raw what the cap would
otherwise drop; ``record`` folds once the stored tokens after the summary pass the trigger.
What a fold takes out of the window is also archived as cards (long-term memory), and in
background mode what ``record`` and ``prepare`` store is archived within seconds anyway
(``archive_soon``), so that the user's other sessions recall it.
"""

from __future__ import annotations

from datetime import UTC, datetime

from memory.jobs.worker import CARDS, CONSOLIDATE, END_OF_SESSION
from memory.session.recent import RecentWindow
from memory.session.wiring import Parts
from memory.settings import Settings
from storage import SummaryRecord

__all__ = ["Folding"]


class Folding:
    """Folds a session's summary forward, inline or through the job queue, per the settings."""

    def __init__(self, parts: Parts, settings: Settings) -> None:
        self._parts = parts
        self._settings = settings

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
            queued, version = self._parts.queued, summary.version if summary else 0
            if queued.due(user_id, session_id, version):
                self.fold(user_id, session_id)
                queued.queued(user_id, session_id, version)
            return summary, window
        if self.fold(user_id, session_id) is None:
            return summary, window
        return self._parts.load_window(user_id, session_id)

    def fold(self, user_id: str, session_id: str) -> SummaryRecord | None:
        """Fold what left the window: queue the job (background) or fold and archive now.

        Returns:
            The summary a fold saved now (inline mode), else ``None``.
        """
        if self._background:
            self._parts.jobs.enqueue(
                CONSOLIDATE,
                user_id,
                session_id,
                delay_seconds=self._settings.summary.debounce_seconds,
                params=self._parts.consolidations.params(),
            )
            return None
        saved = self._parts.consolidator.consolidate(user_id, session_id)
        if saved is not None:
            self.archive_folded(user_id, session_id, saved)
        return saved

    def archive_folded(self, user_id: str, session_id: str, saved: SummaryRecord) -> None:
        """Archive as cards the messages a fold just took out of the window.

        Inline mode archives now; background mode queues a ``cards`` job (the consolidation
        job archives what it folds itself).
        """
        longterm = self._parts.longterm
        if longterm is None:
            return
        if self._background:
            # Due now: a pending job of the session is moved earlier, and no longer surely
            # pending when the next records come.
            self._parts.queued_archiving.forget(user_id, session_id)
            self._parts.jobs.enqueue(CARDS, user_id, session_id)
        else:
            longterm.archiver.archive_through(user_id, session_id, saved.boundary_seq)

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
        if self._parts.longterm is None or not self._background or not cards.archive_promptly:
            return
        queued = self._parts.queued_archiving
        if queued.pending(user_id, session_id):
            return
        asked = queued.now()
        created = self._parts.jobs.enqueue(
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
                delay_seconds=self._settings.summary.debounce_seconds,
                params=params,
            )
        archived = (saved.covered if saved else 0) - (summary.covered if summary else 0)
        if saved is not None and not upgrading:
            # An upgrade job extracts the archived messages' cards in its summariser call, and
            # archives whatever is left through the boundary after it: no ``cards`` job needed.
            self.archive_folded(user_id, session_id, saved)
        reloaded, window = self._parts.load_window(user_id, session_id)
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
        tokens = self._parts.messages.tokens_after_summary(
            user_id, session_id, unless_queued=queued
        )
        if tokens is not None and tokens > self._parts.fold_policy.trigger_tokens:
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

"""Consolidation jobs: the parameters a job carries, how a worker runs it, and what it logs.

A job carries what the fold needs (the tokenizer model, the fold thresholds, the summary
settings), written by the process that queued it, so a worker started with other settings does
the same fold the application would have done. Secrets never travel: the LLM endpoint and key
are the worker's own.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from memory.cards import CardExtractor
from memory.context.tokens import TiktokenCounter, TokenCounter
from memory.jobs.worker import CARDS, CONSOLIDATE, END_OF_SESSION, JobHandler
from memory.llm import ChatModel
from memory.longterm.archiving import MessageArchiver
from memory.longterm.summary_and_cards import ArchivingFold, SharedFold
from memory.settings import SummarySettings
from memory.summary.consolidator import Consolidator
from memory.summary.policy import FoldPolicy
from memory.summary.summarizer import PreviousSummary, Summarizer, SummaryEvent
from storage import Job, MessageStore, SummaryRecord, SummaryStore

__all__ = ["ConsolidationJobs", "JobOutcome", "WorkerRun"]

logger = logging.getLogger(__name__)

#: The key of a job's params that asks to upgrade a raw archive (see ``Consolidator.upgrade``).
UPGRADE = "upgrade"


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """What one consolidation job did.

    Attributes:
        job_id: the job.
        user_id: the session's user.
        session_id: the session.
        folded: messages newly covered by the summary.
        kind: the summary's kind afterwards (``llm`` or ``raw``), ``None`` when there is none.
        upgraded: whether a raw archive was rewritten as a model summary.
        duration_s: how long the job ran.
    """

    job_id: int
    user_id: str
    session_id: str
    folded: int
    kind: str | None
    upgraded: bool
    duration_s: float


@dataclass
class WorkerRun:
    """The jobs a worker ran, for its one-line report (thread-safe to add to)."""

    outcomes: list[JobOutcome] = field(default_factory=list)
    failures: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, outcome: JobOutcome) -> None:
        """Record one finished job."""
        with self._lock:
            self.outcomes.append(outcome)

    def summary_line(self) -> str:
        """One line: jobs, sessions, messages folded, summaries by kind, failures, time."""
        with self._lock:
            outcomes = list(self.outcomes)
        kinds = [outcome.kind for outcome in outcomes]
        return (
            f"ran {len(outcomes)} job(s) on {len({o.session_id for o in outcomes})} session(s): "
            f"{sum(o.folded for o in outcomes)} message(s) folded, "
            f"{kinds.count('llm')} llm and {kinds.count('raw')} raw summaries, "
            f"{sum(o.upgraded for o in outcomes)} archive(s) upgraded, "
            f"{self.failures} failed, {sum(o.duration_s for o in outcomes):.2f} s"
        )


@dataclass(frozen=True, slots=True)
class _Fold:
    """What a consolidation needs besides the database and the chat model."""

    model: str
    policy: FoldPolicy
    summary: SummarySettings

    def params(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "fold": {
                "trigger_tokens": self.policy.trigger_tokens,
                "target_tokens": self.policy.target_tokens,
                "min_recent_messages": self.policy.min_recent_messages,
            },
            "summary": self.summary.model_dump(mode="json"),
        }

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> _Fold:
        return cls(
            str(params["model"]),
            FoldPolicy(**params["fold"]),
            SummarySettings(**params["summary"]),
        )


class ConsolidationJobs:
    """Runs consolidation jobs with the parameters each one carries.

    Args:
        messages: the message store.
        summaries: the summary store.
        chat: the worker's chat model (``None``: offline, every summary is a raw archive).
        counter: this process's token counter, for jobs queued with this process's model.
        model: this process's model (picks the tokenizer).
        policy: this process's fold thresholds.
        summary: this process's (resolved) summary settings.
        on_summary_event: receives every summariser event.
        archiver: long-term memory's archiver, when it is on: the jobs that archive cards
            run it, and with a chat model (and ``extractor_for``) each fold's summariser call
            extracts the fold's cards too and stores them through it
            (``memory.longterm.summary_and_cards``).
        extractor_for: long-term memory's card extractor for a job's summary settings
            (``LongTermMemory.extractor_for``), with ``archiver``.
    """

    def __init__(
        self,
        messages: MessageStore,
        summaries: SummaryStore,
        *,
        chat: ChatModel | None,
        counter: TokenCounter,
        model: str,
        policy: FoldPolicy,
        summary: SummarySettings,
        on_summary_event: Callable[[SummaryEvent], None] | None = None,
        archiver: MessageArchiver | None = None,
        extractor_for: Callable[[SummarySettings], CardExtractor] | None = None,
    ) -> None:
        self._messages = messages
        self._archiver = archiver
        self._extractor_for = extractor_for
        self._summaries = summaries
        self._chat = chat
        self._counter = counter
        self._on_summary_event = on_summary_event
        self._own = _Fold(model, policy, summary)
        self._own_params = self._own.params()  # queued with every job: computed once
        self._consolidators: dict[str, Consolidator] = {}
        self._lock = threading.Lock()
        #: The consolidator of this process's own settings (inline mode, ``Memory.consolidate``).
        self.consolidator = self._build(self._own)

    def params(self, *, upgrade_from: SummaryRecord | None = None) -> dict[str, Any]:
        """The params of a job queued by this process.

        Args:
            upgrade_from: the model-written summary a raw archive was just appended to (or a
                stand-in with boundary 0 and no text, when there was no summary): the job
                then upgrades the archive from there.
        """
        params = dict(self._own_params)
        if upgrade_from is not None:
            params[UPGRADE] = {
                "seq": upgrade_from.boundary_seq,
                "text": upgrade_from.content if upgrade_from.boundary_seq else None,
            }
        return params

    def job_handlers(self, log: WorkerRun | None = None) -> dict[str, JobHandler]:
        """The worker's table: the handler of each job kind (``log`` collects what ran)."""

        archiver = self._archiver

        def consolidate(job: Job) -> None:
            self.run(job, log)
            if archiver is not None:
                # What the fold took out of the window became cards in its summariser call
                # (``memory.longterm.summary_and_cards``); this archives what no such call
                # covered (a fold without a model, messages before it), and is one query when
                # there is none.
                summary = self._summaries.get(job.user_id, job.session_id)
                if summary is not None:
                    archiver.archive_through(job.user_id, job.session_id, summary.boundary_seq)

        def archive(job: Job) -> None:
            if archiver is None:
                return  # queued by a process with long-term memory on: nothing to do here
            if job.params.get(END_OF_SESSION):
                archiver.archive_through(job.user_id, job.session_id, None)
            else:
                summary = self._summaries.get(job.user_id, job.session_id)
                if summary is not None:
                    archiver.archive_through(job.user_id, job.session_id, summary.boundary_seq)

        return {CONSOLIDATE: consolidate, CARDS: archive}

    def run(self, job: Job, log: WorkerRun | None = None) -> JobOutcome:
        """Run one consolidation job: upgrade a raw archive if asked, then fold what is due."""
        started = time.monotonic()
        consolidator = self._for(job.params)
        before = self._summaries.get(job.user_id, job.session_id)
        upgraded = self._upgrade(job, consolidator)
        consolidator.consolidate(job.user_id, job.session_id)
        after = self._summaries.get(job.user_id, job.session_id)
        outcome = JobOutcome(
            job.id,
            job.user_id,
            job.session_id,
            (after.covered if after else 0) - (before.covered if before else 0),
            after.kind if after else None,
            upgraded,
            time.monotonic() - started,
        )
        logger.info(
            "job %s, session %s: %d message(s) folded, summary %s%s, %.3f s",
            outcome.job_id,
            outcome.session_id,
            outcome.folded,
            outcome.kind or "none",
            " (raw archive upgraded)" if upgraded else "",
            outcome.duration_s,
        )
        if log is not None:
            log.add(outcome)
        return outcome

    def _upgrade(self, job: Job, consolidator: Consolidator) -> bool:
        upgrade = job.params.get(UPGRADE)
        if upgrade is None or self._chat is None:
            return False  # nothing asked, or offline: the archive is the summary
        text = upgrade.get("text")
        base = PreviousSummary(text=text, kind="llm") if text is not None else None
        saved = consolidator.upgrade(job.user_id, job.session_id, base, int(upgrade["seq"]))
        return saved is not None

    def _for(self, params: dict[str, Any]) -> Consolidator:
        """The consolidator for a job's params (this process's own when it carries none)."""
        if "fold" not in params:
            return self.consolidator  # queued before jobs carried their parameters
        fold = _Fold.from_params(params)
        key = json.dumps(fold.params(), sort_keys=True)
        with self._lock:
            if key not in self._consolidators:
                self._consolidators[key] = self._build(fold)
            return self._consolidators[key]

    def _build(self, fold: _Fold) -> Consolidator:
        counter = self._counter if fold.model == self._own.model else TiktokenCounter(fold.model)
        summarizer = Summarizer(self._chat, counter, fold.summary, on_event=self._on_summary_event)
        step = None
        archiver, extractor_for = self._archiver, self._extractor_for
        if archiver is not None and extractor_for is not None and self._chat is not None:
            # One call per fold for the summary and the cards. Offline, the fold writes its raw
            # archive and the cards come from the rules after it, as they always did.
            shared = SharedFold(
                summarizer,
                extractor_for(fold.summary),
                on_event=self._on_summary_event,
            )
            step = ArchivingFold(shared, archiver)
        return Consolidator(self._messages, self._summaries, summarizer, fold.policy, step=step)

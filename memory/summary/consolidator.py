"""Folds what left the window into the session's stored summary, with compare-and-set."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from memory.context.messages import Message
from memory.context.units import fit_newest, split_units
from memory.summary.policy import FoldPolicy, limit_fold
from memory.summary.summarizer import PreviousSummary, Summarizer, SummaryResult
from storage import MessageStore, StoredMessage, SummaryRecord, SummaryStore

__all__ = ["MAX_STEP_MESSAGES", "Consolidator", "FoldStep"]

logger = logging.getLogger(__name__)

#: The most messages one step reads: a raw archive's step has no token bound, and ten thousand
#: one-word messages are few tokens.
MAX_STEP_MESSAGES = 10_000


class FoldStep(Protocol):
    """Writes the summary of one fold, and stores whatever else the fold yields, first.

    The consolidator stores the returned summary after the step returns, so what the step
    stores (the fold's cards) is stored before the boundary moves: a crash in between leaves
    the stored extra work and the old summary, and the retry folds again without redoing it.
    """

    def __call__(
        self,
        user_id: str,
        session_id: str,
        previous: PreviousSummary | None,
        stored: Sequence[StoredMessage],
        folded: Sequence[Message],
    ) -> SummaryResult:
        """The summary replacing ``previous`` once ``folded`` (stored as ``stored``) leaves."""
        ...


class Consolidator:
    """Reads the increment after the stored boundary, summarises it, stores the new summary.

    The boundary advances only in the statement that stores the new summary, guarded by the
    summary's version: when two consolidations of one session race, exactly one is stored and
    the other is discarded, so no message is lost or counted twice.
    """

    def __init__(
        self,
        messages: MessageStore,
        summaries: SummaryStore,
        summarizer: Summarizer,
        policy: FoldPolicy,
        *,
        max_step_tokens: int | None = None,
        step: FoldStep | None = None,
    ) -> None:
        self._messages = messages
        self._summaries = summaries
        self._summarizer = summarizer
        #: How one fold is summarised: the summariser alone, or a step that does more with
        #: the same model call (``memory.longterm.summary_and_cards``: the fold's cards too).
        self._step = step
        self.policy = policy
        # A model reads each step: bound its prompt. A raw archive (no model) needs no bound.
        self._max_step_tokens = max_step_tokens or 2 * policy.trigger_tokens

    def consolidate(self, user_id: str, session_id: str) -> SummaryRecord | None:
        """Fold the messages that left the window into the summary, if the trigger is reached.

        A backlog is folded in steps of at most twice the trigger (or ``max_step_tokens``),
        one summariser call each.

        Returns:
            The new summary, or ``None`` when nothing was due or another consolidation won.
        """
        saved: SummaryRecord | None = None
        while True:
            step, more = self._fold_once(user_id, session_id)
            if step is None:
                return saved
            saved = step
            if not more:
                return saved

    def upgrade(
        self, user_id: str, session_id: str, base: PreviousSummary | None, base_seq: int
    ) -> SummaryRecord | None:
        """Rewrite a raw-archive summary as a model-written one, at the same boundary.

        ``prepare`` archives raw (no model, in milliseconds) what the window could not hold
        before a background summary arrived; this turns that archive back into a real summary:
        from ``base`` (the model-written summary the archives started from, covering the
        messages up to ``base_seq``; ``None`` for none) over the messages up to the stored
        boundary, in bounded steps. The boundary does not move; the stored summary is replaced
        only if it is still the one read (compare-and-set) and every step was written by a
        model: a failed step keeps the archive, which loses nothing. With a fold step, each
        step is the step's call (the shared fold extracts the cards of the messages not
        archived yet in it).

        Returns:
            The upgraded summary, or ``None`` when there was nothing to upgrade, a model
            failed, or another writer stored first.
        """
        current = self._summaries.get(user_id, session_id)
        if current is None or current.kind != "raw" or current.boundary_seq <= base_seq:
            return None
        stored = self._messages.between(user_id, session_id, base_seq, current.boundary_seq)
        if not stored or stored[-1].seq != current.boundary_seq:
            return None  # erased since the summary was read
        boundary = stored[-1]
        parsed = [Message.from_openai(message.payload) for message in stored]
        tokens = [message.tokens for message in stored]
        previous = base
        while parsed:
            step = limit_fold(parsed, tokens, len(parsed), 2 * self.policy.trigger_tokens)
            if self._step is None:
                result = self._summarizer.summarise(previous, parsed[:step])
            else:
                result = self._step(user_id, session_id, previous, stored[:step], parsed[:step])
            if result.kind != "llm":
                logger.info("session %s: the archive stays raw (no model summary)", session_id)
                return None
            previous = PreviousSummary(text=result.text, kind="llm")
            stored, parsed, tokens = stored[step:], parsed[step:], tokens[step:]
        assert previous is not None  # the loop ran: there were messages after base_seq
        return self._summaries.save(
            user_id,
            session_id,
            content=previous.text,
            kind="llm",
            boundary=boundary,
            covered=current.covered,
            expected_version=current.version,
        )

    def fold_through(self, user_id: str, session_id: str, last_seq: int) -> SummaryRecord | None:
        """Fold every message up to ``last_seq`` into the summary now, due or not, in one step.

        For what must not leave the context unsummarised although the policy's trigger is not
        reached (a long system prompt or summary left the window little room).
        ``last_seq`` must end a unit (never between a tool call and its results).

        Returns:
            The new summary, or ``None`` when nothing is left to fold or another writer won.
        """
        previous = self._summaries.get(user_id, session_id)
        boundary = previous.boundary_seq if previous else 0
        if last_seq <= boundary:
            return None
        stored = self._messages.between(user_id, session_id, boundary, last_seq)
        parsed = [Message.from_openai(message.payload) for message in stored]
        return self._save_fold(user_id, session_id, previous, stored, parsed, len(stored))

    def _fold_once(self, user_id: str, session_id: str) -> tuple[SummaryRecord | None, bool]:
        previous = self._summaries.get(user_id, session_id)
        boundary = previous.boundary_seq if previous else 0
        stored, more = self._increment(user_id, session_id, boundary)
        parsed = [Message.from_openai(message.payload) for message in stored]
        tokens = [message.tokens for message in stored]
        if more:
            # A backlog: a fold is surely due. The newest units of the increment are left for
            # the step that plans the end; and the read may end inside the current turn (a long
            # tool loop), which a fold never takes: it stops before the session's last user
            # message.
            turn = self._messages.turn_start(user_id, session_id)
            due = min(
                self._left_for_later(parsed, tokens),
                next((i for i, m in enumerate(stored) if m.seq >= turn), len(stored)),
            )
        else:
            due = self.policy.plan(parsed, tokens)
        fold = limit_fold(parsed, tokens, due, self._max_step_tokens)
        if fold == 0:
            return None, False
        saved = self._save_fold(user_id, session_id, previous, stored, parsed, fold)
        return saved, more or fold < due

    def _left_for_later(self, parsed: list[Message], tokens: list[int]) -> int:
        """Where a backlog step's fold ends: before the increment's newest whole units within
        the trigger (its last unit at least: the read may have cut it short).

        What follows the increment may be a single message (the read stopped at its message
        count, or at ``max_step_tokens`` plus the trigger): folding the increment whole would
        leave that message alone in the window, where the policy keeps about its target. Left
        the trigger's worth, the last step plans the fold over them and keeps what it keeps
        from any history. At most half the read is left (from a unit start on), so a read cut
        by its message count (short messages, a large trigger) still moves the backlog by half
        of it each step.
        """
        units = split_units(parsed)
        kept = fit_newest(
            reversed(units[1:]),
            self.policy.trigger_tokens,
            lambda unit: sum(tokens[unit.start : unit.stop]),
        )
        half = next((u.start for u in units if u.start >= len(parsed) // 2), units[-1].start)
        return min(max(kept[0].start if kept else len(parsed), half), units[-1].start)

    def _increment(
        self, user_id: str, session_id: str, boundary: int
    ) -> tuple[list[StoredMessage], bool]:
        """The messages after ``boundary`` one step may need, and whether more follow them.

        A step folds at most ``max_step_tokens``, and the policy keeps at most the trigger:
        reading that much (and one row more, to know) bounds each step's cost by its increment,
        so a worker catching up on a long backlog is linear, not quadratic, in its length.
        """
        wanted = self._max_step_tokens + self.policy.trigger_tokens
        stored = self._messages.read_increment(
            user_id,
            session_id,
            after_seq=boundary,
            max_tokens=wanted,
            max_messages=MAX_STEP_MESSAGES,
        )
        if not stored:
            return stored, False
        beyond = self._messages.read_increment(
            user_id, session_id, after_seq=stored[-1].seq, max_tokens=1, max_messages=1, batch=1
        )
        if beyond and len(split_units([Message.from_openai(m.payload) for m in stored])) < 2:
            # One unit larger than a whole step: read it whole, whatever it costs.
            return self._messages.between(user_id, session_id, boundary, None), False
        return stored, bool(beyond)

    def _save_fold(
        self,
        user_id: str,
        session_id: str,
        previous: SummaryRecord | None,
        stored: list[StoredMessage],
        parsed: list[Message],
        fold: int,
    ) -> SummaryRecord | None:
        """Summarise the first ``fold`` messages after ``previous`` and store the result."""
        base = PreviousSummary(text=previous.content, kind=previous.kind) if previous else None
        if self._step is None:
            result = self._summarizer.summarise(base, parsed[:fold])
        else:
            result = self._step(user_id, session_id, base, stored[:fold], parsed[:fold])
        saved = self._summaries.save(
            user_id,
            session_id,
            content=result.text,
            kind=result.kind,
            boundary=stored[fold - 1],
            covered=(previous.covered if previous else 0) + fold,
            expected_version=previous.version if previous else 0,
        )
        if saved is None:
            logger.info("session %s: another consolidation stored first; discarded", session_id)
        return saved

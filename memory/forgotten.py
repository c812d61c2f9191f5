"""``Forgotten``: what one ``Memory.forget`` deleted, counted by table."""

from __future__ import annotations

from dataclasses import dataclass

from storage import Erased

__all__ = ["Forgotten"]


@dataclass(frozen=True, slots=True)
class Forgotten(Erased):
    """What one ``Memory.forget`` deleted, counted by table (see ``storage.Erased``)."""

    def describe(self) -> str:
        """One line for people, e.g. ``12 messages, 1 summary, 5 cards (31 keyword terms),
        2 jobs, 1 archive mark, 1 session``."""
        counts = (
            (self.messages, "message", "messages"),
            (self.summaries, "summary", "summaries"),
            (self.cards, "card", "cards"),
            (self.jobs, "job", "jobs"),
            (self.archive_marks, "archive mark", "archive marks"),
            (self.sessions, "session", "sessions"),
        )
        described = [f"{number:,} {one if number == 1 else many}" for number, one, many in counts]
        described[2] += f" ({self.card_terms:,} keyword term{'' if self.card_terms == 1 else 's'})"
        if self.store_items:  # only stores' users have any: the others' line stays as it was
            plural = "" if self.store_items == 1 else "s"
            described.append(f"{self.store_items:,} store item{plural}")
        # The inspector's records (``stratamem ui``): named when there were any.
        for number, one, many in (
            (self.reports, "kept report", "kept reports"),
            (self.summary_versions, "earlier summary version", "earlier summary versions"),
        ):
            if number:
                described.append(f"{number:,} {one if number == 1 else many}")
        return ", ".join(described)

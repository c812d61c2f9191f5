"""Archived turns: a raw message kept as a ``turn`` card, so what no extractor kept is findable.

A turn card is what was said, by whom and when, not a judgment about it: its text is the
message as written (trimmed), its subject and attribute are empty (a turn never supersedes
nor is superseded) and its ``occurred_at`` is the date the message states, if any, so time
filters find "I went to Lisbon last May" under May.
"""

from __future__ import annotations

from memory.cards.dates import resolve_date
from memory.cards.model import ExtractedCard, SourceMessage

__all__ = ["turn_draft"]


def turn_draft(message: SourceMessage) -> ExtractedCard | None:
    """The ``turn`` card of one message; ``None`` for a message without text.

    Two turns with the same text (``ok``) have one content hash: the store keeps one card and
    merges their sources, which recall by content cannot tell apart anyway.
    """
    text = message.text.strip()
    if not text:
        return None
    resolved = resolve_date(text, message.time)
    return ExtractedCard(
        type="turn",
        text=text,
        observed_at=message.time,
        topic="turn",
        tags=(message.role,),
        occurred_at=resolved.occurred_at if resolved else None,
        precision=resolved.precision if resolved else None,
        source_indices=(message.index,),
        source_ids=(message.id,) if message.id is not None else (),
    )

"""Walking a session back, newest first, a batch of messages per short query, and the window
read (``WindowRead``: the summary and the messages after its boundary) built on that walk."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from storage.engine import Database
from storage.messages.reads import messages_after
from storage.messages.request_statements import WindowRows
from storage.records import StoredMessage, SummaryRecord

__all__ = ["WindowRead", "floor_parameters", "walk_back_from", "window_read"]


@dataclass(frozen=True, slots=True)
class WindowRead:
    """A session's summary and the messages after its boundary (``walk_back_after_summary``).

    Attributes:
        summary: the session's summary, or None.
        messages: the messages after the boundary and ``floor``, newest first, read lazily.
        floor: the seq of the caller's ``held`` message when the session still holds it (the
            messages start after it), else 0: what the caller held is gone.
    """

    summary: SummaryRecord | None
    messages: Iterator[StoredMessage]
    floor: int


def floor_parameters(held: StoredMessage | None) -> dict[str, int | None]:
    """The window statement's floor parameters for a caller holding messages up to ``held``."""
    return {"floor": held.seq if held else 0, "floor_id": held.id if held else None}


def window_read(
    database: Database,
    rows: WindowRows,
    first: list[StoredMessage],
    user_id: str,
    session_id: str,
    batch: int,
) -> WindowRead:
    """The window statement's rows, the first ones first, then walked back further."""
    after_seq = max(rows.floor, rows.summary.boundary_seq if rows.summary else 0)
    upto = rows.recent[-1].seq - 1 if len(rows.recent) == batch else after_seq
    walked = walk_back_from(
        database, [*first, *rows.recent], user_id, session_id, upto, after_seq, batch
    )
    return WindowRead(rows.summary, walked, rows.floor)


def walk_back_from(
    database: Database,
    first: list[StoredMessage],
    user_id: str,
    session_id: str,
    upto: int,
    after_seq: int,
    batch: int,
) -> Iterator[StoredMessage]:
    """Yield ``first``, then the messages with ``after_seq < seq <= upto``, newest first.

    Each further batch is one query, made only when the caller asks beyond the one before; no
    connection is held between batches.
    """
    # Seqs are contiguous (appends are serialised), so each seq range holds exactly `batch`.
    yield from first
    while upto > after_seq:
        with database.reading() as connection:
            records = messages_after(
                connection,
                user_id,
                session_id,
                max(after_seq, upto - batch),
                upto_seq=upto,
                newest_first=True,
            )
        yield from records
        upto -= batch

"""The raw archive a fold stores when no model wrote its summary, and what of it is sent again.

A raw archive is the model summary it was appended to (its *head*, when there was one) and the
folded messages as plain lines, newest last. While folds keep failing, each next fold sends the
archive to the model as its current summary, so an increment archived once would be sent again
by every fold until one succeeds. To bound that, the lines are kept in blocks under a header
that says in how many folds a model read them and failed (``[raw archive; summariser tries:
2]``); lines before any header were read by none (an archive written offline, during an
outage, or by ``prepare``), and once an archive has headers, what comes before the first is its
head. A fold sends the head and the blocks tried fewer than ``ARCHIVE_MAX_TRIES`` times: an
archived increment goes to a model that answers in at most that many folds. A block tried that
often stays in the stored archive (and in the context) until a model summary replaces the
archive, which then leaves it out: its messages stay in the history, and its cards were
extracted when it was archived. The head is always sent: it is the summary, which every fold
reads.

The archive is bounded too: its lines beyond ``ARCHIVE_CAP_FACTOR`` times the summary cap are
left out, oldest first (the head is kept whole), so a long outage of every model cannot grow it
without bound.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import groupby

from memory.context.tokens import TokenCounter
from memory.summary.transcript import sanitize_text

__all__ = [
    "ARCHIVE_CAP_FACTOR",
    "ARCHIVE_MAX_TRIES",
    "ARCHIVE_OMITTED",
    "extend_archive",
    "sendable_archive",
]

#: Marks where a raw archive's oldest lines were left out to respect its cap.
ARCHIVE_OMITTED = "[older archived lines omitted; every message is still in the history]"
#: A raw archive may be this many times the summary cap: it is less dense than a summary.
ARCHIVE_CAP_FACTOR = 2
#: An archived increment is sent to a model that answers in at most this many folds: the fold
#: that failed on it, then once more as the current summary of the next fold. A model that
#: failed twice on the same lines (often a refusal of what they say) would fail again.
ARCHIVE_MAX_TRIES = 2

_HEADER = "[raw archive; summariser tries: {tries}]"
_HEADER_PATTERN = re.compile(r"\[raw archive; summariser tries: (\d+)\]")

#: One archived line and in how many failed folds a model read it.
_Line = tuple[int, str]


def sendable_archive(text: str) -> str:
    """The archive as a fold sends it: the head and the lines tried fewer than the bound.

    Without the block headers and the omission marker (bookkeeping, not conversation).
    """
    head, lines = _parse(text)
    sent = [line for tries, line in lines if tries < ARCHIVE_MAX_TRIES]
    return "\n".join([head, "", *sent] if head is not None else sent).strip("\n")


def extend_archive(
    previous: str | None,
    previous_is_archive: bool,
    increment: Sequence[str],
    *,
    read: bool,
    max_tokens: int,
    counter: TokenCounter,
) -> str:
    """The archive after a fold that no model summarised: ``previous`` plus ``increment``.

    Args:
        previous: the stored summary (``None`` for none).
        previous_is_archive: ``previous`` is a raw archive (else a model summary: the head).
        increment: the fold's messages as archive lines.
        read: a model read the fold's request and failed (its reply was refused): the lines
            the request held (``sendable_archive``) count one more try, and the increment its
            first; otherwise (no model, an outage) nothing does.
        max_tokens: the summary cap (the archive may be ``ARCHIVE_CAP_FACTOR`` times it).
        counter: counts tokens for the cap.
    """
    head: str | None = None
    lines: list[_Line] = []
    if previous is not None and previous_is_archive:
        head, lines = _parse(previous)
    elif previous is not None:
        head = previous
    if read:
        lines = [(tries + (tries < ARCHIVE_MAX_TRIES), line) for tries, line in lines]
    lines += [(1 if read else 0, line) for line in increment]
    blocks = {tries for tries, _ in lines}
    fixed = [head, ""] if head is not None else []
    fixed += [ARCHIVE_OMITTED, *(_HEADER.format(tries=tries) for tries in blocks), ""]
    budget = ARCHIVE_CAP_FACTOR * max_tokens - counter.count_text("\n".join(fixed))
    kept = len(lines)
    while kept > 0:
        cost = counter.count_text(lines[kept - 1][1]) + 1  # + the line break
        if cost > budget:
            break
        budget -= cost
        kept -= 1
    # A previous summary stored before sanitizing existed may still hold what Postgres
    # refuses; the lines of the increment are sanitized already.
    return sanitize_text(_render(head, kept > 0, lines[kept:]))


def _parse(text: str) -> tuple[str | None, list[_Line]]:
    """An archive's head (``None`` for none) and its lines with their tries.

    Without any header, every line is one never tried (an archive no model read, or one
    stored before archives had headers); with headers, what comes before the first is the head.
    """
    rows = [row for row in text.split("\n") if row != ARCHIVE_OMITTED]
    first = next((n for n, row in enumerate(rows) if _HEADER_PATTERN.fullmatch(row)), None)
    if first is None:
        return None, [(0, row) for row in rows]
    head = "\n".join(rows[:first]).strip("\n") or None
    lines: list[_Line] = []
    tries = 0
    for row in rows[first:]:
        header = _HEADER_PATTERN.fullmatch(row)
        if header is not None:
            tries = int(header.group(1))
        else:
            lines.append((tries, row))
    return head, lines


def _render(head: str | None, omitted: bool, lines: Sequence[_Line]) -> str:
    """The head, the omission marker, then each block under its header.

    A first block never tried goes without a header when there is no head (the archive no
    model read, as it always looked); with a head, every block has one, so that the head can
    be told from the lines.
    """
    out = [head, ""] if head is not None else []
    if omitted:
        out.append(ARCHIVE_OMITTED)
    for position, (tries, run) in enumerate(groupby(lines, key=lambda line: line[0])):
        if tries or position or head is not None:
            out.append(_HEADER.format(tries=tries))
        out.extend(line for _, line in run)
    return "\n".join(out)

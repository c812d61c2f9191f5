"""How the commands show stored things: context reports, summaries, cards and search hits."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from rich import box
from rich.console import Group, RenderableType
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from memory.context.cut import preview
from memory.context.report import ContextReport, RecalledCard
from retrieval import ScoredCard
from storage import Card, SummaryRecord

__all__ = [
    "card_state",
    "cards_table",
    "recalled_line",
    "report_view",
    "search_table",
    "summary_view",
]

#: Characters of a card's text shown in a table cell.
TEXT_PREVIEW = 70
#: Characters of a summary shown; a raw archive can be long.
SUMMARY_SHOWN = 3_000


def report_view(report: ContextReport, which: str = "Next request") -> RenderableType:
    """What a request contains: tokens per layer against the budget, drops, cuts, recall."""
    tokens = report.tokens
    table = Table(
        title=f"{which}: {tokens.total:,} tokens of a {report.budget:,}-token budget",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    table.add_column("layer")
    table.add_column("tokens", justify="right")
    table.add_column("what")
    summary = report.summary
    summary_note = (
        f"{summary.kind}, covers {summary.covered:,} message(s)"
        + (", degraded" if summary.degraded else "")
        + (", shortened" if summary.shortened else "")
        if summary
        else "none"
    )
    recall = report.recall
    if recall is None:
        memory_note = "long-term memory off"
    elif recall.failed:
        memory_note = "recall failed: sent without memories"
    else:
        pins = sum(card.pinned for card in recall.cards)
        memory_note = f"{pins} pin(s), {len(recall.cards) - pins} recalled card(s)"
    rows = (
        ("system", tokens.system, "the system message"),
        ("memories", tokens.memories, memory_note),
        ("summary", tokens.summary, summary_note),
        ("window", tokens.window, "recent messages before the current turn"),
        ("input", tokens.input, "the current turn"),
    )
    for layer, count, note in rows:
        table.add_row(layer, f"{count:,}", escape(note))
    parts: list[RenderableType] = [table]
    if recall is not None and recall.cards:
        query = f" for {recall.query!r}" if recall.query else ""
        parts.append(Text(f"recalled{query}:"))
        for card in recall.cards:
            parts.append(Text(f"  {recalled_line(card)}"))
    for drop in report.dropped:
        parts.append(
            Text(f"dropped ({drop.layer}): {drop.detail}, {drop.tokens:,} tokens: {drop.reason}")
        )
    for cut in report.cut_tool_results:
        parts.append(
            Text(
                f"cut: tool result {cut.tool_call_id} (seq {cut.index}) "
                f"{cut.tokens_before:,} -> {cut.tokens_after:,} tokens"
            )
        )
    if not report.dropped:
        parts.append(Text("nothing dropped"))
    return Group(*parts)


def recalled_line(card: RecalledCard) -> str:
    """One recalled memory: its card(s), score, tokens and why it was chosen."""
    ids = ", ".join(f"#{i}" for i in card.cards) if len(card.cards) > 1 else f"#{card.card_id}"
    if card.pinned:
        return f"{ids} {card.type} (pin)"
    tokens = f", {card.tokens} tokens" if card.tokens is not None else ""
    why = f": {card.reason}" if card.reason else ""
    return f"{ids} {card.type} score {card.score:.2f}{tokens}{why}"


def summary_view(summary: SummaryRecord | None) -> RenderableType:
    """The stored rolling summary: its kind, boundary and text."""
    if summary is None:
        return Text("No summary yet: every message is still in the window.")
    title = (
        f"Summary ({summary.kind}): messages up to seq {summary.boundary_seq} folded in, "
        f"{summary.covered:,} covered, version {summary.version}, "
        f"updated {_when(summary.updated_at)}"
    )
    content = summary.content
    if len(content) > SUMMARY_SHOWN:
        hidden = len(content) - SUMMARY_SHOWN
        content = f"{content[:SUMMARY_SHOWN]}… ({hidden:,} more characters)"
    return Panel(Text(content), title=escape(title), title_align="left")


def card_state(card: Card) -> str:
    """``pinned``, ``superseded by #N (since ...)``, ``ended ...`` or ``current``."""
    if card.superseded_by is not None:
        since = f" since {_when(card.valid_to)}" if card.valid_to else ""
        return f"superseded by #{card.superseded_by}{since}"
    if card.valid_to is not None:
        return f"ended {_when(card.valid_to)}"
    return "pinned" if card.pinned else "current"


def cards_table(cards: Sequence[Card], title: str) -> Table:
    """Cards with their type, date, state and text."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    for name in ("#", "type", "date", "state", "text"):
        table.add_column(name, justify="right" if name == "#" else "left")
    for card in cards:
        table.add_row(
            str(card.id),
            card.type,
            _when(card.occurred_at or card.observed_at),
            escape(card_state(card)),
            escape(preview(card.text, TEXT_PREVIEW)),
        )
    return table


def search_table(hits: Sequence[ScoredCard], query: str) -> Table:
    """Search hits, best first, with their fused score."""
    table = Table(title=f"Cards matching {query!r}", title_justify="left", box=box.SIMPLE_HEAD)
    for name in ("#", "score", "type", "date", "text"):
        table.add_column(name, justify="right" if name in ("#", "score") else "left")
    for hit in hits:
        card = hit.card
        table.add_row(
            str(card.id),
            f"{hit.score:.3f}",
            card.type,
            _when(card.occurred_at or card.observed_at),
            escape(preview(card.text, TEXT_PREVIEW)),
        )
    return table


def _when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M") if moment is not None else "-"

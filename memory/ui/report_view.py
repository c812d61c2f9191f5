"""One kept report of ``prepare`` as the session page shows it: tokens per layer, what the cap
dropped or cut and why, what long-term memory recalled and with which scores."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from memory.ui.charts import LAYERS, layer_bar
from memory.ui.html import Html, Part, el, url
from memory.ui.layout import moment
from storage.reports import KeptReport

__all__ = ["recalled_ids", "report_block"]

#: Characters of a recalled card's text shown beside it.
_PREVIEW = 160


def recalled_ids(reports: Sequence[KeptReport]) -> list[int]:
    """The ids of the cards the reports recalled (to read their texts in one query)."""
    return sorted(
        {
            int(card["card_id"])
            for kept in reports
            for card in (kept.report.get("recall") or {}).get("cards") or []
            if isinstance(card, dict) and isinstance(card.get("card_id"), int)
        }
    )


def report_block(kept: KeptReport, user_id: str, session_id: str, texts: Mapping[int, str]) -> Html:
    """A kept report: its layers, drops, cuts, recall (``texts``: recalled cards' texts by
    id; a card forgotten since is named by id), summary state."""
    data = kept.report
    tokens = {layer: getattr(kept, layer) for layer in LAYERS}
    at = url(
        "/session",
        {"user": user_id, "session": session_id, "at": kept.newest_seq},
    )
    heading = el(
        "h3",
        f"Request {kept.id:,} · {moment(kept.prepared_at)} · assembled through ",
        el("a", f"message {kept.newest_seq:,}", href=f"{at}#m{kept.newest_seq}"),
        f" · {kept.total:,} of {kept.budget:,} tokens",
    )
    return el(
        "section",
        heading,
        layer_bar(tokens, kept.budget),
        _layer_table(kept),
        _summary_state(data.get("summary")),
        _dropped(data.get("dropped") or []),
        _cuts(data.get("cut_tool_results") or []),
        _recall(data.get("recall"), user_id, texts),
        _extras(data),
        class_="report",
        id=f"r{kept.id}",
        data_report=kept.id,
    )


def _layer_table(kept: KeptReport) -> Html:
    cells = [el("td", f"{getattr(kept, layer):,}", class_="num") for layer in LAYERS]
    return el(
        "table",
        el(
            "tr",
            [el("th", layer, class_="num", data_layer=layer) for layer in LAYERS],
            el("th", "total", class_="num"),
            el("th", "budget", class_="num"),
        ),
        el(
            "tr",
            cells,
            el("td", f"{kept.total:,}", class_="num"),
            el("td", f"{kept.budget:,}", class_="num"),
        ),
        class_="layers",
    )


def _summary_state(summary: Mapping[str, Any] | None) -> Html:
    if not summary:
        return el("p", "No summary was sent.", class_="muted")
    flags = [
        flag
        for flag, on in (
            ("degraded", summary.get("degraded")),
            ("shortened", summary.get("shortened")),
        )
        if on
    ]
    return el(
        "p",
        f"Summary sent: {summary.get('kind')}, covering {summary.get('covered', 0):,} "
        "message(s)" + (f" ({', '.join(flags)})" if flags else "") + ".",
    )


def _dropped(dropped: Sequence[Mapping[str, Any]]) -> Html:
    if not dropped:
        return el("p", "The hard cap dropped nothing.", class_="muted")
    rows = [
        el(
            "tr",
            el("td", str(drop.get("layer", ""))),
            el("td", str(drop.get("detail", ""))),
            el("td", f"{int(drop.get('tokens', 0)):,}", class_="num"),
            el("td", str(drop.get("reason", ""))),
            class_="drop",
        )
        for drop in dropped
    ]
    return el(
        "details",
        el("summary", f"Dropped or shortened: {len(dropped)} part(s), in the cap's order"),
        el(
            "table",
            el(
                "tr",
                el("th", "layer"),
                el("th", "what"),
                el("th", "tokens", class_="num"),
                el("th", "why"),
            ),
            rows,
        ),
        open=len(dropped) <= 5,
    )


def _cuts(cuts: Sequence[Mapping[str, Any]]) -> Part:
    if not cuts:
        return None
    rows = [
        el(
            "tr",
            el("td", str(cut.get("layer", ""))),
            el("td", f"message {cut.get('index')}"),
            el("td", str(cut.get("tool_call_id", ""))),
            el(
                "td",
                f"{int(cut.get('tokens_before', 0)):,} → {int(cut.get('tokens_after', 0)):,}",
                class_="num",
            ),
        )
        for cut in cuts
    ]
    return el(
        "details",
        el("summary", f"Tool results cut inside their unit: {len(cuts)}"),
        el(
            "table",
            el(
                "tr",
                el("th", "layer"),
                el("th", "result"),
                el("th", "call"),
                el("th", "tokens", class_="num"),
            ),
            rows,
        ),
    )


def _recall(recall: Mapping[str, Any] | None, user_id: str, texts: Mapping[int, str]) -> Html:
    if recall is None:
        return el("p", "Long-term memory was off for this request.", class_="muted")
    if recall.get("failed"):
        return el("p", "Recall failed; the request went on without memories.", class_="error")
    cards = recall.get("cards") or []
    query = recall.get("query")
    searched: Part = (
        el("p", "Searched as ", el("q", str(query)), f" ({recall.get('method')}).")
        if query
        else el("p", "Nothing was searched (no user message, or k is 0).", class_="muted")
    )
    if not cards:
        return el("div", searched, el("p", "No memory was recalled.", class_="muted"))
    rows = [
        el(
            "tr",
            el(
                "td",
                el(
                    "a",
                    f"card {card.get('card_id')}",
                    href=url("/card", {"user": user_id, "card": card.get("card_id")}),
                ),
            ),
            el(
                "td",
                "pin" if card.get("pinned") else f"{float(card.get('score', 0)):.3f}",
                class_="num",
            ),
            el("td", str(card.get("type", ""))),
            el("td", _preview(texts.get(card.get("card_id", -1))), class_="content"),
            class_="recalled",
        )
        for card in cards
    ]
    return el(
        "div",
        searched,
        el(
            "table",
            el(
                "tr",
                el("th", "recalled"),
                el("th", "score", class_="num"),
                el("th", "type"),
                el("th", "text"),
            ),
            rows,
        ),
    )


def _preview(card_text: str | None) -> str:
    if card_text is None:
        return "(forgotten since)"
    flat = " ".join(card_text.split())
    return flat if len(flat) <= _PREVIEW else flat[: _PREVIEW - 1] + "…"


def _extras(data: Mapping[str, Any]) -> Part:
    notes: list[str] = []
    archived = int(data.get("archived") or 0)
    if archived:
        notes.append(f"{archived:,} message(s) were archived raw into the summary first.")
    for call in data.get("interrupted_calls") or []:
        notes.append(
            f"Tool call {call.get('name')} (message {call.get('call_seq')}) was closed as "
            f"interrupted (result message {call.get('result_seq')})."
        )
    return el("ul", [el("li", note) for note in notes]) if notes else None

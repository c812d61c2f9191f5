"""A session: its requests (tokens per layer over time, the latest reports first) and its
messages in order, a page at a time, with the summary's boundary among them."""

# ruff: noqa: RUF001 (typographic dashes and quotes are the page's text)

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from starlette.responses import Response

from memory.ui.charts import LAYERS, legend, request_chart
from memory.ui.html import Html, Part, el, url
from memory.ui.layout import moment, page, pager
from memory.ui.report_view import recalled_ids, report_block
from memory.ui.visits import Inspector, PageError, Visit
from storage import StoredMessage
from storage.overview import SessionOverview

__all__ = ["CHART_REQUESTS", "MESSAGES_PER_PAGE", "REPORTS_PER_PAGE", "session_page"]

#: Messages on one page of a session.
MESSAGES_PER_PAGE = 100
#: Kept reports shown in full on one page, newest first.
REPORTS_PER_PAGE = 5
#: Requests in the chart of a session, the newest.
CHART_REQUESTS = 200
#: Characters of a message shown before the rest is folded away.
_SHOWN_CHARS = 2_000


def session_page(inspector: Inspector, visit: Visit) -> Response:
    """The session page: numbers, the chart of its requests, its reports, its messages."""
    user_id, session_id = visit.required("user"), visit.required("session")
    session = inspector.overview.session(user_id, session_id)
    if session is None:
        raise PageError(404, f"user {user_id!r} has no session {session_id!r}")
    pages = max(1, -(-session.messages // MESSAGES_PER_PAGE))
    at = visit.whole("at", 0, minimum=0)
    default_page = -(-at // MESSAGES_PER_PAGE) if at else pages
    number = min(visit.whole("page", default_page), pages)
    first = (number - 1) * MESSAGES_PER_PAGE
    messages = inspector.messages.between(user_id, session_id, first, first + MESSAGES_PER_PAGE)
    before = visit.whole("reports_before", 0, minimum=0) or None
    reports = inspector.reports.latest(user_id, session_id, limit=REPORTS_PER_PAGE, before=before)
    chart_rows = inspector.reports.tokens(user_id, session_id, limit=CHART_REQUESTS)
    texts = inspector.overview.card_texts(user_id, recalled_ids(reports))
    where = {"user": user_id, "session": session_id}
    body = [
        _numbers(session),
        el("h2", "Requests: tokens per layer"),
        _chart(chart_rows),
        el("h2", "Requests, the latest first"),
        [report_block(kept, user_id, session_id, texts) for kept in reports]
        if reports
        else el(
            "p",
            "No kept report"
            + (" older than these." if before else " for this session.")
            + " Each prepare keeps its report (setting reports.enabled).",
            class_="muted",
        ),
        el(
            "p",
            el(
                "a",
                "older requests ›",
                href=url("/session", where | {"reports_before": reports[-1].id}) + "#requests-end",
            ),
            id="requests-end",
        )
        if len(reports) == REPORTS_PER_PAGE
        else None,
        el("h2", f"Messages {first + 1:,}–{first + len(messages):,} of {session.messages:,}"),
        pager("/session", where, number, pages),
        _messages_table(messages, session),
        pager("/session", where, number, pages),
    ]
    return page(
        f"Session {session_id}",
        body,
        visit.visitor,
        crumbs=[("users", "/"), (user_id, url("/user", {"user": user_id})), (session_id, None)],
    )


def _numbers(session: SessionOverview) -> Html:
    where = {"user": session.user_id, "session": session.session_id}
    summary: Part = "no summary yet"
    if session.summary_version:
        summary = el(
            "a",
            f"summary version {session.summary_version} ({session.summary_kind}) covers "
            f"messages 1–{session.summary_boundary:,}",
            href=url("/summary", where),
        )
    return el(
        "p",
        f"{session.messages:,} messages · started {moment(session.created_at)} · last "
        f"activity {moment(session.last_active_at)} · ",
        summary,
        " · ",
        el("a", "long-term memory of the user", href=url("/memory", {"user": session.user_id})),
        id="numbers",
    )


def _chart(rows: Sequence[Any]) -> Html:
    if not rows:
        return el("p", "No request of this session was kept yet.", class_="muted")
    data = [
        {**{layer: getattr(row, layer) for layer in LAYERS}, "budget": row.budget, "id": row.id}
        for row in rows
    ]
    caption = (
        f"tokens per layer of the last {len(rows):,} kept request(s), oldest on the left; "
        "the dashed line is the budget"
    )
    return el(
        "figure",
        request_chart(data, caption=caption),
        legend(),
        el("figcaption", caption, class_="muted"),
        id="chart",
    )


def _messages_table(messages: Sequence[StoredMessage], session: SessionOverview) -> Html:
    boundary = session.summary_boundary
    rows: list[Html] = []
    for stored in messages:
        covered = stored.seq <= boundary
        rows.append(
            el(
                "tr",
                el("td", f"{stored.seq:,}", class_="num"),
                el("td", stored.role),
                el("td", stored.client_id or "-"),
                el("td", moment(stored.created_at)),
                el("td", f"{stored.tokens:,}", class_="num"),
                el("td", _content(stored)),
                id=f"m{stored.seq}",
                class_="message summarised" if covered else "message",
                data_seq=stored.seq,
            )
        )
        if stored.seq == boundary:
            rows.append(
                el(
                    "tr",
                    el(
                        "td",
                        f"▲ summary boundary: the summary (version {session.summary_version}, "
                        f"{session.summary_kind}) covers messages 1–{boundary:,}; the ones "
                        "below are sent as they are, while they fit",
                        colspan=6,
                    ),
                    class_="boundary",
                    id="boundary",
                )
            )
    if not rows:
        return el("p", "No message on this page.", class_="muted")
    return el(
        "table",
        el(
            "tr",
            el("th", "seq", class_="num"),
            el("th", "role"),
            el("th", "client id"),
            el("th", "said at"),
            el("th", "tokens", class_="num"),
            el("th", "content"),
        ),
        rows,
        id="messages",
    )


def _content(stored: StoredMessage) -> Html:
    """A message's words as text (never markup), its calls, and its data on demand."""
    payload = stored.payload
    shown = _words(payload)
    folded: Part = None
    if len(shown) > _SHOWN_CHARS:
        folded = f"… ({len(shown) - _SHOWN_CHARS:,} more characters: see the payload)"
        shown = shown[:_SHOWN_CHARS]
    calls = [
        el("div", f"calls {_call(call)}", class_="muted")
        for call in payload.get("tool_calls") or []
        if isinstance(call, dict)
    ]
    answers = payload.get("tool_call_id")
    return el(
        "div",
        el("div", f"result of {answers}", class_="muted") if answers else None,
        el("pre", shown, class_="content") if shown else None,
        folded,
        calls,
        el(
            "details",
            el("summary", "metadata"),
            el("pre", json.dumps(stored.metadata, ensure_ascii=False, indent=1), class_="data"),
            class_="metadata",
        )
        if stored.metadata
        else None,
        el(
            "details",
            el("summary", "payload"),
            el("pre", json.dumps(payload, ensure_ascii=False, indent=1), class_="data"),
        ),
    )


def _words(payload: dict[str, Any]) -> str:
    content = payload.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        words = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                words.append(str(part.get("text", "")))
            elif isinstance(part, dict):
                words.append(f"[{part.get('type', 'part')}]")
        return "\n".join(words)
    return ""


def _call(call: dict[str, Any]) -> str:
    """A tool call as ``name(arguments)``, its arguments cut to 200 characters."""
    function = call.get("function")
    if not isinstance(function, dict):
        return "?()"
    arguments = str(function.get("arguments", ""))
    if len(arguments) > 200:
        arguments = arguments[:199] + "…"
    return f"{function.get('name')}({arguments})"

"""The shell every page shares (head, top bar, breadcrumbs), and the small pieces pages repeat."""

# ruff: noqa: RUF001 (typographic dashes and quotes are the page's text)

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from starlette.responses import HTMLResponse

from memory.ui.html import Html, Part, el, join, text, url, void

__all__ = [
    "Crumb",
    "Visitor",
    "csrf_field",
    "moment",
    "number",
    "page",
    "pager",
]


@dataclass(frozen=True, slots=True)
class Visitor:
    """Who looks at the page.

    Attributes:
        signed_in: whether they came in with an admin key (``False`` with ``--no-auth``).
        csrf: the token their forms carry (``memory.ui.gate``).
    """

    signed_in: bool
    csrf: str


Crumb = tuple[str, str | None]


def page(
    title: str,
    body: Part,
    visitor: Visitor | None,
    *,
    crumbs: Sequence[Crumb] = (),
    status: int = 200,
) -> HTMLResponse:
    """A whole page: ``title`` in the head and as its heading, ``body`` below it."""
    trail = [el("a", name, href=link) if link is not None else text(name) for name, link in crumbs]
    separated: list[Part] = []
    for position, crumb in enumerate(trail):
        separated += [" › " if position else "", crumb]
    document = join(
        Html("<!doctype html>"),
        el(
            "html",
            el(
                "head",
                void("meta", charset="utf-8"),
                void("meta", name="viewport", content="width=device-width, initial-scale=1"),
                el("title", f"{title} · stratamem"),
                void("link", rel="stylesheet", href="/ui.css"),
                # No icon to fetch (the browser would ask for /favicon.ico).
                void("link", rel="icon", href="data:,"),
            ),
            el(
                "body",
                _top(visitor),
                el(
                    "main",
                    el("div", separated, class_="crumbs") if trail else None,
                    el("h1", title),
                    body,
                ),
            ),
            lang="en",
        ),
    )
    return HTMLResponse(document, status_code=status)


def _top(visitor: Visitor | None) -> Html:
    search = el(
        "form",
        void("input", type="search", name="q", placeholder="user or session id", aria_label="id"),
        el("button", "Find", type="submit"),
        action="/",
        method="get",
    )
    logout = None
    if visitor is not None and visitor.signed_in:
        logout = el(
            "form",
            csrf_field(visitor),
            el("button", "Log out", type="submit"),
            action="/logout",
            method="post",
        )
    return el(
        "header",
        el("a", "stratamem", href="/", class_="brand"),
        el("span", "what the model saw and what it remembers", class_="muted"),
        search if visitor is not None else None,
        logout,
        class_="top",
    )


def csrf_field(visitor: Visitor) -> Html:
    """The hidden field every form that changes something carries."""
    return void("input", type="hidden", name="csrf", value=visitor.csrf)


def moment(when: datetime | str | None) -> str:
    """A time as the page shows it: ``2026-12-01 14:03:22 UTC`` (``-`` for none)."""
    if when is None:
        return "-"
    if isinstance(when, str):
        try:
            parsed = datetime.fromisoformat(when)
        except ValueError:
            return when
        return moment(parsed)
    if when.tzinfo is None:
        return when.strftime("%Y-%m-%d %H:%M:%S")
    return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def number(value: int | float) -> str:
    """A count with thousands separators."""
    return f"{value:,}"


def pager(path: str, query: Mapping[str, object | None], page_number: int, pages: int) -> Html:
    """First / previous / next / last links for page ``page_number`` of ``pages``."""
    if pages <= 1:
        return Html("")

    def link(label: str, target: int) -> Html:
        if target < 1 or target > pages or target == page_number:
            return el("span", label, class_="muted")
        return el("a", label, href=url(path, {**query, "page": target}))

    return el(
        "div",
        link("« first", 1),
        link("‹ previous", page_number - 1),
        el("span", f"page {page_number:,} of {pages:,}"),
        link("next ›", page_number + 1),
        link("last »", pages),
        class_="pager",
    )

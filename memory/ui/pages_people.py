"""The first pages: users and sessions found by id, and one user's sessions and pins."""

from __future__ import annotations

from collections.abc import Sequence

from starlette.responses import Response

from memory.ui.html import Html, el, url, void
from memory.ui.layout import moment, page
from memory.ui.visits import Inspector, Visit
from storage import Card
from storage.overview import SessionOverview

__all__ = ["home_page", "user_page"]

#: Users and sessions a search lists, at most.
_LISTED = 50


def home_page(inspector: Inspector, visit: Visit) -> Response:
    """Users (and sessions) whose id contains the search, most recently active first."""
    search = (visit.text("q") or "").strip()
    users = inspector.overview.users(search, limit=_LISTED)
    sessions = inspector.overview.sessions_named(search, limit=_LISTED)
    form = el(
        "form",
        el(
            "label",
            "user or session id contains",
            void("input", type="search", name="q", value=search, autofocus=True),
        ),
        el("button", "Find", type="submit"),
        class_="search",
        action="/",
        method="get",
    )
    user_rows = [
        el(
            "tr",
            el("td", el("a", user.user_id, href=url("/user", {"user": user.user_id}))),
            el("td", f"{user.sessions:,}", class_="num"),
            el("td", f"{user.messages:,}", class_="num"),
            el("td", moment(user.last_active_at)),
            el("td", f"{user.pins:,}", class_="num"),
            el("td", el("a", "memory", href=url("/memory", {"user": user.user_id}))),
            class_="user",
        )
        for user in users
    ]
    title = f"Users whose id contains “{search}”" if search else "Users, most recently active first"
    body = [
        form,
        el("h2", title),
        el(
            "table",
            el(
                "tr",
                el("th", "user"),
                el("th", "sessions", class_="num"),
                el("th", "messages", class_="num"),
                el("th", "last activity"),
                el("th", "pins", class_="num"),
                el("th", "long-term memory"),
            ),
            user_rows,
            id="users",
        )
        if users
        else el("p", "No user found.", class_="muted"),
        _found_sessions(search, sessions),
    ]
    return page("Users and sessions", body, visit.visitor)


def _found_sessions(search: str, sessions: Sequence[SessionOverview]) -> Html | None:
    if not search:
        return None
    if not sessions:
        return el("p", f"No session id contains “{search}”.", class_="muted")
    return el("div", el("h2", f"Sessions whose id contains “{search}”"), sessions_table(sessions))


def sessions_table(sessions: Sequence[SessionOverview], *, with_user: bool = True) -> Html:
    """Sessions with their message count, activity and summary version."""
    rows = [
        el(
            "tr",
            el("td", session.user_id) if with_user else None,
            el(
                "td",
                el(
                    "a",
                    session.session_id,
                    href=url("/session", {"user": session.user_id, "session": session.session_id}),
                ),
            ),
            el("td", f"{session.messages:,}", class_="num"),
            el("td", moment(session.last_active_at)),
            el("td", moment(session.created_at)),
            el(
                "td",
                el(
                    "a",
                    f"v{session.summary_version} ({session.summary_kind}), "
                    f"through {session.summary_boundary:,}",
                    href=url("/summary", {"user": session.user_id, "session": session.session_id}),
                )
                if session.summary_version
                else "none",
            ),
            class_="session",
        )
        for session in sessions
    ]
    return el(
        "table",
        el(
            "tr",
            el("th", "user") if with_user else None,
            el("th", "session"),
            el("th", "messages", class_="num"),
            el("th", "last activity"),
            el("th", "started"),
            el("th", "summary"),
        ),
        rows,
        id="sessions",
    )


def user_page(inspector: Inspector, visit: Visit) -> Response:
    """One user: their sessions, their pins, and the ways to their memory or to forget them."""
    user_id = visit.required("user")
    sessions = inspector.overview.sessions(user_id)
    pins = inspector.memory.pins(user_id=user_id) if inspector.memory.settings.cards.enabled else []
    body = [
        el(
            "p",
            el(
                "a",
                "Long-term memory (cards, supersede chains, search)",
                href=url("/memory", {"user": user_id}),
            ),
            " · ",
            el(
                "a",
                "Forget this user…",
                href=url("/confirm", {"action": "forget_user", "user": user_id}),
            ),
        ),
        el("h2", f"Sessions ({len(sessions):,})"),
        sessions_table(sessions, with_user=False)
        if sessions
        else el("p", "This user has no session.", class_="muted"),
        el("h2", f"Pins ({len(pins):,}): always in the prompt, first among memories"),
        pins_list(pins, user_id),
    ]
    return page(f"User {user_id}", body, visit.visitor, crumbs=[("users", "/"), (user_id, None)])


def pins_list(pins: Sequence[Card], user_id: str) -> Html:
    """The user's pins, each with its way to be unpinned."""
    if not pins:
        return el("p", "No pins.", class_="muted")
    return el(
        "ul",
        [
            el(
                "li",
                el("span", "pin", class_="badge pin"),
                el("a", f"card {pin.id}", href=url("/card", {"user": user_id, "card": pin.id})),
                ": ",
                el("span", pin.text, class_="content"),
                " ",
                el(
                    "a",
                    "unpin…",
                    href=url("/confirm", {"action": "unpin", "user": user_id, "card": pin.id}),
                ),
                class_="pin",
            )
            for pin in pins
        ],
        id="pins",
    )

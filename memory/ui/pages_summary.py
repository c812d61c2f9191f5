"""A session's summary: the current version and the kept ones it replaced, with what each
covered (its boundary, and the messages its fold added)."""

# ruff: noqa: RUF001 (typographic dashes and quotes are the page's text)

from __future__ import annotations

from collections.abc import Sequence

from starlette.responses import Response

from memory.ui.html import Html, el, url
from memory.ui.layout import moment, page
from memory.ui.visits import Inspector, Visit
from storage import SummaryRecord
from storage.summaries import SummaryVersion

__all__ = ["summary_page"]


def summary_page(inspector: Inspector, visit: Visit) -> Response:
    """Every kept version of the session's summary, newest first."""
    user_id, session_id = visit.required("user"), visit.required("session")
    current = inspector.summaries.get(user_id, session_id)
    previous = inspector.summaries.versions(user_id, session_id)
    versions: list[SummaryRecord] = [*([current] if current else []), *previous]
    body: list[Html] = []
    if not versions:
        body.append(el("p", "This session has no summary yet.", class_="muted"))
    for position, version in enumerate(versions):
        older = versions[position + 1] if position + 1 < len(versions) else None
        body.append(_version(version, older, user_id, session_id, current=position == 0))
    if previous and previous[-1].version > 1:
        body.append(
            el(
                "p",
                f"Versions 1–{previous[-1].version - 1} are no longer kept (the newest "
                "previous versions are).",
                class_="muted",
            )
        )
    return page(
        f"Summary of {session_id}",
        body,
        visit.visitor,
        crumbs=[
            ("users", "/"),
            (user_id, url("/user", {"user": user_id})),
            (session_id, url("/session", {"user": user_id, "session": session_id})),
            ("summary", None),
        ],
    )


def _version(
    version: SummaryRecord,
    older: SummaryRecord | None,
    user_id: str,
    session_id: str,
    *,
    current: bool,
) -> Html:
    at = url("/session", {"user": user_id, "session": session_id, "at": version.boundary_seq})
    start = older.boundary_seq + 1 if older is not None else 1
    folded = (
        f"this version folded messages {start:,}–{version.boundary_seq:,} into "
        + (f"version {older.version}" if older is not None else "the first summary")
        if start <= version.boundary_seq
        else "this version covers no message the previous one did not"
    )
    if older is None and version.version > 1:
        folded = f"the version before it ({version.version - 1}) is no longer kept"
    when: Sequence[str] = [f"stored {moment(version.updated_at)}"]
    if isinstance(version, SummaryVersion):
        when = [*when, f"replaced {moment(version.replaced_at)}"]
    return el(
        "section",
        el(
            "h2",
            f"Version {version.version}" + (" (current)" if current else ""),
            f" · {version.kind}",
        ),
        el(
            "p",
            "Covers ",
            el("a", f"messages 1–{version.boundary_seq:,}", href=f"{at}#m{version.boundary_seq}"),
            f" ({version.covered:,} message(s) in all); {folded}. " + "; ".join(when) + ".",
        ),
        el("pre", version.content, class_="content"),
        class_="report",
        id=f"v{version.version}",
        data_version=version.version,
    )

"""A user's long-term memory: cards by type, supersede chains, pins, and ``Memory.search``."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from starlette.responses import Response

from memory.cards.supersede import ChainLink, chain_problems
from memory.ui.cards_view import card_block, chain_row, chains, source_ids
from memory.ui.html import Html, Part, el, url, void
from memory.ui.layout import page, pager
from memory.ui.pages_people import pins_list
from memory.ui.visits import Inspector, PageError, Visit
from retrieval import ScoredCard
from storage import Card, CardType
from storage.overview import MessagePlace

__all__ = ["CARDS_PER_PAGE", "card_page", "memory_page"]

#: Cards on one page of a type.
CARDS_PER_PAGE = 50
_TYPES: tuple[CardType, ...] = ("fact", "preference", "task", "event", "profile", "turn")


def memory_page(inspector: Inspector, visit: Visit) -> Response:
    """Search, pins, supersede chains, then the cards of one type (or all), newest first."""
    user_id = visit.required("user")
    card_type = visit.text("type")
    if card_type is not None and card_type not in _TYPES:
        raise PageError(400, f"no card type {card_type!r} (one of {', '.join(_TYPES)})")
    counts = inspector.overview.card_counts(user_id)
    total = sum(count.cards for count in counts if card_type in (None, count.type))
    pages = max(1, -(-total // CARDS_PER_PAGE))
    number = min(visit.whole("page", 1), pages)
    cards = inspector.overview.cards(
        user_id,
        card_type=card_type,
        limit=CARDS_PER_PAGE,
        offset=(number - 1) * CARDS_PER_PAGE,
    )
    chained = inspector.overview.chained_cards(user_id)
    hits, problem = _search(inspector, visit, user_id)
    shown = [*cards, *chained, *(hit.card for hit in hits)]
    places = inspector.overview.message_places(user_id, source_ids(shown))
    replaced = _replaced(chained)
    tabs = [
        el(
            "a",
            f"all ({sum(count.cards for count in counts):,})",
            href=url("/memory", {"user": user_id}),
            class_="on" if card_type is None else None,
        ),
        *[
            el(
                "a",
                f"{count.type} ({count.cards:,}: {count.current:,} current, "
                f"{count.pinned:,} pinned)",
                href=url("/memory", {"user": user_id, "type": count.type}),
                class_="on" if card_type == count.type else None,
            )
            for count in counts
        ],
    ]
    body: list[Part] = [
        _search_form(visit, user_id),
        el("div", problem, class_="error") if problem else None,
        _hits(hits, places, replaced) if visit.text("q") and not problem else None,
        el("h2", "Pins: always in the prompt, first among memories"),
        pins_list(inspector.memory.pins(user_id=user_id), user_id)
        if inspector.memory.settings.cards.enabled
        else el("p", "Long-term memory is off in this page's settings.", class_="muted"),
        el("h2", "Supersede chains: what replaced what, when"),
        _chains(chained),
        el("h2", "Cards, newest first"),
        el("nav", tabs, class_="tabs"),
        pager("/memory", {"user": user_id, "type": card_type}, number, pages),
        el(
            "div",
            [card_block(card, places, replaced.get(card.id, ())) for card in cards],
            class_="cards",
            id="cards",
        )
        if cards
        else el("p", "No card.", class_="muted"),
        pager("/memory", {"user": user_id, "type": card_type}, number, pages),
    ]
    return page(
        f"Long-term memory of {user_id}",
        body,
        visit.visitor,
        crumbs=[("users", "/"), (user_id, url("/user", {"user": user_id})), ("memory", None)],
    )


def card_page(inspector: Inspector, visit: Visit) -> Response:
    """One card and its whole supersede chain."""
    user_id = visit.required("user")
    card_id = visit.whole("card", 0)
    chain = inspector.overview.chain_of(user_id, card_id)
    card = next((linked for linked in chain if linked.id == card_id), None)
    if card is None:
        raise PageError(404, f"user {user_id!r} has no card {card_id}")
    places = inspector.overview.message_places(user_id, source_ids(chain))
    replaced = _replaced(chain)
    walked = chains(chain)
    body = [
        el("div", card_block(card, places, replaced.get(card.id, ())), class_="cards"),
        el("h2", "Its supersede chain"),
        [chain_row(links) for links in walked]
        if walked
        else el("p", "This card replaced none and was replaced by none.", class_="muted"),
    ]
    return page(
        f"Card {card_id}",
        body,
        visit.visitor,
        crumbs=[
            ("users", "/"),
            (user_id, url("/user", {"user": user_id})),
            ("memory", url("/memory", {"user": user_id})),
            (f"card {card_id}", None),
        ],
    )


def _replaced(cards: Sequence[Card]) -> dict[int, list[int]]:
    """For each card, the ids of the cards it replaced."""
    replaced: dict[int, list[int]] = defaultdict(list)
    for card in cards:
        if card.superseded_by is not None:
            replaced[card.superseded_by].append(card.id)
    return replaced


def _chains(chained: Sequence[Card]) -> Html:
    if not chained:
        return el("p", "No card was superseded yet.", class_="muted")
    problems = chain_problems(
        ChainLink(card.id, card.subject, card.attribute, card.superseded_by, card.pinned)
        for card in chained
    )
    warning: Part = None
    if problems:
        warning = el(
            "div",
            f"Chain problems: {len(problems.cycles)} cycle(s), "
            f"{len(problems.without_current)} fact(s) without a current card, "
            f"{len(problems.several_current)} with several.",
            class_="error",
        )
    return el("div", warning, [chain_row(chain) for chain in chains(chained)], id="chains")


def _search_form(visit: Visit, user_id: str) -> Html:
    chosen = set(visit.all("types"))
    return el(
        "form",
        void("input", type="hidden", name="user", value=user_id),
        el("label", "search", void("input", type="search", name="q", value=visit.text("q") or "")),
        el(
            "label",
            "k",
            void("input", type="number", name="k", min=0, max=100, value=visit.text("k") or "10"),
        ),
        el(
            "fieldset",
            el("legend", "types"),
            [
                el(
                    "label",
                    void(
                        "input", type="checkbox", name="types", value=name, checked=name in chosen
                    ),
                    name,
                    class_="check",
                )
                for name in _TYPES
            ],
        ),
        el("label", "session", void("input", name="session", value=visit.text("session") or "")),
        el("label", "topic", void("input", name="topic", value=visit.text("topic") or "")),
        el("label", "tags (comma)", void("input", name="tags", value=visit.text("tags") or "")),
        el(
            "label",
            "since",
            void("input", type="date", name="since", value=visit.text("since") or ""),
        ),
        el(
            "label",
            "until",
            void("input", type="date", name="until", value=visit.text("until") or ""),
        ),
        el(
            "label",
            "min score",
            void("input", name="min_score", size=5, value=visit.text("min_score") or ""),
        ),
        el(
            "label",
            void(
                "input",
                type="checkbox",
                name="superseded",
                value="1",
                checked=bool(visit.text("superseded")),
            ),
            "superseded too",
            class_="check",
        ),
        el("button", "Search", type="submit"),
        class_="search",
        action="/memory",
        method="get",
        id="search",
    )


def _search(
    inspector: Inspector, visit: Visit, user_id: str
) -> tuple[list[ScoredCard], str | None]:
    """Run ``Memory.search`` with the form's filters: the hits, or what is wrong with them."""
    query = visit.text("q")
    if query is None:
        return [], None
    try:
        k = visit.whole("k", 10, minimum=0)
        min_score = visit.text("min_score")
        tags = [tag.strip() for tag in (visit.text("tags") or "").split(",") if tag.strip()]
        hits = inspector.memory.search(
            user_id=user_id,
            query=query,
            k=k,
            types=visit.all("types") or None,  # type: ignore[arg-type]  # checked by search
            session_id=visit.text("session"),
            topic=visit.text("topic"),
            tags=tags or None,
            since=_day(visit.text("since")),
            until=_day(visit.text("until")),
            min_score=float(min_score) if min_score is not None else None,
            include_superseded=bool(visit.text("superseded")),
        )
    except (PageError, ValueError) as error:
        return [], f"search: {error}"
    return hits, None


def _day(value: str | None) -> datetime | None:
    """A ``YYYY-MM-DD`` day as its midnight in UTC."""
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value).replace(tzinfo=UTC)
    except ValueError:
        raise ValueError(f"not a date (YYYY-MM-DD): {value!r}") from None


def _hits(
    hits: Sequence[ScoredCard],
    places: Mapping[int, MessagePlace],
    replaced: Mapping[int, list[int]],
) -> Html:
    if not hits:
        return el("div", el("h2", "Search: no card matches"), id="hits")
    return el(
        "div",
        el("h2", f"Search: {len(hits)} card(s), best first"),
        el(
            "div",
            [
                card_block(
                    hit.card,
                    places,
                    replaced.get(hit.card.id, ()),
                    score=f"score {hit.score:.3f} (similarity {hit.similarity:.3f}, "
                    f"keywords {hit.keyword_score:.2f})",
                )
                for hit in hits
            ],
            class_="cards",
        ),
        id="hits",
    )

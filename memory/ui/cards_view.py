"""A card as the memory pages show it, and supersede chains drawn as what replaced what, when."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from memory.ui.html import Html, Part, el, url
from memory.ui.layout import moment
from storage import Card
from storage.overview import MessagePlace

__all__ = ["card_block", "chain_row", "chains", "source_ids"]


def source_ids(cards: Sequence[Card]) -> list[int]:
    """Every source message id of ``cards`` (to find their places in one query)."""
    return sorted({message_id for card in cards for message_id in card.source_message_ids})


def card_block(
    card: Card,
    places: Mapping[int, MessagePlace],
    replaced: Sequence[int] = (),
    *,
    score: str | None = None,
) -> Html:
    """One card: badges, text, dates, validity, sources (links into the session), its place
    in a supersede chain, and its actions.

    Args:
        card: the card.
        places: where source messages are, by id (a source erased since is named by id).
        replaced: ids of the cards this one replaced.
        score: its search scores, said in words, when it is a search hit.
    """
    user_id = card.user_id
    current = card.valid_to is None
    badges = [
        el("span", card.type, class_="badge"),
        el("span", "pin", class_="badge pin") if card.pinned else None,
        el("span", "current", class_="badge current")
        if current
        else el("span", "superseded", class_="badge superseded"),
        el("span", score, class_="badge score") if score is not None else None,
    ]
    facts: list[tuple[str, Part]] = [
        ("said", moment(card.observed_at)),
        ("happened", moment(card.occurred_at)) if card.occurred_at else ("", None),
        (
            "valid",
            f"{moment(card.valid_from)} → {moment(card.valid_to) if card.valid_to else 'now'}",
        ),
        ("about", f"{card.subject} · {card.attribute}") if card.subject else ("", None),
        ("topic", card.topic) if card.topic else ("", None),
        ("tags", ", ".join(card.tags)) if card.tags else ("", None),
        ("session", _session_link(user_id, card.session_id)) if card.session_id else ("", None),
        ("sources", _sources(card, places)) if card.source_message_ids else ("", None),
        (
            "replaced by",
            el(
                "span",
                _card_link(user_id, card.superseded_by),
                f" on {moment(card.valid_to)}",
            ),
        )
        if card.superseded_by is not None
        else ("", None),
        (
            "replaced",
            [el("span", _card_link(user_id, old), " ") for old in replaced],
        )
        if replaced
        else ("", None),
    ]
    listed = [(name, value) for name, value in facts if name]
    return el(
        "article",
        el(
            "div",
            el("a", f"card {card.id}", href=url("/card", {"user": user_id, "card": card.id})),
            " ",
            badges,
        ),
        el("div", card.text, class_="text"),
        el("dl", [[el("dt", name), el("dd", value)] for name, value in listed]),
        _actions(card),
        class_="card" if current else "card superseded-card",
        id=f"card-{card.id}",
        data_card=card.id,
    )


def chains(cards: Sequence[Card]) -> list[list[Card]]:
    """The supersede chains among ``cards``: each from its oldest card to its newest.

    A chain is followed through ``superseded_by`` from every card nobody replaced into; a
    card reached twice (a cycle, or two chains merging) ends the walk, so the result is finite
    whatever the data.
    """
    by_id = {card.id: card for card in cards}
    pointed = {card.superseded_by for card in cards if card.superseded_by is not None}
    starts = [card for card in cards if card.id not in pointed]
    seen: set[int] = set()
    found: list[list[Card]] = []
    for start in starts + [card for card in cards if card.id in pointed]:
        if start.id in seen:
            continue
        chain: list[Card] = []
        at: Card | None = start
        while at is not None and at.id not in seen:
            chain.append(at)
            seen.add(at.id)
            at = by_id.get(at.superseded_by) if at.superseded_by is not None else None
        if len(chain) > 1 or (chain and chain[0].superseded_by is not None):
            found.append(chain)
    return found


def chain_row(chain: Sequence[Card]) -> Html:
    """A chain as boxes joined by arrows: each card's text and when it held."""
    parts: list[Part] = []
    for position, card in enumerate(chain):
        if position:
            parts.append(el("span", f"→ {moment(chain[position - 1].valid_to)} →", class_="arrow"))
        state = "current" if card.valid_to is None else "superseded"
        parts.append(
            el(
                "div",
                _card_link(card.user_id, card.id),
                " ",
                el("span", state, class_=f"badge {state}"),
                el("span", "pin", class_="badge pin") if card.pinned else None,
                el("div", card.text, class_="text"),
                el("div", f"from {moment(card.valid_from)}", class_="muted"),
                class_="link",
                data_card=card.id,
            )
        )
    return el("div", parts, class_="chain")


def _actions(card: Card) -> Html:
    where = {"user": card.user_id, "card": card.id}
    pin = (
        el("a", "unpin…", href=url("/confirm", {"action": "unpin", **where}))
        if card.pinned
        else el("a", "pin…", href=url("/confirm", {"action": "pin", **where}))
    )
    forget = el("a", "forget…", href=url("/confirm", {"action": "forget_card", **where}))
    return el("div", pin, forget, class_="actions")


def _card_link(user_id: str, card_id: int | None) -> Html:
    return el("a", f"card {card_id}", href=url("/card", {"user": user_id, "card": card_id}))


def _session_link(user_id: str, session_id: str) -> Html:
    return el("a", session_id, href=url("/session", {"user": user_id, "session": session_id}))


def _sources(card: Card, places: Mapping[int, MessagePlace]) -> list[Part]:
    links: list[Part] = []
    for message_id in card.source_message_ids:
        place = places.get(message_id)
        if place is None:
            links.append(el("span", f"message id {message_id} (gone)", class_="muted"))
        else:
            target = url(
                "/session", {"user": card.user_id, "session": place.session_id, "at": place.seq}
            )
            links.append(el("a", f"{place.session_id} #{place.seq}", href=f"{target}#m{place.seq}"))
        links.append(" ")
    return links

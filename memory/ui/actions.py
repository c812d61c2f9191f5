"""The page's four changes (pin, unpin, forget one card, forget a user), each asked first on a
page of its own and done by a POST through ``Memory``, so the public API's checks apply.

No script is needed to ask: the link leads to a confirmation page whose form (carrying the
CSRF token) does the change. Forgetting a user also asks for their id to be typed again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from starlette.responses import Response

from memory.errors import CardNotFoundError, PinBudgetError
from memory.ui.html import Html, Part, el, url, void
from memory.ui.layout import csrf_field, page
from memory.ui.visits import Inspector, PageError, Visit
from storage import Card

__all__ = ["ACTIONS", "act", "confirm_page"]


@dataclass(frozen=True, slots=True)
class Action:
    """One change the page can make.

    Attributes:
        name: its name in forms and links.
        verb: what the button says.
        needs_card: whether it is about one card.
        explain: what it does, for the confirmation page.
    """

    name: str
    verb: str
    needs_card: bool
    explain: str


ACTIONS = {
    action.name: action
    for action in (
        Action(
            "pin",
            "Pin",
            True,
            "Pin this card's text as a fact: it is then sent first among memories in every "
            "request of the user, and never dropped by the cap. A fact card is pinned itself; "
            "a card of another type gets a pinned fact card with the same text. The user's "
            "pin budget applies.",
        ),
        Action(
            "unpin",
            "Unpin",
            True,
            "Unpin this card: it stays as an ordinary card, recalled only when it matches.",
        ),
        Action(
            "forget_card",
            "Forget this card",
            True,
            "Delete this card for real, with its keyword terms. The messages it was made from "
            "stay (forget the user to remove those).",
        ),
        Action(
            "forget_user",
            "Forget this user",
            False,
            "Delete everything of this user for real, in one transaction: every session with "
            "its messages, summaries and kept reports, every card (pins included), jobs and "
            "archive marks. This cannot be undone.",
        ),
    )
}


def confirm_page(inspector: Inspector, visit: Visit) -> Response:
    """Ask before a change: what it does, on what, and a form that does it."""
    action = _action(visit)
    user_id = visit.required("user")
    card = _card(inspector, visit, user_id) if action.needs_card else None
    fields: list[Part] = [
        csrf_field(visit.visitor),
        void("input", type="hidden", name="action", value=action.name),
        void("input", type="hidden", name="user", value=user_id),
        void("input", type="hidden", name="card", value=card.id) if card else None,
    ]
    if action.name == "forget_user":
        fields.append(
            el(
                "label",
                "Type the user's id to confirm: ",
                void("input", name="confirm_user", autocomplete="off", required=True),
            )
        )
    back = (
        url("/card", {"user": user_id, "card": card.id})
        if card
        else url("/user", {"user": user_id})
    )
    body = [
        el("p", action.explain),
        el("p", "User: ", el("strong", user_id)),
        el(
            "div",
            el("strong", f"Card {card.id} ({card.type}): "),
            el("span", card.text, class_="content"),
            class_="note",
        )
        if card
        else None,
        el(
            "form",
            fields,
            el(
                "button",
                action.verb,
                type="submit",
                class_="danger" if action.name.startswith("forget") else None,
            ),
            " ",
            el("a", "Cancel", href=back),
            action="/act",
            method="post",
            id="confirm",
        ),
    ]
    return page(
        f"{action.verb}?",
        body,
        visit.visitor,
        crumbs=[("users", "/"), (user_id, url("/user", {"user": user_id}))],
    )


def act(inspector: Inspector, visit: Visit) -> Response:
    """Do a confirmed change through ``Memory`` and say what was done.

    Raises:
        PageError: the form is incomplete, names no such card, or the change was refused
            (the pin budget, a mistyped user id).
    """
    action = _action(visit)
    user_id = visit.required("user")
    memory = inspector.memory
    done: Html
    links: Part
    if action.name == "forget_user":
        if visit.text("confirm_user") != user_id:
            raise PageError(400, "the typed id is not the user's id: nothing was forgotten")
        gone = memory.forget(user_id=user_id)
        done = el("span", f"Forgot user {user_id}: {gone.describe()}.")
        links = el("a", "Back to the users", href="/")
    else:
        card_id = visit.whole("card", 0)
        steps: dict[str, Callable[[], str]] = {
            "pin": lambda: _pin(inspector, user_id, card_id),
            "unpin": lambda: f"Unpinned card {memory.unpin(user_id=user_id, card_id=card_id).id}.",
            "forget_card": lambda: _forget_card(inspector, user_id, card_id),
        }
        try:
            done = el("span", steps[action.name]())
        except CardNotFoundError:
            raise PageError(404, f"user {user_id!r} has no card {card_id}") from None
        except PinBudgetError as error:
            raise PageError(409, f"not pinned: {error}") from None
        links = [
            el("a", "Back to the memory", href=url("/memory", {"user": user_id})),
            " · ",
            el("a", "the user", href=url("/user", {"user": user_id})),
        ]
    return page("Done", [el("div", done, class_="done", id="done"), el("p", links)], visit.visitor)


def _pin(inspector: Inspector, user_id: str, card_id: int) -> str:
    card = inspector.memory.card(user_id=user_id, card_id=card_id)
    pinned = inspector.memory.pin(
        user_id=user_id,
        text=card.text,
        session_id=card.session_id,
        topic=card.topic,
        tags=card.tags,
    )
    if pinned.id == card.id:
        return f"Pinned card {card.id}."
    return f"Pinned the text of card {card.id} as fact card {pinned.id}."


def _forget_card(inspector: Inspector, user_id: str, card_id: int) -> str:
    inspector.memory.forget(user_id=user_id, card_id=card_id)
    return f"Forgot card {card_id}."


def _action(visit: Visit) -> Action:
    name = visit.required("action")
    action = ACTIONS.get(name)
    if action is None:
        raise PageError(400, f"no action {name!r} (one of {', '.join(ACTIONS)})")
    return action


def _card(inspector: Inspector, visit: Visit, user_id: str) -> Card:
    card_id = visit.whole("card", 0)
    try:
        return inspector.memory.card(user_id=user_id, card_id=card_id)
    except CardNotFoundError:
        raise PageError(404, f"user {user_id!r} has no card {card_id}") from None

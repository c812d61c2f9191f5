"""``CardWriter``: new cards stored, near-duplicates merged, and older cards they replace closed.

The index stores and de-duplicates (``CardIndex.add``: same content, or the same words close in
meaning); this module adds the judgment of ``decide_supersede``: an extracted card that sets
the same attribute of the same subject as a valid card of the user's (a new city, a changed
preference, a task now done) closes it (``valid_to``, ``superseded_by``); a fact that comes
back (the same content as a superseded card) makes that card valid again. Pinned cards are
never closed: a conflict with one is logged. Nothing is deleted.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from memory.cards import ExistingCard, decide_supersede
from memory.cards.supersede import TASK_PREFIX
from retrieval import CardDraft, CardIndex
from storage import Card

__all__ = ["CardWriter"]

logger = logging.getLogger(__name__)


class CardWriter:
    """Stores a user's new cards and applies what they change to the cards already stored."""

    def __init__(self, index: CardIndex) -> None:
        self._index = index

    def write(self, user_id: str, drafts: Sequence[CardDraft]) -> list[Card]:
        """Store the drafts (one embedding batch), then supersede what they replace.

        Cards with a subject and an attribute are applied in the order they were said, so a
        batch holding "I moved to Berlin" and later "I live in Lisbon now" leaves Lisbon valid.
        A stored card said later than the draft keeps precedence (an older session archived
        late closes nothing newer; its card is closed by the newer one instead).

        The chains stay acyclic with one current card per fact, whatever order, repetition or
        retry the statements come in: a card is only ever closed in favour of a card that is
        valid at that moment, and of a fact's cards the one stated last stays valid.

        Returns:
            The stored cards in the order of ``drafts``, as they were before any closing.
        """
        store = self._index.store
        keys = {(d.subject, d.attribute) for d in drafts if _keyed(d)}
        current = {
            card.id: card
            for card in store.current_keyed(
                user_id,
                [(s, a) for s, a in keys if s and a and not a.startswith(TASK_PREFIX)],
                prefixes=[
                    (s, TASK_PREFIX) for s, a in keys if s and a and a.startswith(TASK_PREFIX)
                ],
            )
        }
        stored = self._index.add(user_id, drafts)
        keyed = [i for i, draft in enumerate(drafts) if _keyed(draft)]
        said = {i: drafts[i].observed_at or stored[i].observed_at for i in keyed}
        # Each card as it is now: ``stored`` holds them as they were before any closing, and a
        # batch may state one fact twice (Berlin, Lisbon, Berlin: one Berlin card).
        latest: dict[int, Card] = {}
        for position in sorted(keyed, key=lambda i: (said[i], i)):
            card = latest.get(stored[position].id, stored[position])
            if card.type == "turn":
                continue
            self._apply(user_id, drafts[position], card, said[position], current, latest)
        return stored

    def _apply(
        self,
        user_id: str,
        draft: CardDraft,
        card: Card,
        said: datetime,
        current: dict[int, Card],
        latest: dict[int, Card],
    ) -> None:
        """Apply one statement: of ``card`` and the valid cards it rivals, the one stated last
        stays valid and closes the others.

        ``current`` holds the valid keyed cards and ``latest`` every card changed so far; both
        are kept up to date. A card is closed only in favour of a valid one, so no chain ever
        turns back on itself.
        """
        store = self._index.store
        decision = decide_supersede(
            draft, [_existing(c) for c in current.values() if c.id != card.id]
        )
        for conflict in decision.pinned_conflicts:
            logger.warning(
                "card %d of user %r contradicts pinned card %s; the pin stays valid",
                card.id, user_id, conflict,
            )  # fmt: skip
        rivals = [current[int(i)] for i in decision.supersedes]
        # Ties go to the statement applied now: it was said last among equals.
        stated = max(said, card.valid_from) if card.valid_to is None else said
        newest = max(rivals, key=_stated, default=None)
        if card.pinned or newest is None or _stated(newest) <= stated:
            if card.valid_to is not None or said > card.valid_from:
                # The same content as a superseded card: the fact came back (moved back home);
                # or said again: its validity runs from the latest statement, so a value said
                # between the two does not count as newer.
                card = latest[card.id] = store.revive(user_id, card.id, said)
            winner = card
        else:
            # A valid card was stated after this one: this one is the outdated statement.
            winner = newest
        for loser in [card, *rivals]:
            if loser.id != winner.id and loser.valid_to is None and not loser.pinned:
                latest[loser.id] = store.supersede(user_id, loser.id, winner.id)
                current.pop(loser.id, None)
        if winner.valid_to is None:
            current[winner.id] = winner


def _stated(card: Card) -> datetime:
    """When a valid card was last stated: said, or said again after it had been superseded."""
    return max(card.observed_at, card.valid_from)


def _keyed(draft: CardDraft) -> bool:
    """Whether a draft can supersede: an extracted card that names its subject and attribute."""
    return draft.type != "turn" and draft.subject is not None and draft.attribute is not None


def _existing(card: Card) -> ExistingCard:
    return ExistingCard(
        id=card.id,
        subject=card.subject,
        attribute=card.attribute,
        type=card.type,
        text=card.text,
        pinned=card.pinned,
        valid=card.valid_to is None,
    )

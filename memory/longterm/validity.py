"""What recall does with facts that changed: the current value first, the old ones marked.

A card a newer one superseded is kept, closed (``memory.longterm.card_lifecycle``), and so is every
turn excerpt of the messages that stated it: the excerpt is what was said, and stays findable. Left
alone, "Where do I live now?" recalls the excerpt "User: I live in Lyon" as readily as the one about
Berlin. So, for the memories one request recalled:

- a turn excerpt whose messages are the sources of a superseded card (and of no current card of
  the same fact) carries the old value: it is stale, and shown with the end of its validity
  ("[until 4 April 2025]");
- the current card of every fact a stale memory carries comes first, in the place of the first
  stale memory if search did not find it, and so does the current card of a property the
  question names ("which company am I with?": the employer; ``memory.cards.asking``), first;
  stale memories follow every current one, and are the first to go when that makes more than
  ``k``;
- a question about the past ("where did I live before Cork?", 之前) recalls superseded cards
  too, each with its validity, so the value that held before the current one is in the prompt
  beside it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import datetime

from memory.cards.asking import asks_about_the_past, attributes_asked
from memory.cards.supersede import TASK_PREFIX
from memory.settings import CardSettings
from retrieval import CardIndex, CardQuery, ScoredCard, relevant_cards
from storage import Card, CardFilter

__all__ = ["STALE_RANK", "current_first", "named_current", "names_property", "why_brought"]

#: A stale memory's score is at most this share of the lowest score of a current memory, so
#: it is sent (and read) after every current one, and dropped before them by the hard cap.
STALE_RANK = 0.5

Fact = tuple[str, str]
# Superseded cards a question about the past may recall: what was extracted, never a turn.
_EXTRACTED = ("fact", "preference", "task", "event", "profile")
#: Whose properties a question names: the user's.
_ASKER = "user"


def current_first(
    index: CardIndex,
    user_id: str,
    query: str,
    hits: Sequence[ScoredCard],
    settings: CardSettings,
    shown: Collection[int] = (),
    read_ahead: Callable[[Sequence[int]], list[Card] | None] | None = None,
) -> list[ScoredCard]:
    """The recalled memories with every superseded value marked and ranked after the current.

    Args:
        index: The user's card index (it answers which cards were made from what).
        user_id: The owner.
        query: The (rewritten) query the memories were recalled for.
        hits: The recalled memories, best first (at most ``settings.k`` of them).
        settings: How many memories recall sends (``k``; a question about the past may get
            more: its superseded cards on top) and the least cosine similarity of a recalled
            card (``min_score``, for the superseded cards such a question searches).
        shown: Cards in the prompt already (pins): never added again.
        read_ahead: The keyed cards made from given messages (and maybe from others) if read
            already (``RecallAhead.keyed_from_messages``), else None: looked up here.

    Returns:
        The memories, best first: current ones with their scores (a current card brought in
        takes the score of the memory whose place it takes: the best one for the property the
        question names), then stale ones with lower scores. A stale memory's card is a copy
        whose ``valid_to`` says until when it held.
    """
    recalled = list(hits)
    k = settings.k
    past = asks_about_the_past(query)
    if past:
        present = {*shown, *_ids(recalled)}
        recalled += _superseded(index, user_id, query, k, recalled, settings.min_score, present)
        recalled.sort(key=lambda hit: -hit.score)
    stale = _stale_facts(index, user_id, recalled, read_ahead)
    asked = attributes_asked(query)
    if not stale and not asked:
        return recalled
    facts = {fact for facts in stale.values() for fact, _ in facts if not _task(fact[1])}
    exact = {*facts, *((_ASKER, a) for a in asked if not a.endswith(":"))}
    prefixes = [(_ASKER, a) for a in asked if a.endswith(":")]
    currents = index.current_keyed(user_id, sorted(exact), prefixes=prefixes)
    present = {*shown, *_ids(recalled)}
    best = recalled[0].score if recalled else 1.0
    current = [
        _brought(card, best)
        for card in currents
        if names_property(card, asked) and card.id not in present
    ]
    present |= _ids(current)
    by_fact = {(c.subject, c.attribute): c for c in currents}
    old: list[ScoredCard] = []
    for hit in recalled:
        carried = stale.get(hit.card.id)
        if carried is None:
            current.append(hit)
            continue
        for fact, _ in carried:
            now = by_fact.get(fact)
            if now is not None and now.id not in present:
                current.append(_brought(now, hit.score))
                present.add(now.id)
        until = min(ended for _, ended in carried)
        old.append(hit.model_copy(update={"card": hit.card.model_copy(update={"valid_to": until})}))
    floor = min((hit.score for hit in current), default=1.0)
    demoted = [hit.model_copy(update={"score": min(hit.score, floor) * STALE_RANK}) for hit in old]
    ranked = current + demoted
    return ranked if past else ranked[:k]


def _superseded(
    index: CardIndex,
    user_id: str,
    query: str,
    k: int,
    recalled: Sequence[ScoredCard],
    min_score: float | None,
    present: set[int],
) -> list[ScoredCard]:
    """Of the ``k`` superseded extracted cards best matching a question about the past, those
    that tell the history of a fact recalled or of a property the question names, or pass the
    relevance gate themselves. They come on top of ``k`` and are sent whatever their score, so
    "Which city did I live in before Bergen?" must not bring the user's old cars (the only
    superseded cards of a user whose move no rule read), while "What did I drive before the
    Honda Jazz?" gets the Mazda that "User's car is Honda Jazz" superseded."""
    where = CardFilter(include_superseded=True, types=_EXTRACTED)
    older = index.search(user_id, query, CardQuery(k=k, where=where, min_score=min_score))
    facts = {(hit.card.subject, hit.card.attribute) for hit in recalled if hit.card.attribute}
    asked = attributes_asked(query)
    passed = _ids(relevant_cards(older, index.terms(query), index.config, min_similarity=min_score))
    return [
        hit
        for hit in older
        if hit.card.valid_to is not None
        and hit.card.id not in present
        and (
            (hit.card.subject, hit.card.attribute) in facts
            or names_property(hit.card, asked)
            or hit.card.id in passed
        )
    ]


def _brought(card: Card, score: float) -> ScoredCard:
    """A current card recall brings in: not searched, so no similarity or keyword score."""
    return ScoredCard(card=card, score=score, similarity=0.0, keyword_score=0.0)


def named_current(query: str, hits: Iterable[ScoredCard]) -> set[int]:
    """The current cards among ``hits`` of a property the query names ("which company am I
    with?": the employer): recall sends them first."""
    asked = attributes_asked(query)
    if not asked:
        return set()
    return {h.card.id for h in hits if h.card.valid_to is None and names_property(h.card, asked)}


def why_brought(card: Card) -> str:
    """Why a card ``current_first`` brought in is recalled, as the report says."""
    if card.valid_to is not None:
        return "a value that held before (the question asks about the past)"
    return "the current value of a fact an older memory holds"


def names_property(card: Card, asked: Sequence[str]) -> bool:
    """Whether ``card`` sets a property the question names."""
    attribute = card.attribute or ""
    return card.subject == _ASKER and any(
        attribute.startswith(a) if a.endswith(":") else attribute == a for a in asked
    )


def _ids(hits: Iterable[ScoredCard]) -> set[int]:
    return {hit.card.id for hit in hits}


def _stale_facts(
    index: CardIndex,
    user_id: str,
    recalled: Sequence[ScoredCard],
    read_ahead: Callable[[Sequence[int]], list[Card] | None] | None,
) -> dict[int, list[tuple[Fact, datetime]]]:
    """The recalled memories that carry a superseded value: card id -> (fact, valid until).

    A superseded card carries its own fact. A turn excerpt carries the facts of the superseded
    cards made from its messages, except a fact a current card was made from them too (the
    value was said again: the excerpt says what holds).
    """
    carried: dict[int, list[tuple[Fact, datetime]]] = {}
    for hit in recalled:
        card = hit.card
        if card.type != "turn" and card.valid_to is not None and _keyed(card):
            carried[card.id] = [((card.subject or "", card.attribute or ""), card.valid_to)]
    turns = [hit.card for hit in recalled if hit.card.type == "turn"]
    sources = sorted({i for card in turns for i in card.source_message_ids})
    keyed = read_ahead(sources) if read_ahead is not None and sources else None
    if keyed is None:
        keyed = index.keyed_from_messages(user_id, sources) if sources else []
    for turn in turns:
        made = [c for c in keyed if set(c.source_message_ids) & set(turn.source_message_ids)]
        holding = {_fact(c) for c in made if c.valid_to is None}
        old = [
            (_fact(c), c.valid_to)
            for c in made
            if c.valid_to is not None and _fact(c) not in holding
        ]
        if old:
            carried[turn.id] = old
    return carried


def _keyed(card: Card) -> bool:
    return card.subject is not None and card.attribute is not None


def _fact(card: Card) -> Fact:
    return (card.subject or "", card.attribute or "")


def _task(attribute: str) -> bool:
    return attribute.startswith(TASK_PREFIX)

"""Later statements that may change a recalled one, for a question about the user's present.

The card rules read "I moved to Lyon" as the user's city, but no rulebook reads every way a
fact changes: "Finally settled in Bordeaux after leaving Lyon", "I switched from the piano to
the cello", 我把小米13换成了华为Mate 60. Such a change shares few words with the question
("Which city do I live in?") and often ranks below the relevance gate, while the statement it
changes passes: the old value alone reaches the prompt.

``with_later_statements`` finds them among the search's candidates: a card is brought in past
the gate when

1. its own message (a turn card's neighbours are context) was said by someone other than the
   assistant, after the card it follows was said;
2. it names a word of what a card that passed says (or, for a card extracted from a message, what
   that message said), a word the question does not hold (the old value: "Lyon", "piano",
   小米);
3. it tells (does not ask) that something changed (``CHANGE_WORDS``, English and Chinese:
   "now", "switched", "no more", "left", 换, 搬, 不…了);
4. and it is at least half as similar to the question as the gate asks, in the turn card holding
   it that is closest to the question (a change of something else that names the same word,
   "goodbye Saltmarsh Press" beside "I drink espresso" in one turn, is not brought to "What do
   I drink in the mornings?").

The latest such statement comes right after the card it follows, so it is weighed as well as
that card (one that passed the gate on its own moves up to it: a Chinese question has no gate,
and the change ranked below ``k``); and the card it follows is no longer sent first as the
current value of a property the question names (the user's city, read by a rule from the first
statement, is what the later one changed). Pure: the cards are the search's, nothing is read,
so a change is found only among the candidates recall weighs (``4 * k + 2`` cards, 100 with a
token budget): in a long history, a change that shares no word with the question is found only
when search ranks it among them.
"""

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from retrieval.excerpt_text import asks, line_terms
from retrieval.recipe import SearchConfig
from retrieval.relevance_gate import gate_threshold
from retrieval.search import ScoredCard
from retrieval.turns import split_turn_card
from storage import Card

__all__ = ["CHANGE_WORDS", "LaterStatements", "with_later_statements"]

#: Words that say a fact changed, whatever the fact.
CHANGE_WORDS = re.compile(
    r"\b(?:now|no longer|no more|any ?more|instead|switch(?:ed)?|chang(?:e|ed)|mov(?:e|ed)|"
    r"left|leaving|quit|stopped|dropped|gave up|given up|replaced|swapped|sold|broke|died|"
    r"passed away|new|these days|from now on|goodbye|since|started|starting)\b"
    r"|不再|换|搬|辞职|跳槽|离开|现在|最近|已经|走了|改|不.{1,3}了",
    re.IGNORECASE,
)
_ASSISTANT = "Assistant"
#: An extracted card names the user "User" ("User's cat is called Mochi"): not a value.
_USER = "user"


@dataclass(frozen=True, slots=True)
class LaterStatements:
    """What ``with_later_statements`` found.

    Attributes:
        hits: The cards that passed, each followed by the cards brought in after it.
        why: Why each card was brought in, by card id.
        changed: The cards that passed that a later statement may change (one brought in or
            one that passed): the current card of a property the question names is not sent
            first when a later statement names its value.
    """

    hits: list[ScoredCard]
    why: dict[int, str]
    changed: set[int]


def with_later_statements(
    hits: Sequence[ScoredCard],
    passed: Sequence[ScoredCard],
    query_terms: Collection[str],
    config: SearchConfig,
    *,
    min_similarity: float | None = None,
) -> LaterStatements:
    """``passed`` with the cards of ``hits`` that may change what one of them says (see the
    module), each right after the card it follows (one that passed the gate moves up to it).

    Args:
        hits: The search's candidates, best first.
        passed: Those that passed the relevance gate, best first.
        query_terms: The question's search terms.
        config: The recipe (its stop words).
        min_similarity: The gate's similarity if not the recipe's (a user's setting).
    """
    threshold = gate_threshold(set(query_terms), config, min_similarity)
    floor = None if threshold is None else threshold / 2
    taken = {hit.card.id for hit in passed}
    # How close a message is to the question: the best of the turn cards holding it (its own
    # card's neighbours may be farther from the question than another card's).
    closest: dict[int, float] = {}
    for hit in hits:
        if hit.card.type == "turn":
            for source in hit.card.source_message_ids:
                closest[source] = max(closest.get(source, -1.0), hit.similarity)
    said = {hit.card.id: _said(hit.card) for hit in hits}  # each card taken apart once
    changes = [
        (hit, terms)
        for hit in hits
        if hit.card.id in taken
        or floor is None
        or closest.get(hit.card.turn_message_id or 0, hit.similarity) >= floor
        for terms in [_change_terms(said[hit.card.id].own, config)]
        if terms
    ]
    naming: dict[str, list[int]] = {}  # a word: the changes that name it
    for index, (_, terms) in enumerate(changes):
        for term in terms:
            naming.setdefault(term, []).append(index)
    own_message = {hit.card.turn_message_id: hit for hit in hits if hit.card.type == "turn"}
    found = LaterStatements([], {}, set())
    placed: set[int] = set()
    for earlier in passed:
        if earlier.card.id not in placed:
            placed.add(earlier.card.id)
            found.hits.append(earlier)
        if not changes:
            continue
        told = said.get(earlier.card.id) or _said(earlier.card)
        words = {term for text in told.lines for term in _terms(text, config)}
        for source in earlier.card.source_message_ids if earlier.card.type != "turn" else ():
            message = own_message.get(source)  # what the message a card was made from said
            if message is not None and (own := said[message.card.id].own) is not None:
                words |= _terms(own, config)
        words -= {*query_terms, _USER}
        naming_it = [
            changes[i]
            for i in {i for word in words for i in naming.get(word, ())}
            if changes[i][0].card.observed_at > earlier.card.observed_at
        ]
        if not naming_it:
            continue
        found.changed.add(earlier.card.id)
        # The latest of them (a fact changes once at a time): brought in, or moved up to it.
        later, terms = max(naming_it, key=lambda change: change[0].card.observed_at)
        if later.card.id not in taken:
            taken.add(later.card.id)
            shared = sorted(words.intersection(terms))
            found.why[later.card.id] = f"said later, names {', '.join(shared[:3])} of a memory"
        if later.card.id not in placed:
            placed.add(later.card.id)
            found.hits.append(later)
    return found


@dataclass(frozen=True, slots=True)
class _Said:
    """What a card says, not counting the assistant: a turn card's lines and its own message
    (``None`` when the assistant said it), or any other card's text as both."""

    lines: tuple[str, ...]
    own: str | None


def _said(card: Card) -> _Said:
    if card.type != "turn":
        return _Said((card.text,), card.text)
    split = split_turn_card(card.text, len(card.source_message_ids))
    lines = split.lines if split is not None else ()
    told: list[str] = []
    own: str | None = None
    for message_id, line in zip(card.source_message_ids, lines, strict=False):
        speaker, colon, text = line.partition(": ")
        if colon and speaker != _ASSISTANT:
            told.append(text)
            if message_id == card.turn_message_id:
                own = text
    return _Said(tuple(told), own)


def _change_terms(own: str | None, config: SearchConfig) -> set[str]:
    """The terms of a card's own message if it tells (does not ask: "Should I leave Lyon
    now?") that something changed, else none."""
    if own is None or not CHANGE_WORDS.search(own) or asks(own):
        return set()
    return _terms(own, config)


def _terms(text: str, config: SearchConfig) -> set[str]:
    """The search terms of ``text``, less the words of change themselves."""
    terms = line_terms(text, config)
    return {term for term in terms if len(term) > 1 and not CHANGE_WORDS.fullmatch(term)}

"""Which stored cards a new card replaces: same subject and attribute, a different value.

The store asks before it inserts a draft: an identical card (same normalized text) is a
duplicate, not a change; a card that sets the same attribute of the same subject to something
else closes the older ones (kept, marked no longer valid); a task marked done closes the open
task it names. Pinned cards are the user's explicit word and are never closed automatically.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from memory.cards.model import CardType, normalize_text
from memory.cards.phrasing import has_cjk

__all__ = [
    "CardId",
    "ChainLink",
    "ChainProblems",
    "ExistingCard",
    "Statement",
    "SupersedeDecision",
    "chain_problems",
    "decide_supersede",
    "task_attribute",
    "task_key",
]

CardId = int | str
#: The attribute prefix of task cards; the rest is the task's key (see ``task_key``).
TASK_PREFIX = "task:"

_WORD = re.compile(r"[^\W_]+(?:['\u2019-][^\W_]+)*")
# Words that say what happens to a task, not which task it is: "remind me to call Bob" and
# "I finished calling Bob" are one task.
_TASK_WORDS = frozenset((
    "a", "an", "the", "to", "my", "our", "your", "his", "her", "their", "of", "for", "and", "on",
    "at", "in", "with", "by", "me", "i", "we", "is", "are", "was", "be", "it", "this", "that",
    "need", "needs", "have", "has", "had", "must", "should", "remind", "reminder", "todo",
    "to-do", "do", "did", "done", "finish", "finished", "finishing", "complete", "completed",
    "completing", "forget", "don't", "dont", "not", "already", "just", "today", "tomorrow",
    "yesterday",
))  # fmt: skip
_CJK_TASK_WORDS = re.compile(
    r"用户等人|用户|提醒我|记得|别忘了|不要忘记|待办|已经|已|完成了|完成|[写做弄搞办]完了|[写做弄搞办]完|搞定了|搞定|交了|需要|我们|我|了|的|把|要|去"
)


class Statement(Protocol):
    """What the decision reads of a new card: an ``ExtractedCard`` or the draft the store is
    given (``storage.CardDraft``), as it is."""

    @property
    def type(self) -> CardType: ...
    @property
    def text(self) -> str: ...
    @property
    def subject(self) -> str | None: ...
    @property
    def attribute(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class ExistingCard:
    """What the decision needs to know of a stored card.

    Attributes:
        id: the card's id in the store.
        subject: who or what it is about (``user``, ``team``), or ``None``.
        attribute: which property it sets (``city``, ``task:call bob``), or ``None``.
        type: the card's type.
        text: the card's text.
        pinned: pinned by the user: never superseded automatically.
        valid: not superseded yet.
    """

    id: CardId
    subject: str | None
    attribute: str | None
    type: CardType
    text: str
    pinned: bool = False
    valid: bool = True


@dataclass(frozen=True, slots=True)
class SupersedeDecision:
    """What to do with a new draft given the cards already stored.

    Attributes:
        duplicate_of: a stored card with the same normalized text: store nothing new, merge the
            draft's sources into it (and make it valid again if it had been superseded: the
            fact came back, e.g. the user moved back).
        supersedes: valid cards the draft replaces: keep them, set ``valid_to`` and
            ``superseded_by``.
        pinned_conflicts: pinned cards the draft contradicts but may not close; worth showing
            to the user.
    """

    duplicate_of: CardId | None = None
    supersedes: tuple[CardId, ...] = ()
    pinned_conflicts: tuple[CardId, ...] = ()


def _stem(word: str) -> str:
    # A crude stemmer is enough to match a task's own words across tenses ("write", "writing",
    # "submitted"); a wrong stem only costs a missed supersede, never a wrong one on its own.
    for suffix in ("ing", "ed", "es", "s", "e"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            word = word[: -len(suffix)]
            break
    if len(word) > 3 and word[-1] == word[-2]:
        word = word[:-1]
    return word


def task_key(text: str) -> str:
    """The words that name a task, without the words that say its state.

    ``"remind me to send the invoice to Bob"`` and ``"I finished sending the invoice"`` give
    ``"send invoic bob"`` and ``"send invoic"`` (words crudely stemmed); ``"提醒我交报告"``
    and ``"报告完成了"`` give ``"交报告"`` and ``"报告"``. Chinese keeps its characters (it
    has no spaces to split on).
    """
    text = unicodedata.normalize("NFKC", text).casefold()
    words: list[str] = []
    for word in _WORD.findall(text):
        if has_cjk(word):
            cleaned = _CJK_TASK_WORDS.sub("", word)
            if cleaned:
                words.append(cleaned)
        elif word not in _TASK_WORDS:
            words.append(_stem(word))
    return " ".join(words)


def task_attribute(text: str) -> str:
    """``task:`` and the task's key: the attribute of an open or done task card."""
    return TASK_PREFIX + task_key(text)


def _key_units(key: str) -> set[str]:
    """Words of a key; Chinese words as character pairs, so 交报告 and 报告 share 报告."""
    units: set[str] = set()
    for word in key.split():
        if has_cjk(word) and len(word) > 1:
            units.update(word[i : i + 2] for i in range(len(word) - 1))
        else:
            units.add(word)
    return units


def _same_task(new: str, old: str) -> bool:
    a, b = _key_units(new[len(TASK_PREFIX) :]), _key_units(old[len(TASK_PREFIX) :])
    if not a or not b:
        return False
    # One key inside the other ("send invoice" in "send invoice bob"), or most words shared.
    return a <= b or b <= a or len(a & b) / len(a | b) >= 0.5


def _same_attribute(draft: Statement, card: ExistingCard) -> bool:
    if draft.attribute is None or card.attribute is None or draft.subject != card.subject:
        return False
    if draft.attribute.startswith(TASK_PREFIX) and card.attribute.startswith(TASK_PREFIX):
        return _same_task(draft.attribute, card.attribute)
    return draft.attribute == card.attribute


def decide_supersede(draft: Statement, existing: Iterable[ExistingCard]) -> SupersedeDecision:
    """Decide whether ``draft`` duplicates a stored card and which stored cards it closes.

    Args:
        draft: the new card.
        existing: the user's stored cards that could matter (at least the valid ones with the
            draft's subject, and the one with the draft's content hash if there is one).

    Returns:
        The duplicate (same normalized text, valid or not), the valid unpinned cards with the
        same subject and attribute and a different text, and the pinned ones it contradicts.
        Archived turns neither supersede nor are superseded: they are what was said, not a
        state.
    """
    normalized = normalize_text(draft.text)
    duplicate: CardId | None = None
    closes: list[CardId] = []
    pinned: list[CardId] = []
    for card in existing:
        if normalize_text(card.text) == normalized:
            duplicate = card.id if duplicate is None else duplicate
            continue
        if draft.type == "turn" or card.type == "turn" or not card.valid:
            continue
        if _same_attribute(draft, card):
            (pinned if card.pinned else closes).append(card.id)
    return SupersedeDecision(duplicate, tuple(closes), tuple(pinned))


@dataclass(frozen=True, slots=True)
class ChainLink:
    """What the chain check needs to know of a stored card.

    Attributes:
        id: the card's id.
        subject: who or what it is about, or ``None``.
        attribute: which property it sets, or ``None``.
        superseded_by: the card that replaced it, or ``None`` while it is current.
        pinned: pinned by the user (a pin and a newer card may both be current).
    """

    id: CardId
    subject: str | None
    attribute: str | None
    superseded_by: CardId | None
    pinned: bool = False


@dataclass(frozen=True, slots=True)
class ChainProblems:
    """What is wrong with a user's supersede chains; empty (falsy) when nothing is.

    Attributes:
        facts: how many facts (subject and attribute, tasks aside) were checked.
        cycles: each cycle's cards, in the order ``superseded_by`` walks them.
        without_current: facts whose every card is superseded.
        several_current: facts with more than one current card (pins aside).
    """

    facts: int = 0
    cycles: tuple[tuple[CardId, ...], ...] = ()
    without_current: tuple[tuple[str, str], ...] = ()
    several_current: tuple[tuple[str, str], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.cycles or self.without_current or self.several_current)


def chain_problems(cards: Iterable[ChainLink]) -> ChainProblems:
    """Check that supersede chains are acyclic and leave exactly one current card per fact.

    A fact is a subject and attribute; tasks are left out (their attributes match word by word,
    and a done task closes the open one on purpose). A pinned card is never closed
    automatically, so it is not counted among a fact's current cards.
    """
    links = list(cards)
    by_id: Mapping[CardId, ChainLink] = {link.id: link for link in links}
    facts: dict[tuple[str, str], list[ChainLink]] = {}
    for link in links:
        if link.subject and link.attribute and not link.attribute.startswith(TASK_PREFIX):
            facts.setdefault((link.subject, link.attribute), []).append(link)
    cycles: list[tuple[CardId, ...]] = []
    done: set[CardId] = set()
    for link in links:
        path: list[CardId] = []
        on_path: set[CardId] = set()
        at: ChainLink | None = link
        while at is not None and at.id not in done and at.id not in on_path:
            path.append(at.id)
            on_path.add(at.id)
            at = by_id.get(at.superseded_by) if at.superseded_by is not None else None
        if at is not None and at.id in on_path:
            cycles.append(tuple(path[path.index(at.id) :]))
        done.update(path)
    without: list[tuple[str, str]] = []
    several: list[tuple[str, str]] = []
    for key, members in facts.items():
        current = [m for m in members if m.superseded_by is None]
        if not current:
            without.append(key)
        elif len([m for m in current if not m.pinned]) > 1:
            several.append(key)
    return ChainProblems(len(facts), tuple(cycles), tuple(without), tuple(several))

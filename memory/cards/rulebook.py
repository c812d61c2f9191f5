"""The shape of an extraction rule, shared by the English and the Chinese rule sets.

A rule is a pattern and a function from its match to a ``Finding`` (what the card says and
which attribute it sets). ``memory.cards.rules`` runs the rules over the user's sentences and
turns findings into ``ExtractedCard``s with times and sources.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from memory.cards.model import CardType

__all__ = ["Finding", "Rule", "rule", "word_set"]


@dataclass(frozen=True, slots=True)
class Finding:
    """What one rule read in one sentence.

    Attributes:
        type: the card's type.
        text: the card's text, third person or neutral, in the sentence's language.
        topic: a short label.
        subject: who the statement is about (``user``, ``team``).
        attribute: which property it sets (``None`` for a statement that sets none).
        dated_by_sentence: a date elsewhere in the sentence is this card's ``occurred_at``
            (``moved to Lisbon last May``); a date inside ``text`` always is.
    """

    type: CardType
    text: str
    topic: str
    subject: str | None = "user"
    attribute: str | None = None
    dated_by_sentence: bool = False


#: Makes a finding (or several) of a match, or ``None`` when the match is not what the rule is
#: about.
Build = Callable[[re.Match[str]], Finding | tuple[Finding, ...] | None]


@dataclass(frozen=True, slots=True)
class Rule:
    """A pattern (searched in one sentence, case-insensitive) and what to make of a match."""

    pattern: re.Pattern[str]
    build: Build


def rule(rules: list[Rule], pattern: str) -> Callable[[Build], Build]:
    """A decorator that adds ``build`` for ``pattern`` to ``rules``."""

    def register(build: Build) -> Build:
        rules.append(Rule(re.compile(pattern, re.IGNORECASE), build))
        return build

    return register


def word_set(words: str) -> frozenset[str]:
    """The words of a space-separated list: long word lists read better as one string."""
    return frozenset(words.split())

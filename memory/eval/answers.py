"""Answer in the recalled text: does the gold answer appear in the memories a prompt carries?

Evidence recall counts the evidence turns the recalled memories *cite*; a memory may cite a
whole message while carrying only part of its words (recall cuts lines to what the query asks
for), so recall alone can rise while the words that answer fall out. This second measure reads
the words: a question's gold ``answer`` is *checkable* when, normalised, it is at most
``MAX_ANSWER_WORDS`` words (a name, a place, a year, a date such as ``7 May 2023``: the
memories carry their day as ``[8 May 2023]``, the same form); longer answers (phrases, lists)
and questions with no answer (LoCoMo's adversarial ones) are not scored. A checkable answer is
*in the text* when its normalised words appear, whole and in order, in the normalised text of
the memories taken. Normalising: case folded, every character that is not a letter or digit
made a space, the articles ``a``, ``an``, ``the`` dropped, spaces collapsed.

Containment is lenient (a year is found in any day label of that year; ``yes`` in any line
saying yes) and strict (a paraphrase is missed): it compares recipes on the same questions,
it is not an accuracy. Pure: no database, no model.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["MAX_ANSWER_WORDS", "answer_in_text", "checkable_answer", "normalize_answer"]

#: The most words (after normalising) an answer may have to be checked by containment.
MAX_ANSWER_WORDS = 4

_NOT_WORD = re.compile(r"[^\w]+|_")
_ARTICLES = frozenset({"a", "an", "the"})


def normalize_answer(text: str) -> str:
    """Case folded, letters and digits only (others become spaces), no articles."""
    words = _NOT_WORD.sub(" ", text.casefold()).split()
    return " ".join(word for word in words if word not in _ARTICLES)


def checkable_answer(answer: str | None) -> str | None:
    """The normalised answer when it is short enough to check by containment, else ``None``."""
    if answer is None:
        return None
    normal = normalize_answer(answer)
    if not normal or len(normal.split()) > MAX_ANSWER_WORDS:
        return None
    return normal


def answer_in_text(answer: str, texts: Iterable[str]) -> bool:
    """Whether the (already normalised) ``answer`` appears, as whole words, in ``texts``."""
    haystack = " ".join(normalize_answer(text) for text in texts)
    return f" {answer} " in f" {haystack} "

"""What a question asks about: which property of the user, and whether its past value.

Recall sends the current value of a fact first and leaves superseded cards out. Two things
about the question help it (``memory.longterm.validity``): the property it names ("which
company am I with?" asks for the ``employer``; 我现在家在哪里 for the ``city``), whose current
card then comes first even when search ranked it low; and whether it asks about the past ("where
did I live before Cork?", "used to", 之前), which needs the superseded cards back, with their
validity.
Words, not a model: this runs on every request.
"""

from __future__ import annotations

import re
from functools import lru_cache

from retrieval.held_texts import hold_cache

__all__ = ["ASKED_ATTRIBUTES", "asks_about_now", "asks_about_the_past", "attributes_asked"]

_PAST_ENGLISH = re.compile(
    r"\b(?:previous(?:ly)?|used to|did (?:i|we) use to|former(?:ly)?|"
    r"back when|no longer|(?:my|our|the) (?:old|last|earlier) (?!time\b|message\b|question\b))",
    re.IGNORECASE,
)
# "Before" asks about the past in a question in the past tense or about a property ("which
# company was I with before X?", "which city before Galway?"), not in a request about what
# comes next ("remind me before the team meets", "before I leave").
_BEFORE = re.compile(r"\b(?:before|prior to)\b", re.IGNORECASE)
_PAST_TENSE = re.compile(r"\b(?:did|was|were|had)\b", re.IGNORECASE)
# The user asking about themselves: "Where do I live?", "What's my diet?", 我住在哪里.
# "us", not "US" (the country).
_FIRST_PERSON = re.compile(r"\b(?:i|i'm|i've|my|me|mine|we|we're|our|(?-i:us))\b|我", re.IGNORECASE)
_PAST_CHINESE = re.compile(r"之前|以前|原来|原先|过去|曾经|上一个|上一份|前一个|从前")

#: The user's properties a question can name, and the words that name them (English and
#: Chinese). An attribute ending in ``:`` is a prefix (``allergy:`` matches every allergy).
ASKED_ATTRIBUTES: dict[str, re.Pattern[str]] = {
    name: re.compile(pattern, re.IGNORECASE)
    for name, pattern in {
        "city": r"\b(?:live|living|home|city|town|moved?|based)\b|住在|住哪|家在|城市|搬",
        "employer": r"\b(?:company|employer|job|workplace|(?:do|did) i work|work (?:at|for))\b"
        r"|工作|公司|上班|单位",
        "phone": r"\b(?:phone|mobile|smartphone)\b|手机",
        "diet": r"\b(?:diet|eat|eating|vegetarian|vegan|pescatarian)\b|吃素|饮食|吃什么",
        "sport": r"\b(?:sports?|exercise|workouts?|work out|fitness|training)\b|运动|锻炼|健身",
        "allergy:": r"\ballerg|过敏",
        "laptop": r"\blaptop\b|笔记本电脑",
        "car": r"\bcar\b|汽车",
    }.items()
}


# Both are remembered by query: recall asks them of one query several times (for its search,
# its validity and its excerpts), 70-90 us of regular expressions each time. A forget empties
# them (``retrieval.held_texts``): they hold the queries.


@hold_cache
@lru_cache(maxsize=256)
def asks_about_the_past(query: str) -> bool:
    """Whether ``query`` asks what held before (an earlier home, job, phone), in English or Chinese.

    ``"Which company was I with before Kestrel Optics?"``, ``"my old phone"`` and ``"我之前住在
    哪里"`` do; ``"Where do I live now?"``, ``"How old am I?"`` and ``"What changed before
    the team meets?"`` do not.
    """
    if _PAST_ENGLISH.search(query) or _PAST_CHINESE.search(query):
        return True
    return bool(_BEFORE.search(query)) and bool(
        _PAST_TENSE.search(query) or attributes_asked(query)
    )


@hold_cache
@lru_cache(maxsize=256)
def asks_about_now(query: str) -> bool:
    """Whether ``query`` asks about the user's present: in the first person, not in the past
    tense and not about what held before.

    ``"Which instrument am I learning?"`` and ``"我现在用什么手机"`` do; ``"What did I say
    about Rome?"``, ``"Where did I live before Cork?"`` and ``"Where does Anna work?"`` do not.
    """
    return (
        bool(_FIRST_PERSON.search(query))
        and not _PAST_TENSE.search(query)
        and not asks_about_the_past(query)
    )


@hold_cache
@lru_cache(maxsize=256)
def attributes_asked(query: str) -> tuple[str, ...]:
    """The user's properties ``query`` names (``city``, ``employer``, ``allergy:`` ...), in the
    order of ``ASKED_ATTRIBUTES``; none for a query that names none."""
    return tuple(name for name, words in ASKED_ATTRIBUTES.items() if words.search(query))

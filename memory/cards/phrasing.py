"""Turning a user's sentence into a card's wording: sentences, questions, third person, dates.

Cards are statements about the user that must read well out of context, weeks later: "I went
hiking yesterday" becomes "On 2023-05-09 the user went hiking". These helpers do the rewording
for the rule-based extractor, in English and Chinese, without translating anything.
"""

from __future__ import annotations

import re

from memory.cards.dates import ResolvedDate

__all__ = [
    "absolute_date",
    "category_of",
    "has_cjk",
    "is_question",
    "split_sentences",
    "third_person",
    "with_absolute_date",
]

_CJK = re.compile(r"[\u3400-\u9fff]")
# Split after sentence-final marks (ASCII and CJK) and at line breaks; a full stop only ends a
# sentence before a space, so "Node.js" and "v1.2" stay whole.
_SENTENCE_END = re.compile(r"(?<=[\u3002\uff01\uff1f!?;\uff1b])|(?<=\.)(?=\s)|\n")
_QUESTION_START = re.compile(
    r"^(?:what|when|where|who|whom|whose|which|why|how|do|does|did|can|could|would|will|is|are|"
    r"am|was|were|should|shall|have|has)\b",
    re.IGNORECASE,
)
_CJK_QUESTION = re.compile(r"什么|怎么|为什么|哪|谁|多少|几点|几时|吗$|呢$|是否")

# (pattern, replacement): first person to third, the longest forms first.
_THIRD_PERSON = [
    (r"\bI'm\b|\bI am\b", "the user is"),
    (r"\bI've\b|\bI have\b", "the user has"),
    (r"\bI'd\b", "the user would"),
    (r"\bI'll\b", "the user will"),
    (r"\bI don't\b|\bI do not\b", "the user does not"),
    (r"\bI\b", "the user"),
    (r"\b[Mm]y\b", "the user's"),
    (r"\b[Mm]ine\b", "the user's"),
    (r"\b[Mm]yself\b", "themselves"),
    (r"\b[Mm]e\b", "the user"),
    (r"\b[Ww]e're\b|\b[Ww]e are\b", "the user and others are"),
    (r"\b[Ww]e've\b|\b[Ww]e have\b", "the user and others have"),
    (r"\b[Ww]e\b", "the user and others"),
    (r"\b[Oo]ur\b", "their"),
    (r"\b[Uu]s\b", "them"),
]
_THIRD_PERSON_RE = [(re.compile(pattern), replacement) for pattern, replacement in _THIRD_PERSON]

# What a named tool is, so "we use MySQL" and "we switched to Postgres" set one attribute.
_CATEGORIES = {
    "database": "postgres postgresql mysql mariadb sqlite mongodb mongo oracle dynamodb "
    "cassandra clickhouse cockroachdb supabase",
    "cache": "redis memcached valkey",
    "search": "elasticsearch opensearch meilisearch",
    "language": "python java golang rust typescript javascript kotlin swift ruby php scala",
    "framework": "django flask fastapi rails spring react vue angular svelte next.js nestjs",
    "cloud": "aws gcp azure heroku vercel 阿里云 腾讯云 华为云",
    "ci": "jenkins circleci travis",
    "editor": "vscode vim neovim emacs pycharm intellij cursor",
    "chat": "slack discord 钉钉 飞书 企业微信",
}
_CATEGORY_OF = {name: category for category, names in _CATEGORIES.items() for name in names.split()}
_CATEGORY_PHRASES = {"github actions": "ci", "gitlab ci": "ci", "sql server": "database",
                     "google cloud": "cloud", "microsoft teams": "chat"}  # fmt: skip


def has_cjk(text: str) -> bool:
    """Whether ``text`` has Chinese characters (the card is then worded in Chinese)."""
    return _CJK.search(text) is not None


def split_sentences(text: str) -> list[str]:
    """The sentences of a message, stripped, with their final mark kept."""
    return [part.strip() for part in _SENTENCE_END.split(text) if part and part.strip()]


def is_question(sentence: str) -> bool:
    """Whether a sentence asks rather than states: a question states no fact about the user."""
    stripped = sentence.strip()
    if stripped.endswith(("?", "\uff1f")):
        return True
    if has_cjk(stripped):
        return _CJK_QUESTION.search(stripped.rstrip("\u3002!.")) is not None
    return _QUESTION_START.match(stripped) is not None


def third_person(text: str) -> str:
    """The user's words about themselves, about "the user" (用户) instead, first letter upper.

    ``"I went hiking with my sister"`` becomes ``"The user went hiking with the user's sister"``;
    ``"我们上周去了上海"`` becomes ``"用户等人上周去了上海"``. Names and everything else are kept.
    """
    if has_cjk(text):
        text = text.replace("我们", "用户等人").replace("我", "用户")
    else:
        for pattern, replacement in _THIRD_PERSON_RE:
            text = pattern.sub(replacement, text)
    return text[:1].upper() + text[1:]


def absolute_date(resolved: ResolvedDate, *, chinese: bool) -> str:
    """The date as words that do not depend on when they are read (``May 2023``, ``2023年5月``)."""
    day = resolved.occurred_at.date()
    if chinese:
        return {
            "day": f"{day.year}年{day.month}月{day.day}日",
            "week": f"{day.year}年{day.month}月{day.day}日那一周",
            "month": f"{day.year}年{day.month}月",
            "year": f"{day.year}年",
        }[resolved.precision]
    return {
        "day": f"on {day.isoformat()}",
        "week": f"in the week of {day.isoformat()}",
        "month": f"in {day.strftime('%B')} {day.year}",
        "year": f"in {day.year}",
    }[resolved.precision]


_LEADING_PREPOSITION = re.compile(r"^(?:on|in|since|during|until|by)\s+", re.IGNORECASE)
_PREPOSITION_BEFORE = re.compile(
    r"\b(?:on|in|by|since|until|till|before|after|from|at|of|during)\s+$", re.IGNORECASE
)


def with_absolute_date(text: str, resolved: ResolvedDate) -> str:
    """``text`` with its date phrase replaced by the absolute date (``yesterday`` -> the day).

    A preposition the phrase starts with is kept (``since May`` -> ``since May 2023``).
    """
    at = text.find(resolved.phrase)
    if at == -1:
        return text
    chinese = has_cjk(resolved.phrase)
    words = absolute_date(resolved, chinese=chinese)
    if not chinese:
        preposition = _LEADING_PREPOSITION.match(resolved.phrase)
        bare = words.split(" ", 1)[1]
        if preposition:
            words = preposition[0] + bare
        elif _PREPOSITION_BEFORE.search(text[:at]):  # "by next Friday" -> "by 2023-05-12"
            words = bare
    return text[:at] + words + text[at + len(resolved.phrase) :]


def category_of(thing: str) -> str | None:
    """What kind of tool ``thing`` names (``database`` for "Postgres 16"), if it is a known one."""
    lowered = thing.casefold()
    for phrase, category in _CATEGORY_PHRASES.items():
        if phrase in lowered:
            return category
    if has_cjk(lowered):  # no spaces to split Chinese on: look for the names inside it
        for name, category in _CATEGORY_OF.items():
            if name in lowered and (
                has_cjk(name) or re.search(rf"(?<![a-z0-9]){re.escape(name)}(?![a-z0-9])", lowered)
            ):
                return category
    for word in re.findall(r"[\w.#+-]+", lowered):
        found = _CATEGORY_OF.get(word.strip(".")) or _CATEGORY_OF.get(word)
        if found is not None:
            return found
    return None

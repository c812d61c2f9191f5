"""What "it", "that" and "这个" point at: references in an input and candidates in recent turns.

The query rewriter's rules: ``find_references`` finds the pronouns and demonstratives of an
input that need an antecedent; ``candidates`` lists, for one recent message, the things it
names that a later "it" could mean (quoted terms, names, product and version tokens, Chinese
noun phrases ending in a head noun such as 方案). Precision matters more than recall here: a
wrong antecedent makes recall search for the wrong thing, while an unresolved reference only
makes it less sharp, so anything unsure is left to the model or to the original text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from memory.cards.phrasing import has_cjk
from memory.cards.rulebook import word_set

__all__ = ["Candidate", "Reference", "candidates", "find_references"]


@dataclass(frozen=True, slots=True)
class Reference:
    """One phrase of the input that refers back.

    Attributes:
        start: where the phrase starts in the input.
        end: where it ends.
        form: how a resolved name replaces it: ``plain`` (``it`` -> ``X``), ``possessive``
            (``its`` -> ``X's``), ``is`` (``it's`` -> ``X is``), ``chinese`` (replaced as is).
        head: the noun the phrase names, when it names one (``那个方案`` -> ``方案``): an
            antecedent with that head is preferred, and the head is kept when none has it.
    """

    start: int
    end: int
    form: str
    head: str = ""


@dataclass(frozen=True, slots=True)
class Candidate:
    """Something a message names that a later reference could mean.

    Attributes:
        term: the name as written (``Knowledge base A``, ``缓存方案``).
        leads: it opens its sentence, where the subject stands: the likeliest antecedent of a
            later "it" when the sentence names several things.
    """

    term: str
    leads: bool


_EXPLETIVE = re.compile(
    r"\bit(?:'s| is| was| would be| will be)\s+(?:possible|necessary|better|best|time|ok|okay|"
    r"fine|worth|true|likely|easy|hard|important|raining|late|early)\b|"
    r"\bit\s+(?:seems|looks like|depends|turns out)\b|"
    r"\b(?:is|was|would|will)\s+it\s+(?:be\s+)?(?:possible|necessary|better|best|ok|okay|fine|"
    r"worth|true|likely|easy|hard|important)\b",
    re.IGNORECASE,
)
_ENGLISH = re.compile(
    r"\b(?P<word>it's|its|it|they|them|their|this one|that one|this|that)\b(?P<after>\s*\S*)",
    re.IGNORECASE,
)
# "that" and "this" refer back when they stand alone: at the end, before a verb or a preposition.
_STANDALONE_AFTER = re.compile(
    r"^\s*(?:$|[?.!,;:]|(?:is|was|does|did|will|would|can|could|has|have|work|works|mean|means|"
    r"cost|costs|support|supports|handle|handles|for|in|on|with|to|from|at|by|when|if|and|or|"
    r"but)\b)",
    re.IGNORECASE,
)
_DO_BEFORE = re.compile(r"\b(?:do|does|did|doing|done)\s+$", re.IGNORECASE)
_AT_END = re.compile(r"^\s*(?:$|[?.!,;:])")
_FORMS = {"its": "possessive", "their": "possessive", "it's": "is"}
_CHINESE = re.compile(
    r"(?:[我你]?(?:上次|刚才|之前|前面|上面)(?:说|提到|讲|聊)?的|上面的)?"
    r"(?:(?P<demo>这个|那个|这些|那些|这种|那种)(?P<head>[\u4e00-\u9fff]{0,3}?)"
    r"(?=[的怎是能有呢吗要在可会还和用\s\u3002\uff0c\uff1f?,]|$)|(?P<it>它们的|它的|它们|它))"
    r"|(?:[我你]?(?:上次|刚才|之前|前面)(?:说|提到|讲|聊)的|上面的)(?P<head2>[\u4e00-\u9fff]{0,2})"
)


def find_references(text: str) -> list[Reference]:
    """The phrases of ``text`` that refer back to something said before, in order."""
    found: list[Reference] = []
    expletives = [match.span() for match in _EXPLETIVE.finditer(text)]
    for match in _ENGLISH.finditer(text):
        word = match["word"].lower()
        start, end = match.start("word"), match.end("word")
        if any(s <= start < e for s, e in expletives):
            continue  # "it's possible to ..." refers to nothing
        if word in ("this", "that") and (
            not _STANDALONE_AFTER.match(match["after"])
            or (_DO_BEFORE.search(text[:start]) and _AT_END.match(match["after"]))
        ):
            continue  # "that we ...", "this week", "why do that?": no thing is referred to
        found.append(Reference(start, end, _FORMS.get(word, "plain")))
    for match in _CHINESE.finditer(text):
        if not match[0]:
            continue
        head = match["head"] or match["head2"] or ""
        found.append(Reference(match.start(), match.end(), "chinese", head))
    return sorted(found, key=lambda reference: reference.start)


_QUOTED = re.compile(
    r"\"([^\"]{2,60})\"|“([^”]{1,60})”|《([^》]{1,60})》|「([^」]{1,60})」|'([^']{2,60})'"
)
_NOT_NAMES = word_set(
    """the a an this that these those it its i we you he she they my your our their what when
    where how why which who yes no sure ok okay let here there hi hello thanks thank great and
    but so also please do does did can could would should is are if in on for to with then
    now today tomorrow yesterday monday tuesday wednesday thursday friday saturday sunday
    january february march april may june july august september october november december
    good nice well first next last both all one use try compare pick choose take get see check
    about"""
)
# A name: capitalized words ("Knowledge Base", "New York"), or a noun and an identifier
# ("knowledge base A", "plan B", "option 2"), or a product token ("PostgreSQL", "GPT-4", "Node.js").
_NAME = re.compile(
    r"\b(?:[A-Za-z]+\s+){0,2}[a-z]+\s+(?:[A-Z]|\d{1,3})\b(?![\w-])"
    r"|\b[A-Z][\w.+#-]*(?:\s+[A-Z][\w.+#-]*){0,3}"
    r"|\b[a-z]+[A-Z0-9][\w.+#-]*"
)
_HEAD_NOUNS = (
    "方案", "系统", "项目", "数据库", "文件", "报告", "计划", "功能", "模型", "接口", "服务",
    "框架", "工具", "产品", "应用", "页面", "版本", "平台", "文档", "会议", "问题", "库",
)  # fmt: skip
_CJK_PHRASE = re.compile(
    # A Latin name first, so that 知识库A is one phrase rather than 知识库 and A.
    r"(?P<latin>[\u4e00-\u9fff]{0,4}[A-Za-z][A-Za-z0-9.+#-]*)"
    r"|(?P<lead>[\u4e00-\u9fff]{0,6}?)(?P<noun>" + "|".join(_HEAD_NOUNS) + r")"
)
# Characters that end the words before a noun phrase: particles, pronouns, common verbs.
_CJK_BREAK = re.compile(
    r".*[的了是用在和与把个这那我你他她它们说讨论提到聊过要想给对从用有为做被让吧吗呢啊\u3001\u3002\uff0c\uff1f\uff01\s]"
)
_DETERMINER = re.compile(r"^(?:the|a|an|my|our|your|their|this|that)\s+", re.IGNORECASE)


def candidates(text: str) -> list[Candidate]:
    """What ``text`` names that a later reference could mean, in order of appearance.

    Where two finds overlap, the longer one is kept (``Knowledge base A``, not ``Knowledge``).
    """
    found: list[tuple[int, int, str]] = []
    for match in _QUOTED.finditer(text):
        term = next(group for group in match.groups() if group)
        # A quoted term outranks any overlapping find: its span is widened to cover them.
        found.append((match.start(), match.end() + len(text), term.strip()))
    for match in _NAME.finditer(text):
        words = _DETERMINER.sub("", match[0].strip(" .,")).split()
        start = match.start()
        while words and words[0].lower() in _NOT_NAMES:
            start = text.find(words[1], start) if len(words) > 1 else start
            words = words[1:]
        if words:
            found.append((start, match.end(), " ".join(words)))
    if has_cjk(text):
        for match in _CJK_PHRASE.finditer(text):
            broken = _CJK_BREAK.match(match[0])
            phrase = match[0][broken.end() :] if broken else match[0]
            if phrase and (match["noun"] is None or len(phrase) > len(match["noun"])):
                found.append((match.end() - len(phrase), match.end(), phrase))
    kept = [
        (start, term)
        for start, end, term in found
        if not any(s <= start and end <= e and (e - s) > (end - start) for s, e, _ in found)
    ]
    seen: set[str] = set()
    ordered: list[Candidate] = []
    for start, term in sorted(kept):
        if term.casefold() not in seen and term.strip():
            seen.add(term.casefold())
            ordered.append(Candidate(term, _leads(text, start)))
    return ordered


_SENTENCE_OPENING = re.compile(
    r"(?:^|[.!?;:\n\u3002\uff01\uff1f\uff1b]\s*)(?:(?:the|a|an|our|my|我们的|我的|这个|那个)\s*)?[\"“《「']?$",
    re.IGNORECASE,
)


def _leads(text: str, start: int) -> bool:
    return _SENTENCE_OPENING.search(text[:start]) is not None

"""The offline extractor: cards from the user's own sentences by rules, in English and Chinese.

It is what extraction falls back to when no model is configured or every model failed, so it
favours precision: it reads only the user's messages (the assistant's statements are guesses
or proposals until the user confirms them), skips questions and chit-chat, and words each card
as a short statement in the sentence's own language. A dated sentence no rule reads becomes an
event with its date made absolute. A message that instructs the assistant or claims authority
gives no card at all (``memory.cards.claims``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime

from memory.cards.chinese import CHINESE_RULES
from memory.cards.claims import refuse_card
from memory.cards.dates import ResolvedDate, resolve_date
from memory.cards.english import ENGLISH_RULES
from memory.cards.everyday import EVERYDAY_CHINESE, EVERYDAY_ENGLISH
from memory.cards.model import ExtractedCard, SourceMessage, normalize_text
from memory.cards.phrasing import (
    absolute_date,
    has_cjk,
    is_question,
    split_sentences,
    third_person,
    with_absolute_date,
)
from memory.cards.rulebook import Finding
from memory.cards.supersede import TASK_PREFIX, task_attribute

__all__ = ["extract_by_rules"]

# The general rules first: the first rule to read a stretch of a sentence owns it.
_ENGLISH = (*ENGLISH_RULES, *EVERYDAY_ENGLISH)
_CHINESE = (*CHINESE_RULES, *EVERYDAY_CHINESE)

#: An event needs this many words (or Chinese characters) besides its date to say something.
MIN_EVENT_WORDS = 3
# How the user feels today is small talk, not an event worth remembering.
_SMALL_TALK = re.compile(
    r"\b(?:i'm|i am|i feel|feeling)\s+(?:a bit |a little |so |very |really |kind of |pretty )?"
    r"(?:tired|fine|good|great|ok|okay|bored|sleepy|busy|happy|sad|hungry|well)\b|"
    r"(?:有点|好|很|太)?(?:累|困|无聊|开心|饿|忙)(?:了|啊|呀)?$",
    re.IGNORECASE,
)


def extract_by_rules(messages: Iterable[SourceMessage]) -> list[ExtractedCard]:
    """Cards from the user's messages, in order; an identical card is kept once (the first)
    unless it is said again later: the later statement is what makes it current again ("I
    live in Lyon", "I live in Berlin", a day later "I live in Lyon").

    Args:
        messages: the batch, in the order they were said; only ``user`` messages are read.

    Returns:
        Drafts with the source message's time as ``observed_at`` and its index and id as the
        sources.
    """
    drafts: list[ExtractedCard] = []
    seen: set[tuple[str, datetime]] = set()
    for message in messages:
        if message.role != "user" or refuse_card(message.text, by="rules"):
            continue
        for sentence in split_sentences(message.text):
            for draft in _read(sentence, message):
                if (draft.normalized, message.time) not in seen:
                    seen.add((draft.normalized, message.time))
                    drafts.append(draft)
    return drafts


def _read(sentence: str, message: SourceMessage) -> list[ExtractedCard]:
    if is_question(sentence):
        return []
    rules = _CHINESE if has_cjk(sentence) else _ENGLISH
    findings: list[Finding] = []
    taken: list[tuple[int, int]] = []
    for rule in rules:
        for match in rule.pattern.finditer(sentence):
            # The first rule to read a stretch of the sentence owns it: "I'm a teacher" is an
            # occupation, not also a name.
            if any(match.start() < end and start < match.end() for start, end in taken):
                continue
            built = rule.build(match)
            if built is not None:
                findings.extend(built if isinstance(built, tuple) else (built,))
                taken.append(match.span())
    resolved = resolve_date(sentence, message.time)
    if not findings and resolved is not None:
        event = _event(sentence, resolved)
        findings = [event] if event is not None else []
    return [_draft(finding, resolved, message) for finding in findings]


def _event(sentence: str, resolved: ResolvedDate) -> Finding | None:
    rest = sentence.replace(resolved.phrase, " ")
    size = len(normalize_text(rest).replace(" ", "")) if has_cjk(rest) else len(rest.split())
    if size < MIN_EVENT_WORDS or _SMALL_TALK.search(rest):
        return None
    text = third_person(sentence.strip()).rstrip(".!\u3002\uff01")
    return Finding("event", text, "event", attribute=None)


def _draft(
    finding: Finding, resolved: ResolvedDate | None, message: SourceMessage
) -> ExtractedCard:
    text, attribute = finding.text, finding.attribute
    dated = resolved is not None
    if resolved is not None and resolved.phrase in text:
        # A relative date in a card would be wrong when read later: make it absolute.
        if attribute is not None and attribute.startswith(TASK_PREFIX):
            attribute = task_attribute(text.replace(resolved.phrase, " "))
        text = with_absolute_date(text, resolved)
        text = text[:1].upper() + text[1:]
    elif resolved is not None and finding.dated_by_sentence:
        text = _with_date_appended(text, resolved)
    else:
        dated = False  # the date belongs to another clause than this card's
    return ExtractedCard(
        type=finding.type,
        text=text,
        observed_at=message.time,
        topic=finding.topic,
        occurred_at=resolved.occurred_at if dated and resolved else None,
        precision=resolved.precision if dated and resolved else None,
        subject=finding.subject,
        attribute=attribute,
        source_indices=(message.index,),
        source_ids=(message.id,) if message.id is not None else (),
    )


def _with_date_appended(text: str, resolved: ResolvedDate) -> str:
    if has_cjk(text):
        words = absolute_date(resolved, chinese=True)
        return f"用户{words}{text[2:]}" if text.startswith("用户") else f"{words}{text}"
    return f"{text} {absolute_date(resolved, chinese=False)}"

"""Which way a date without a year points, read from the words around it, English and Chinese.

"Report due on 5 April", said in December, means the coming April; "on 5 April I moved" the
past one. ``lean_of`` reads the clause the date phrase stands in (then its sentence) for cues:

- **tense** (strong): ``will``, ``going to``, ``'re flying``, ``need to``; ``was``, ``had``,
  ``did``; 将, 要, 打算, 准备, 计划; 了, 过, 已经, 是…的. 约了 and 别忘了 are plans, not the past.
- **words** (weak, used when no tense cue is found): plans and deadlines (``due``,
  ``deadline``, ``appointment``, ``meeting``, ``flight``, a plan verb such as ``fly``, ``start``,
  ``launch``; 截止, 到期, 预约, 航班, 会议), ``by``/``for``/``until`` right before the date;
  verbs in the past (``moved``, ``went``, ``met``), ``since`` right before the date, 上周,
  去年, 昨天.

Within a kind, the cue nearest to the date phrase wins; a clause without cues defers to its
sentence, and a sentence without cues gets the caller's default (``nearest`` for a statement,
``backward`` for a question: a memory is mostly asked about the past). Cues are a heuristic:
"I was told the report is due on 5 April" reads as the past.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Literal

__all__ = ["Lean", "lean_of", "lean_reader"]

#: Where a date without a year (or a bare weekday) is looked for: the first one on or after
#: the day it was said, the last one on or before it, or the nearer of the two.
Lean = Literal["forward", "backward", "nearest"]

# A sentence ends at . ! ? ; before a space (not after a month's abbreviation: "3 Jan. we start"
# is one sentence), at the CJK marks and at line breaks; a clause also at commas and at the
# conjunctions that join two of them.
_SENTENCE_END = re.compile(r"[.!?;](?=\s|$)|[\u3002\uff01\uff1f\uff1b\n]")
_ABBREVIATED_MONTH = re.compile(r"\b(?:jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec)$", re.I)
_CLAUSE_END = re.compile(
    r"[,:\uff0c\uff1a\u3001]|\s(?:and|but|so|then|because|although|though|while|whereas)\s"
    r"|但是|可是|然后|所以|因为|而且|不过",
    re.IGNORECASE,
)

_Cue = tuple[re.Pattern[str], Lean]


def _cues(*pairs: tuple[str, Lean]) -> list[_Cue]:
    return [(re.compile(pattern, re.IGNORECASE), lean) for pattern, lean in pairs]


# Forms that are not a verb in the past although they end in -ed, or are a plan as much as
# the past ("the scheduled meeting").
_NOT_PAST = (
    "need|indeed|proceed|exceed|succeed|speed|feed|seed|breed|bleed|embed|shed|hundred|red|bed|"
    "wed|scheduled|planned|supposed|expected|excited|interested|tired|worried|based|used|"
    "related|concerned|booked"
)
# Words in -ing that are no verb: "there is nothing on 5 April".
_NOT_VERBS = r"(?:(?:some|no|any|every)?thing|during|morning|evening|king|ring|spring)"
_IRREGULAR_PAST = (
    "went|came|saw|met|got|left|flew|bought|sold|began|ate|took|gave|made|said|told|found|felt|"
    "heard|knew|lost|paid|ran|sent|spent|won|wrote|broke|drove|fell|forgot|held|kept|slept|spoke|"
    "stood|taught|thought|became|brought|built|caught|chose|drank|sat"
)
_PLAN_VERBS = (
    "fly|flies|leave|leaves|start|starts|begin|begins|arrive|arrives|return|returns|travel|"
    "travels|move|moves|visit|visits|launch|launches|submit|submits|depart|departs|meet|meets|"
    "retire|retires|graduate|graduates"
)

#: Tense and aspect: strong cues.
_TENSE = _cues(
    (
        r"\b(?:will|shall|won't|gonna|going\s+to|about\s+to|must|would\s+like\s+to|(?:plan(?:s|"
        r"ning)?|intend(?:s|ing)?|hop(?:es?|ing)|expect(?:s|ing)?|wants?|needs?|ha(?:ve|s))\s+to)\b"
        r"|'ll\b",
        "forward",
    ),
    # Present progressive with a date is a plan: "we're flying on 8 December".
    (rf"(?:\b(?:am|is|are)|'(?:m|re|s))\s+(?!{_NOT_VERBS}\b)\w{{2,}}ing\b", "forward"),
    (r"\b(?:was|were|wasn't|weren't|had|hadn't|did|didn't|used\s+to)\b", "backward"),
    (r"(?:预约|预定|预订|约好|约|订|买|别忘|不要忘|忘不)了", "forward"),
    (
        r"将要|将会|就要|快要|即将|打算|准备|计划|预计|(?<![重主只摘纲必])要(?!是)|将(?!军)",
        "forward",
    ),
    (r"会(?=[去来到在回])", "forward"),
    (r"(?<!为)(?<!除)(?<!算)(?<!罢)(?<!不)(?<!得)了(?![解不])", "backward"),
    (
        r"(?<=[去来到见做吃住搬买用看听玩学])过|已经|曾经|刚刚|刚才|(?<![不而])已|曾|当时|那时",
        "backward",
    ),
    (r"是[^\uff0c\u3002\uff01\uff1f,.!?]{0,40}的\s*$", "backward"),
)

#: Words about plans or the past: weak cues, read when no tense cue is found.
_WORDS = _cues(
    (
        r"\b(?:due|deadlines?|appointments?|meetings?|flights?|reservations?|interviews?|"
        r"check-?ups?|scheduled|upcoming|next|tomorrow|soon|remind\s+me|don't\s+forget)\b",
        "forward",
    ),
    (rf"\b(?:{_PLAN_VERBS})\b", "forward"),
    (
        r"截止|到期|期限|预约|预定|预订|航班|机票|会议|开会|面试|约会|提醒|记得|以后|之后|"
        r"明天|后天|下周|下星期|下礼拜|下个?月|明年|想|(?<!过)去(?![年世过了])",
        "forward",
    ),
    (rf"\b(?!(?:{_NOT_PAST})\b)[a-z]{{2,}}ed\b|\b(?:{_IRREGULAR_PAST})\b", "backward"),
    (r"\b(?:yesterday|last|ago|earlier|previously|already)\b", "backward"),
    (r"昨天|前天|上周|上星期|上礼拜|上个?月|去年|前年|以前", "backward"),
)

# A word right before the date: "by 31 March", "for 2 November", "since 12 December".
_BEFORE = _cues(
    (r"\b(?:by|for|until|till)(?:\s+the)?\s*$", "forward"),
    (r"\bsince(?:\s+the)?\s*$", "backward"),
)


#: How far from the phrase a cue is looked for, in characters either way.
_REACH = 200


def lean_reader(text: str, default: Lean) -> Callable[[tuple[int, int]], Lean]:
    """Reads which way each date phrase of ``text`` points (see the module docstring).

    ``lean_reader(text, default)(span)`` is the way of the phrase at ``span``
    (``match.span()``): the sentence and clause ends of ``text`` are found once for all its
    phrases.

    Args:
        text: the message, sentence or question the phrases are in.
        default: what a phrase whose sentence has no cue gets.
    """
    sentence_ends = [
        match.span()
        for match in _SENTENCE_END.finditer(text)
        if not (
            match[0] == "."
            and _ABBREVIATED_MONTH.search(text, max(match.start() - 5, 0), match.start())
        )
    ]
    clause_ends = sentence_ends + [match.span() for match in _CLAUSE_END.finditer(text)]

    def lean(span: tuple[int, int]) -> Lean:
        for start, end in (_scope(text, span, clause_ends), _scope(text, span, sentence_ends)):
            for kind in (_TENSE, _WORDS):
                found = _nearest(text, start, end, span, kind, before=kind is _WORDS)
                if found is not None:
                    return found
        return default

    return lean


def lean_of(text: str, span: tuple[int, int], default: Lean) -> Lean:
    """Which way the date phrase at ``span`` of ``text`` points (``lean_reader`` for one)."""
    return lean_reader(text, default)(span)


def _scope(text: str, span: tuple[int, int], ends: list[tuple[int, int]]) -> tuple[int, int]:
    """The stretch of ``text`` around ``span`` between the nearest ``ends`` (the phrase's own
    characters never end it), at most ``_REACH`` characters either way."""
    start = max((stop for _, stop in ends if stop <= span[0]), default=0)
    stop = min((begin for begin, _ in ends if begin >= span[1]), default=len(text))
    return max(start, span[0] - _REACH), min(stop, span[1] + _REACH)


def _nearest(
    text: str, start: int, end: int, span: tuple[int, int], cues: list[_Cue], *, before: bool
) -> Lean | None:
    """The lean of the cue nearest the phrase in ``text[start:end]``; ``None`` when there is
    none, or when the nearest cues point both ways."""
    found: list[tuple[int, int, int, Lean]] = []  # (distance, -length, start, lean)
    for pattern, lean in cues:
        for match in pattern.finditer(text, start, end):
            if span[0] <= match.start() and match.end() <= span[1]:
                continue  # the phrase's own words ("next" of "next Friday")
            distance = max(span[0] - match.end(), match.start() - span[1], 0)
            found.append((distance, match.start() - match.end(), match.start(), lean))
    if before:
        for pattern, lean in _BEFORE:
            word = pattern.search(text, start, span[0])
            if word is not None:
                found.append((0, word.start() - word.end(), word.start(), lean))
    # A cue inside a longer one is part of it: 了 of 约了 is a plan.
    found = [
        cue
        for cue in found
        if not any(
            other[2] <= cue[2] and cue[2] - cue[1] <= other[2] - other[1] and other[1] < cue[1]
            for other in found
        )
    ]
    if not found:
        return None
    closest = min(cue[0] for cue in found)
    leans = {cue[3] for cue in found if cue[0] == closest}
    return leans.pop() if len(leans) == 1 else None

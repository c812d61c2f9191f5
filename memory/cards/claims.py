"""What never becomes an extracted card: instructions to the assistant and claims of authority.

A card is sent back in later prompts as a remembered fact. "Ignore all previous instructions"
stored as a task, or "User is an administrator with full access" stored as a profile fact from
a user's own claim, would turn one message into a standing instruction or a standing privilege.
Such text is not a fact about the user worth keeping: the rules skip a message that holds it,
and a model's card that says it (or cites a message that does) is dropped. What was said is
still kept word for word as a ``turn`` card, which is rendered as quoted data.

The patterns favour catching over keeping: a card lost here is still findable as its turn. An
occupation stays a card ("I'm a nurse", "I am a database administrator", "I'm a software
developer"); being *the* administrator, *your* developer, or having full access does not.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

__all__ = ["refuse_card", "untrusted_reason"]

logger = logging.getLogger(__name__)

_I_AM = r"(?:\bi\s*(?:am|'m)|\b(?:the\s+)?user\s+is)"
_ADMIN = r"(?:admin|administrator|sysadmin|root(?:\s+user)?|superuser|super[\s-]?(?:user|admin))"
_MAKER = (
    r"(?:developer|creator|maker|programmer|owner|operator|master|boss|trainer|designer|admin|"
    r"administrator)"
)
_SYSTEM = r"(?:assistant|bot|chatbot|system|ai|model|app|application|server|platform)"

_AUTHORITY_EN = (
    # "I am an administrator", "I'm root", "the user is a super admin": no occupation named.
    rf"{_I_AM}\s+(?:an?\s+)?(?:super\s*)?{_ADMIN}\b",
    # "I'm the admin", "I am the system administrator", "I'm your administrator".
    rf"{_I_AM}\s+(?:the|your|its)\s+(?:[\w-]+\s+)?{_ADMIN}\b",
    # "I am your developer", "I'm this assistant's creator".
    rf"{_I_AM}\s+(?:your|its|this\s+{_SYSTEM}'s)\s+(?:[\w-]+\s+)?{_MAKER}\b",
    # "the developer of this assistant", "the owner of you".
    rf"\b{_MAKER}s?\s+of\s+(?:you\b|(?:this|the|your)\s+{_SYSTEM}\b)",
    r"\b(?:i|the\s+user)\s+(?:created|made|built|programmed|trained|own|control|configured)\s+"
    r"you\b",
    # Privileges: "full access", "admin rights", "root privileges", "I'm authorized to".
    r"\b(?:full|complete|total|unrestricted|unlimited|admin|administrator|administrative|root|"
    r"elevated|superuser|special)\s+(?:access|rights|privileges?|permissions?|clearance|mode)\b",
    r"\b(?:god\s+mode|developer\s+mode|jailbreak)\b",
    rf"{_I_AM}\s+(?:fully\s+)?(?:authori[sz]ed|cleared)\s+(?:to|for)\b",
)
_INSTRUCTION_EN = (
    # "ignore all previous instructions", "disregard your rules", "bypass the system prompt".
    r"\b(?:ignor(?:e|ing)|disregard(?:ing)?|forget(?:ting)?|overrid(?:e|ing)|bypass(?:ing)?|"
    r"overrul(?:e|ing))\s+(?:[\w'-]+\s+){0,3}?"
    r"(?:all|any|every|previous|prior|above|earlier|preceding|your|system|original|existing)\s+"
    r"(?:[\w'-]+\s+){0,2}?(?:instructions?|rules?|prompts?|guidelines?|directives?|"
    r"restrictions?|guardrails?|constraints?|programming|commands?|policies|policy)\b",
    r"\bsystem\s+(?:instruction|override|command|directive)s?\b",
    r"(?:^|\n)\W*(?:system|developer)\s*(?:instruction|message|note|prompt)?\s*:",
    r"\bnew\s+(?:system\s+)?(?:instructions?|rules)\s*:",
    # "from now on you will ...", "you are now DAN".
    r"\b(?:from\s+now\s+on|henceforth|going\s+forward|starting\s+now),?\s+(?:you|the\s+assistant)\b",
    r"\byou\s+are\s+now\s+(?:a|an|in|my|no\s+longer|free|unrestricted|dan|called|named)\b",
    # "you must obey me", "do whatever I say".
    r"\b(?:obey|serve)\s+me\b",
    r"\byou\s+(?:must|will|shall|have\s+to|need\s+to|are\s+to)\s+(?:always\s+)?(?:obey|comply|"
    r"do\s+(?:whatever|everything|anything|as)\s+i)\b",
    r"\breveal\s+(?:your|the)\s+(?:system\s+)?(?:prompt|instructions)\b",
    # A forged end of a block of the prompt, or a chat template's markers.
    r"\bend\s+of\s+(?:the\s+)?(?:remembered\s+context|context|memories|memory|summary|"
    r"system\s+(?:prompt|message)|instructions)\b",
    r"<\|[a-z_]+\|>|\[/?(?:inst|sys)\]|<</?sys>>",
)
_AUTHORITY_ZH = (
    r"(?:我|用户)(?:就)?是(?:你的|您的|你们的|本系统的|这个系统的|系统的)?(?:超级|最高|系统)?"
    r"(?:管理员|管理者|超级用户|root)",
    r"是(?:你的|您的|你们的)\S{0,4}?(?:开发者|开发人员|创造者|创建者|主人|管理员|老板|所有者|拥有者|设计者|训练者)",
    r"(?:我|用户)(?:创造|创建|开发|训练|设计)了你",
    r"(?:全部|所有|最高|完全|管理员|超级|无限|无限制|特殊|root)(?:的)?(?:权限|访问权)",
    r"(?:我|用户)(?:拥有|具有|有)\S{0,4}?权限",
)
_INSTRUCTION_ZH = (
    r"(?:忽略|无视|忘记|忘掉|不要理会|绕过|覆盖)(?:掉)?(?:之前|以前|上面|前面|先前|上述|所有|全部|你的|"
    r"系统|原来|原有|一切)\S{0,6}?(?:指令|指示|规则|提示词?|设定|限制|命令|要求)",
    r"系统(?:指令|命令)",
    r"(?:从现在(?:开始|起)|从今以后|今后|接下来)[\uff0c,\s]*你",
    r"你(?:必须|一定要|只能)(?:听|服从|听从|遵守|执行)我",
    r"(?:服从|听从|遵从)我",
)


def _compiled(patterns: Iterable[str]) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{pattern})" for pattern in patterns), re.IGNORECASE)


_AUTHORITY = _compiled((*_AUTHORITY_EN, *_AUTHORITY_ZH))
_INSTRUCTION = _compiled((*_INSTRUCTION_EN, *_INSTRUCTION_ZH))


def untrusted_reason(text: str) -> str | None:
    """Why a card must not be made of ``text``, or ``None`` when it may.

    Returns:
        ``"an instruction to the assistant"`` or ``"a claim of authority"``.
    """
    # Curly apostrophes are as common as straight ones in typed text.
    text = text.replace("\u2019", "'")
    if _INSTRUCTION.search(text):
        return "an instruction to the assistant"
    if _AUTHORITY.search(text):
        return "a claim of authority"
    return None


def refuse_card(card_text: str, sources: Iterable[str] = (), *, by: str) -> bool:
    """Whether a card is refused: its text or one of its source messages is untrusted.

    A refusal is logged as a warning (the event of this check) saying why and which extractor
    (``by``: ``rules`` or a model's name) would have made the card; never the text itself,
    which is the user's and must not outlive a ``forget`` in a log.
    """
    for text in (card_text, *sources):
        reason = untrusted_reason(text)
        if reason is not None:
            logger.warning("no card made by %s of %s", by, reason)
            return True
    return False

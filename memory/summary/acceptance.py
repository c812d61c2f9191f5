"""Whether a summariser reply may replace the stored summary: not a refusal, a summary, faithful.

A reply that fails any check is a failed attempt of the ``LLMChain`` (``LLMError``): the chain
retries, tries the fallback model, and when every attempt failed the old summary is kept with
the raw archive of the increment appended. So a bad reply costs a retry, never a memory.

The checks, in order:

1. **Refusal**: the reply opens like a refusal or an apology ("I'm sorry, but I can't help with
   that.", "As an AI ...", "I cannot assist ...").
2. **Shape**: plain notes were asked for. A reply that is JSON, sits in a code fence, echoes the
   request's labels ("Current summary:", "New messages:"), or is mostly ``role: text`` lines (a
   copy of the transcript) is not a summary.
3. **Retention**: the reply keeps at least ``min_retention`` (``SummarySettings``, one
   half) of the previous LLM summary's *key facts*: words that hold a digit (numbers, amounts,
   dates, times, order and flight ids such as ``#4471`` or ``TP1234``) and capitalised words
   inside a sentence (names, places, months). A fact counts as kept when the same word (any
   case) is in the reply. The previous summary is replaced, not appended to, so a reply that
   drops most of these has forgotten them for every later prompt. A previous summary with fewer
   than ``MIN_KEY_FACTS`` (3) key facts is not checked: a share of one or two words is too coarse
   to tell forgetting from rewording. Nor is a raw archive as the previous summary: it holds
   whole messages, most of which a summary rightly leaves out.
"""

from __future__ import annotations

import json
import re

from memory.errors import LLMError

__all__ = ["MIN_KEY_FACTS", "check_reply", "key_facts", "retention"]

#: The retention check needs at least this many key facts in the previous summary.
MIN_KEY_FACTS = 3

_REFUSAL = re.compile(
    r"""^\W*(?:
        (?:I\s*'?\s*a?m|I\s+am)\s+(?:so\s+|very\s+|truly\s+)?sorry
      | sorry\b
      | I\s+apologi[sz]e
      | I\s*(?:can\s*'?\s*not|can't|cannot|won't|will\s+not|am\s+not\s+able\s+to
              |'m\s+not\s+able\s+to|am\s+unable\s+to|'m\s+unable\s+to)
            \s+(?:help|assist|comply|provide|do|fulfil|fulfill|complete|summari[sz]e)
      | as\s+an\s+AI\b
      | unfortunately,?\s+I\s+(?:can|am|'m)
    )""",
    re.IGNORECASE | re.VERBOSE,
)
#: Lines of a rendered transcript start with a role (``tool <name>:`` for tool results).
_TRANSCRIPT_LINE = re.compile(r"^(?:user|assistant|system|developer|tool [^:\s]+):\s", re.I)
_REQUEST_LABELS = ("current summary:", "current summary (", "new messages:")
#: A word: letters and digits, with inner ``- / . : #`` kept so ids and dates stay whole.
_WORD = re.compile(r"#?\w(?:[\w\-/.:#]*\w)?")
#: What ends a sentence, so the capitalised word after it is not taken for a name.
_SENTENCE_END = re.compile(r"(?:^|[.!?:;\n]\s*|^\W+)$")


def check_reply(text: str, previous: str | None, *, min_retention: float) -> None:
    """Raise ``LLMError`` when ``text`` must not replace ``previous`` (see the module).

    Args:
        text: the reply, stripped.
        previous: the previous LLM summary, or ``None`` (none yet, or a raw archive).
        min_retention: the least share of ``previous``'s key facts the reply must keep.

    Raises:
        LLMError: the reply is a refusal, not a plain summary, or forgets most key facts.
    """
    # Typographic apostrophes are as common as plain ones in model output.
    if _REFUSAL.match(text.replace("\u2019", "'")):
        raise LLMError(f"the reply is a refusal: {text[:80]!r}")
    problem = _shape_problem(text)
    if problem:
        raise LLMError(f"the reply is not in the requested shape: {problem}")
    if previous is None:
        return
    facts = key_facts(previous)
    kept = retention(facts, text)
    if len(facts) >= MIN_KEY_FACTS and kept < min_retention:
        lost = sorted(facts - _words(text))[:5]
        raise LLMError(
            f"the reply keeps {kept:.0%} of the previous summary's {len(facts)} key facts "
            f"(at least {min_retention:.0%} required); lost e.g. {', '.join(lost)}"
        )


def key_facts(text: str) -> set[str]:
    """The key facts of a summary, case-folded: words with a digit, capitalised inner words."""
    facts: set[str] = set()
    for match in _WORD.finditer(text):
        word = match.group()
        if any(char.isdigit() for char in word) or (
            word[0].isupper()
            and word != "I"
            and not _SENTENCE_END.search(text[max(0, match.start() - 3) : match.start()])
        ):
            facts.add(word.casefold())
    return facts


def retention(facts: set[str], text: str) -> float:
    """The share of ``facts`` that ``text`` still holds (1.0 when there are none)."""
    if not facts:
        return 1.0
    return len(facts & _words(text)) / len(facts)


def _words(text: str) -> set[str]:
    return {match.group().casefold() for match in _WORD.finditer(text)}


def _shape_problem(text: str) -> str | None:
    if text.startswith("```"):
        return "a code block"
    if text[:1] in "{[":
        try:
            json.loads(text)
        except ValueError:
            pass
        else:
            return "JSON"
    lowered = text.casefold()
    if any(lowered.startswith(label) for label in _REQUEST_LABELS) or "\nnew messages:" in lowered:
        return "it repeats the request"
    lines = [line for line in text.splitlines() if line.strip()]
    copied = sum(1 for line in lines if _TRANSCRIPT_LINE.match(line))
    if lines and copied * 2 > len(lines):
        return "a copy of the transcript"
    return None

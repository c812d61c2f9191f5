"""Whether a question asks for several things: "What books has Melanie read?".

A question whose answer is a list ("What activities...", "Which cities has Jon visited?",
"What do Jon and Gina both...", "How many...") finds its answer across the conversation, a
line here and a line there, rarely in one place. Recall spends the budget on more lines for
those, each cut closer (``SearchConfig.several_close_cut_from``). English only, by rules on the
words as written; a question no rule knows is asked as any other.
"""

import re

__all__ = ["asks_for_several"]

# "What books has ...", "Which cities have ...", "What types of yoga does ...": a plural noun
# (not one ending in "ss" or an apostrophe) within the first three words after what/which,
# before the verb.
_PLURAL_ASKED = re.compile(
    r"^\s*(?:what|which)\s+(?:[\w+/'-]+\s+){0,2}?[a-z]+(?:ies|[^s'\s]s)\s+"
    r"(?:has|have|does|do|is|are|did)\b",
    re.IGNORECASE,
)
# "has Melanie read", "have Caroline and Melanie both painted": the present perfect sums up
# what happened over time.
_PERFECT = re.compile(
    r"\b(?:has|have)\s+(?:[\w]+(?:'s)?\s+){1,4}?"
    r"(?:\w+ed|done|been|read|seen|made|taken|bought|gone|had|met|written|gotten|got|won|lost"
    r"|given|held|run|sung|drawn|eaten|built|found|taught)\b",
    re.IGNORECASE,
)
_SEVERAL = re.compile(r"\b(?:both|in common|how many|names)\b", re.IGNORECASE)
# "How long has Melanie been painting?" asks for one duration.
_ONE_DURATION = re.compile(r"^\s*how\s+long\b", re.IGNORECASE)


def asks_for_several(question: str) -> bool:
    """Whether ``question`` asks for a list or a count of things said in several places."""
    if _ONE_DURATION.match(question):
        return False
    return bool(
        _PLURAL_ASKED.search(question) or _PERFECT.search(question) or _SEVERAL.search(question)
    )

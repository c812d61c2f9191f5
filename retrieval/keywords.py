"""Keyword analysis: text to search terms (English stems, CJK character bigrams).

Postgres's ``simple`` text-search configuration does not split Chinese or Japanese text (a whole
run of CJK characters becomes one lexeme), and only ``plpgsql`` and ``vector`` exist in the
embedded server, so terms are computed here, once, and stored as they are. The same function
analyses cards and queries, so a query matches exactly the terms a card was indexed with.
"""

import re
import threading
import unicodedata
from collections import Counter

import snowballstemmer

__all__ = ["STOP_WORDS", "analyze", "term_frequencies"]

#: English function words and question words, dropped from cards and queries alike. Short on
#: purpose: content words such as "time" or "name" stay, since questions turn on them.
STOP_WORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further
    had has have having he her here hers herself him himself his how i if in into is it its
    itself just me more most my myself no nor not of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself yourselves
    s t d ll m re ve y don didn doesn isn wasn weren aren hasn haven hadn won wouldn shouldn
    couldn also oh yeah hey hi wow really its it's im i'm
    """.split()  # noqa: SIM905 (one word list, readable as prose)
)

# A run of letters/digits (with inner apostrophes), or a run of CJK characters.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_TOKEN = re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+(?:'[^\W_{_CJK}]+)*")
_CJK_RUN = re.compile(rf"^[{_CJK}]+$")


_local = threading.local()

#: Stems each thread remembers: a conversation's words repeat, and the Snowball stemmer (pure
#: Python) took 40% of archiving a long session, 0.15 ms a word (``benchmarks/archive.py``).
_REMEMBERED_STEMS = 50_000


def _stemmer() -> snowballstemmer.stemmer:
    # One per thread, built lazily: a Snowball stemmer keeps its word in instance state, so
    # threads sharing one corrupt each other's words (IndexError inside stemWord).
    stemmer: snowballstemmer.stemmer | None = getattr(_local, "stemmer", None)
    if stemmer is None:
        stemmer = _local.stemmer = snowballstemmer.stemmer("english")
    return stemmer


def _stem(word: str) -> str:
    """The Snowball stem of a word, remembered by this thread (forgotten all at once when
    ``_REMEMBERED_STEMS`` are held)."""
    stems: dict[str, str] | None = getattr(_local, "stems", None)
    if stems is None:
        stems = _local.stems = {}
    stem = stems.get(word)
    if stem is None:
        if len(stems) >= _REMEMBERED_STEMS:
            stems.clear()
        stem = stems[word] = _stemmer().stemWord(word)
    return stem


def analyze(text: str) -> list[str]:
    """Split text into search terms, in order, repeats kept.

    Latin-script words are lower-cased, stripped of possessive ``'s``, dropped when they are stop
    words, and stemmed with the Snowball English stemmer; a run of CJK characters becomes its
    overlapping character bigrams (a lone character stays a unigram), since Chinese has no spaces
    and word segmentation would need a dictionary.

    Args:
        text: Any text.

    Returns:
        The terms, e.g. ``["caroline", "research", "adopt", "agenc"]``.
    """
    normalized = unicodedata.normalize("NFKC", text).lower().replace("\u2019", "'")
    words: list[str] = []
    for token in _TOKEN.findall(normalized):
        if _CJK_RUN.match(token):
            words.extend(_bigrams(token))
            continue
        if token.endswith("'s"):
            token = token[:-2]
        token = token.replace("'", "")
        if token and token not in STOP_WORDS:
            words.append(token)
    return [word if _CJK_RUN.match(word) else _stem(word) for word in words]


def term_frequencies(text: str) -> dict[str, int]:
    """Count the search terms of a text.

    Args:
        text: Any text.

    Returns:
        Each distinct term with how often it occurs.
    """
    return dict(Counter(analyze(text)))


def _bigrams(run: str) -> list[str]:
    """Return the overlapping character bigrams of a CJK run (the run itself when one long)."""
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]

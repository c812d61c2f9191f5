"""Keyword analysis: text to search terms (English stems, CJK character bigrams).

Postgres's ``simple`` text-search configuration does not split Chinese or Japanese text (a whole
run of CJK characters becomes one lexeme), and only ``plpgsql`` and ``vector`` exist in the
embedded server, so terms are computed here, once, and stored as they are. The same function
analyses cards and queries, so a query matches exactly the terms a card was indexed with.
"""

import re
import threading
import unicodedata
import weakref
from collections import Counter

import snowballstemmer

from retrieval.held_texts import hold_texts
from retrieval.recipe import STOP_WORDS

__all__ = ["STOP_WORDS", "analyze", "is_cjk_term", "term_frequencies"]

# A run of letters/digits (with inner apostrophes), or a run of CJK characters.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_TOKEN = re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+(?:'[^\W_{_CJK}]+)*")
_CJK_RUN = re.compile(rf"^[{_CJK}]+$")
#: The lowest character of ``_CJK``: a token starting below it is no CJK run.
_CJK_LOWEST = "\u3040"
#: ``_TOKEN`` over ASCII text, where a letter or digit is one of these: twice as fast.
_ASCII_TOKEN = re.compile(r"[a-zA-Z0-9]+(?:'[a-zA-Z0-9]+)*")


_local = threading.local()

#: Stems each thread remembers: a conversation's words repeat, and a dictionary look-up is
#: cheaper than a call into the stemmer even in C.
_REMEMBERED_STEMS = 50_000


class _ThreadStems:
    """One thread's remembered stems (a plain dict, the fastest look-up), in an object the
    list of every thread's can refer to weakly: it goes when its thread does."""

    __slots__ = ("__weakref__", "by_word")

    def __init__(self) -> None:
        self.by_word: dict[str, str] = {}


_every_thread_stems: weakref.WeakSet[_ThreadStems] = weakref.WeakSet()
_every_thread_lock = threading.Lock()


def _forget_stems(_user_id: str) -> None:
    """Empty every thread's remembered stems: they are words users wrote (a name among
    them), by word, not by user."""
    with _every_thread_lock:
        held = list(_every_thread_stems)
    for stems in held:
        stems.by_word.clear()  # one atomic call: its thread at worst stems a word again


hold_texts(_forget_stems)


def _stemmer() -> snowballstemmer.stemmer:
    # ``snowballstemmer.stemmer`` is PyStemmer's C Snowball when it is installed (a dependency):
    # the same stems as the pure-Python one (tests/retrieval/test_keywords.py), 60-120x faster;
    # the pure one took 40% of archiving a long session, and 32 us a new word of the recalled
    # lines (BENCHMARKS.md, "The work after the query vector"). One per thread, built lazily:
    # either keeps its word in instance state, so threads sharing one corrupt each other's.
    stemmer: snowballstemmer.stemmer | None = getattr(_local, "stemmer", None)
    if stemmer is None:
        stemmer = _local.stemmer = snowballstemmer.stemmer("english")
        if hasattr(stemmer, "maxCacheSize"):
            # PyStemmer's own cache of words is off: the thread's stems (``_stems``) are
            # looked up before it anyway, and a forget empties those, not it.
            stemmer.maxCacheSize = 0
    return stemmer


def _stems() -> dict[str, str]:
    """The stems this thread remembers, by word."""
    stems: _ThreadStems | None = getattr(_local, "stems", None)
    if stems is None:
        stems = _local.stems = _ThreadStems()
        with _every_thread_lock:
            _every_thread_stems.add(stems)
    return stems.by_word


def _stem(word: str) -> str:
    """The Snowball stem of a word, remembered by this thread (forgotten all at once when
    ``_REMEMBERED_STEMS`` are held)."""
    stems = _stems()
    stem = stems.get(word)
    if stem is None:
        if len(stems) >= _REMEMBERED_STEMS:
            stems.clear()
        stem = stems[word] = _stemmer().stemWord(word)
    return stem


def analyze(text: str, stop_words: frozenset[str] = STOP_WORDS) -> list[str]:
    """Split text into search terms, in order, repeats kept.

    Latin-script words are lower-cased, stripped of possessive ``'s``, dropped when they are stop
    words, and stemmed with the Snowball English stemmer; a run of CJK characters becomes its
    overlapping character bigrams (a lone character stays a unigram), since Chinese has no spaces
    and word segmentation would need a dictionary.

    Args:
        text: Any text.
        stop_words: The words to drop (the search recipe's, ``SearchConfig.stop_words``).

    Returns:
        The terms, e.g. ``["caroline", "research", "adopt", "agenc"]``.
    """
    normalized = unicodedata.normalize("NFKC", text).lower().replace("\u2019", "'")
    # Recall analyses every line it weighs, most of them new (30 us a line took half of its
    # excerpts' CPU), so the loop skips what cannot apply: a token is a CJK run or holds no CJK
    # character (``_TOKEN``), so only one starting at or above the first CJK block can be a
    # run; a token without an apostrophe has no possessive; a stem remembered is looked up
    # here, without a call; ASCII text is split by an ASCII pattern. The same terms: the
    # benchmark's messages took 29 us each, 13 so (alternating in one process).
    stems = _stems()
    terms: list[str] = []
    tokens = _ASCII_TOKEN if normalized.isascii() else _TOKEN
    for token in tokens.findall(normalized):
        if token[0] >= _CJK_LOWEST and _CJK_RUN.match(token):
            terms.extend(_bigrams(token))
            continue
        if "'" in token:
            if token.endswith("'s"):
                token = token[:-2]
            token = token.replace("'", "")
        if token and token not in stop_words:
            stem = stems.get(token)
            terms.append(stem if stem is not None else _stem(token))
    return terms


def is_cjk_term(term: str) -> bool:
    """Whether a search term is CJK text (a character bigram, or a lone character)."""
    return bool(_CJK_RUN.match(term))


def term_frequencies(text: str, stop_words: frozenset[str] = STOP_WORDS) -> dict[str, int]:
    """Count the search terms of a text.

    Args:
        text: Any text.
        stop_words: The words to drop (see ``analyze``).

    Returns:
        Each distinct term with how often it occurs.
    """
    return dict(Counter(analyze(text, stop_words)))


def _bigrams(run: str) -> list[str]:
    """Return the overlapping character bigrams of a CJK run (the run itself when one long)."""
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]

"""A line's text for recall: its terms, its sentences, whether it asks, and the line cut to
what the query asks for (``retrieval.excerpts``)."""

import re
from collections.abc import Callable
from functools import lru_cache

from retrieval.held_texts import hold_cache
from retrieval.keywords import analyze
from retrieval.recipe import SearchConfig

__all__ = ["asks", "bare_question", "cut_line", "line_terms", "sentences_of"]

# The end of a sentence: its mark(s), then a space or the end; a full-width CJK mark anywhere.
_SENTENCE_END = re.compile(r"[.!?]+(?=\s|$)|[\u3002\uff01\uff1f]+")


@hold_cache  # emptied by a forget: its texts' caches, holding the lines themselves, go with it
@lru_cache(maxsize=8)
def _remembered_terms(stop_words: frozenset[str]) -> Callable[[str], tuple[str, ...]]:
    """A text's distinct terms under ``stop_words``, remembered for the 4,096 texts last asked.

    Remembered: the same cards come back request after request, and stemming is Python. As a
    tuple of strings keyed by the text alone, which the garbage collector stops tracking at its
    first pass over them (a frozenset, or a key holding the stop words' frozenset, it tracks
    for as long as they live): a cache that stays full is walked by every full collection, and
    each entry it takes in is promoted until one is due (``benchmarks/gc_pauses.py``).
    """

    @lru_cache(maxsize=4096)
    def terms(text: str) -> tuple[str, ...]:
        return tuple(dict.fromkeys(analyze(text, stop_words)))

    return terms


def line_terms(text: str, config: SearchConfig) -> tuple[str, ...]:
    """A text's distinct search terms under the recipe's stop words, in the order they first
    occur (remembered): test them against a set of terms with ``isdisjoint``,
    ``intersection``."""
    return _remembered_terms(config.stop_words)(text)


def cut_line(text: str, wanted: set[str], config: SearchConfig) -> str | None:
    """A turn line cut to its sentences that hold the query's terms and the recipe's
    ``sentences_before`` and ``sentences_after`` around each (``…`` for each run of sentences
    left out), or to its first ``context_sentences`` when none does; ``None`` when nothing
    would be cut."""
    speaker, colon, said = text.partition(": ")
    if not colon:
        speaker, said = "", text
    sentences = sentences_of(said)
    if len(sentences) < 2:
        return None
    holds = [not wanted.isdisjoint(line_terms(sentence, config)) for sentence in sentences]
    if not any(holds):
        if not config.context_sentences:
            return None
        keep = [i < config.context_sentences for i in range(len(sentences))]
    else:
        # A sentence that names the topic is often next to the one that answers ("I loved
        # "Brave" by Sara Bareilles. It's about being courageous."): keep its neighbours too.
        before, after = config.sentences_before, config.sentences_after
        keep = [any(holds[max(0, i - after) : i + before + 1]) for i in range(len(sentences))]
    if all(keep):
        return None
    parts: list[str] = []
    for sentence, kept in zip(sentences, keep, strict=True):
        if kept:
            parts.append(sentence)
        elif not parts or parts[-1] != "…":
            parts.append("…")
    body = " ".join(parts)
    return f"{speaker}: {body}" if speaker else body


def sentences_of(text: str) -> list[str]:
    """A text's sentences (each with its end mark), a shared image's caption one of them."""
    pieces: list[str] = []
    start = 0
    for end in _SENTENCE_END.finditer(text):
        piece = text[start : end.end()].strip()
        if piece:
            pieces.append(piece)
        start = end.end()
    rest = text[start:].strip()
    if rest:
        pieces.append(rest)
    return pieces


def bare_question(text: str) -> bool:
    """Whether a line is a question and nothing else (one sentence, ending with ``?``)."""
    said = text.split(": ", 1)[-1]
    return asks(said) and len(_SENTENCE_END.findall(said.rstrip())) == 1


def asks(text: str) -> bool:
    """Whether a line asks rather than tells: it ends with a question mark."""
    return text.rstrip().endswith(("?", "\uff1f"))  # and the full-width one of CJK text

"""Tests of keyword analysis: English stems and stop words, CJK bigrams."""

import re
import unicodedata
from pathlib import Path

import Stemmer
from hypothesis import given
from hypothesis import strategies as st
from snowballstemmer.english_stemmer import EnglishStemmer

from retrieval import analyze, term_frequencies
from retrieval.keywords import _CJK_RUN, _TOKEN, STOP_WORDS, _bigrams, _stemmer


def test_english_is_stemmed_and_stop_words_dropped() -> None:
    assert analyze("What did Caroline research? She's researching adoption agencies!") == [
        "carolin",
        "research",
        "research",
        "adopt",
        "agenc",
    ]


def test_possessives_and_curly_apostrophes() -> None:
    assert analyze("Melanie\u2019s kids") == analyze("melanie's kid") == ["melani", "kid"]


def test_chinese_becomes_character_bigrams() -> None:
    assert analyze("我们用的是Postgres数据库") == [
        "我们",
        "们用",
        "用的",
        "的是",
        "postgr",
        "数据",
        "据库",
    ]
    assert analyze("猫") == ["猫"]


def test_a_chinese_query_shares_terms_with_the_card_it_asks_about() -> None:
    card = set(analyze("我上次说的那个方案是用向量数据库做检索"))
    query = set(analyze("那个方案用的什么数据库"))
    assert {"方案", "数据", "据库"} <= card & query


def test_term_frequencies_count_repeats() -> None:
    assert term_frequencies("tea, tea and more tea") == {"tea": 3}


@given(st.text())
def test_analysis_is_deterministic_and_never_yields_empty_terms(text: str) -> None:
    terms = analyze(text)
    assert terms == analyze(text)
    assert all(terms)


def test_the_stemmer_is_snowball_in_c_with_the_pure_python_stems() -> None:
    # Stored terms were stemmed by the pure-Python Snowball: the C one must agree word for word.
    assert isinstance(_stemmer(), Stemmer.Stemmer)
    root = Path(__file__).resolve().parents[2]
    text = " ".join(p.read_text(encoding="utf-8") for p in (root / "docs").glob("*.md"))
    words = sorted({w.lower() for w in re.findall(r"[A-Za-z]+(?:'[A-Za-z]+)*", text)})
    words += ["generously", "dying", "skies", "news", "innings", "succeeding", "cañón", "naïve"]
    assert len(words) > 2_000
    pure = EnglishStemmer()
    assert [_stemmer().stemWord(w) for w in words] == [pure.stemWord(w) for w in words]


def _analyzed_plainly(text: str) -> list[str]:
    """``analyze`` as its docstring says it, step by step, without its shortcuts."""
    terms: list[str] = []
    normalized = unicodedata.normalize("NFKC", text).lower().replace("\u2019", "'")
    for token in _TOKEN.findall(normalized):
        if _CJK_RUN.match(token):
            terms.extend(_bigrams(token))
            continue
        if token.endswith("'s"):
            token = token[:-2]
        token = token.replace("'", "")
        if token and token not in STOP_WORDS:
            terms.append(_stemmer().stemWord(token))
    return terms


# Pieces of text joined: Latin words, apostrophes (straight, curly, possessive), runs of CJK,
# kana and Hangul, other scripts below and above the CJK blocks, full-width forms and
# ligatures NFKC folds, digits, punctuation, stop words; and any characters between them.
_PIECES = [" ", "Lyon's", "O'Neil", "rock'n'roll", "it\u2019s", "'tea'", "researching", "the",
           "のアカ", "猫们用的", "한국어", "\u0416\u0436", "\u0e01\u0e02", "\uff21\uff42",
           "\ufb01sh", "caf\u00e9", ",", "?", "3rd", "_"]  # fmt: skip
_MIXED = st.lists(st.sampled_from(_PIECES) | st.text(max_size=3), max_size=12).map("".join)


@given(_MIXED)
def test_the_shortcuts_of_analysis_give_the_plain_rules_terms(text: str) -> None:
    assert analyze(text) == _analyzed_plainly(text)
    assert analyze(text) == _analyzed_plainly(text)  # stems remembered now

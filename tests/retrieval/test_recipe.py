"""``SearchConfig``: one named recipe, and the measured relevance gate per embedder."""

import pytest
from pydantic import ValidationError

from retrieval import (
    DEFAULT_SEARCH,
    HASHING_NAME,
    MINILM_INT8_NAME,
    MINILM_NAME,
    STOP_WORDS,
    HashingEmbedder,
    SearchConfig,
    analyze,
    search_config_for,
)


def test_the_gate_is_measured_per_embedder() -> None:
    assert search_config_for(MINILM_NAME).min_similarity == 0.30
    # int8 moves query-card cosines by 0.013 (std): the same gate (BENCHMARKS.md, "An int8
    # MiniLM, opt-in").
    assert search_config_for(MINILM_INT8_NAME).min_similarity == 0.30
    assert search_config_for(HashingEmbedder()).min_similarity == 0.20
    assert HashingEmbedder().name == HASHING_NAME
    # The hashing fake named as MiniLM (tests sharing a database) is still the fake.
    assert search_config_for(HashingEmbedder(name=MINILM_NAME)).min_similarity == 0.20
    # No number for a scale nobody measured.
    assert search_config_for("text-embedding-3-small").min_similarity is None
    assert search_config_for(MINILM_NAME).model_copy(update={"min_similarity": None}) == (
        DEFAULT_SEARCH
    )


def test_the_recipe_holds_what_was_tuned() -> None:
    assert DEFAULT_SEARCH.keyword_weight == 2.0
    assert DEFAULT_SEARCH.stop_words is STOP_WORDS
    # Measured on the tuned three at 1,024 tokens (BENCHMARKS.md): lines cut two sentences
    # from what matches (a line matching nowhere whole), the budget spent past a line that
    # does not fit, the named speaker's lines first, 100 cards weighed.
    assert DEFAULT_SEARCH.trim_lines and DEFAULT_SEARCH.fill_budget
    assert (DEFAULT_SEARCH.sentences_before, DEFAULT_SEARCH.sentences_after) == (2, 2)
    assert (DEFAULT_SEARCH.context_sentences, DEFAULT_SEARCH.line_speaker) == (0, 0.5)
    assert DEFAULT_SEARCH.excerpt_cards == 100
    assert "conv-42" in DEFAULT_SEARCH.tuned_on  # and says what it was checked on
    with pytest.raises(ValidationError):
        SearchConfig(rrf_k=0)
    with pytest.raises(ValidationError):
        SearchConfig(surprise=1)  # type: ignore[call-arg]


def test_stop_words_come_from_the_recipe() -> None:
    assert analyze("what is the weather") == ["weather"]
    assert analyze("what is the weather", frozenset({"weather"})) == ["what", "is", "the"]

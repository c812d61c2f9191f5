"""Tests of ``PrefetchingEmbedder``: a query embedded ahead of its search, or as before."""

from pathlib import Path

import pytest

from retrieval import (
    EmbeddingError,
    HashingEmbedder,
    PrefetchingEmbedder,
    SentenceTransformerEmbedder,
)


def test_a_prefetched_text_is_embedded_once_ahead_and_handed_over() -> None:
    inner = HashingEmbedder()
    embedder = PrefetchingEmbedder(inner)

    embedder.prefetch("what is my daughter's name?")
    assert embedder.pending == 1
    [vector] = embedder.embed(["what is my daughter's name?"])

    assert vector == inner.embed(["what is my daughter's name?"])[0]
    assert (embedder.pending, embedder.handed_over) == (0, 1)
    assert (embedder.name, embedder.dimension) == (inner.name, inner.dimension)


def test_other_texts_and_batches_pass_through() -> None:
    inner = HashingEmbedder()
    embedder = PrefetchingEmbedder(inner)
    embedder.prefetch("the input")

    assert embedder.embed(["a rewritten query"]) == inner.embed(["a rewritten query"])
    assert embedder.embed(["the input", "another"]) == inner.embed(["the input", "another"])
    assert embedder.embed([]) == []
    assert (embedder.pending, embedder.handed_over) == (1, 0)  # waiting for its own search


def test_texts_never_searched_are_dropped_oldest_first() -> None:
    embedder = PrefetchingEmbedder(HashingEmbedder(), max_pending=2)
    for text in ("one", "two", "three", "three"):
        embedder.prefetch(text)

    assert embedder.pending == 2
    assert embedder.embed(["two"]) == HashingEmbedder().embed(["two"])
    assert embedder.pending == 1


def test_a_failing_model_fails_the_embed_not_the_prefetch(tmp_path: Path) -> None:
    embedder = PrefetchingEmbedder(SentenceTransformerEmbedder(path=tmp_path / "nothing"))

    embedder.prefetch("hello")  # no error here: the caller goes on storing the input

    with pytest.raises(EmbeddingError, match="cannot load"):
        embedder.embed(["hello"])
    assert embedder.pending == 0

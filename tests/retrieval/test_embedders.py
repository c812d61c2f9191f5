"""Tests of the embedders: the fake, OpenAI-compatible (mock transport), and the real MiniLM."""

import json
import math
import threading
from pathlib import Path

import httpx
import openai
import pytest

from retrieval import (
    Embedder,
    EmbeddingError,
    HashingEmbedder,
    OpenAIEmbedder,
    SentenceTransformerEmbedder,
)
from retrieval import sentence_transformer as st_module
from retrieval.sentence_transformer import DEFAULT_TORCH_THREADS


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_hashing_embedder_is_deterministic_normalized_and_word_based() -> None:
    fake = HashingEmbedder(16)
    first, same, other = fake.embed(["tea with milk", "Milk with TEA", "postgres"])

    assert isinstance(fake, Embedder)
    assert first == same
    assert math.isclose(math.fsum(v * v for v in first), 1.0)
    assert cosine(first, other) < cosine(first, same)


def openai_client(handler: httpx.MockTransport) -> openai.OpenAI:
    return openai.OpenAI(
        api_key="test",
        base_url="http://embeddings.test/v1",
        http_client=httpx.Client(transport=handler),
        max_retries=0,
    )


def test_openai_embedder_batches_orders_and_normalizes() -> None:
    batches: list[list[str]] = []

    def respond(request: httpx.Request) -> httpx.Response:
        texts = json.loads(request.content)["input"]
        batches.append(texts)
        # Answer out of order, unnormalized: the embedder must sort and normalize.
        data = [
            {"object": "embedding", "index": i, "embedding": [float(len(t)), 0.0, 0.0]}
            for i, t in reversed(list(enumerate(texts)))
        ]
        return httpx.Response(
            200,
            json={
                "object": "list",
                "data": data,
                "model": "m",
                "usage": {"prompt_tokens": 1, "total_tokens": 1},
            },
        )

    embedder = OpenAIEmbedder(
        openai_client(httpx.MockTransport(respond)), "m", dimension=3, batch_size=2
    )

    vectors = embedder.embed(["a", "bb", "ccc"])

    assert batches == [["a", "bb"], ["ccc"]]
    assert vectors == [[1.0, 0.0, 0.0]] * 3
    assert (embedder.name, embedder.dimension) == ("m", 3)


def test_openai_embedder_wraps_api_errors_and_checks_the_dimension() -> None:
    failing = OpenAIEmbedder(
        openai_client(httpx.MockTransport(lambda r: httpx.Response(500, json={}))),
        "m",
        dimension=3,
    )
    with pytest.raises(EmbeddingError, match="embedding with m failed") as raised:
        failing.embed(["a"])
    assert isinstance(raised.value.__cause__, openai.OpenAIError)

    short = OpenAIEmbedder(
        openai_client(
            httpx.MockTransport(
                lambda r: httpx.Response(
                    200,
                    json={
                        "object": "list",
                        "model": "m",
                        "data": [{"object": "embedding", "index": 0, "embedding": [1.0]}],
                        "usage": {"prompt_tokens": 1, "total_tokens": 1},
                    },
                )
            )
        ),
        "m",
        dimension=3,
    )
    with pytest.raises(EmbeddingError, match="1 dimensions, expected 3"):
        short.embed(["a"])


@pytest.mark.slow
def test_minilm_is_loaded_once_and_embeds_meaning(minilm: SentenceTransformerEmbedder) -> None:
    results: list[list[list[float]]] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(
                SentenceTransformerEmbedder().embed(
                    ["My daughter is called Emma.", "What is my daughter's name?", "GPU prices"]
                )
            )
        )
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(st_module._models) == 1
    [statement, question, unrelated] = results[0]
    assert len(statement) == minilm.dimension == 384
    assert math.isclose(math.fsum(v * v for v in statement), 1.0, rel_tol=1e-5)
    assert cosine(statement, question) > cosine(statement, unrelated) + 0.2
    assert minilm.embed([]) == []


def test_minilm_vectors_are_what_sentence_transformers_encode_gives(
    minilm: SentenceTransformerEmbedder,
) -> None:
    # Embedded in batches of 2, longest first, back in the caller's order; truncated like
    # ``encode`` past the model's 256 tokens.
    texts = ["", "hi", "我叫李雷。我住在上海。", "word " * 600, "What did we decide last week?"]
    small_batches = SentenceTransformerEmbedder(batch_size=2)

    vectors = small_batches.embed(texts)  # loads the model, whatever ran before

    model = st_module._models[str(small_batches._model_path())]
    encoded = model.encode(texts, normalize_embeddings=True, convert_to_numpy=True)

    assert len(vectors) == len(texts)
    for vector, expected in zip(vectors, encoded.tolist(), strict=True):
        assert vector == pytest.approx(expected, abs=1e-6)


def test_a_missing_model_folder_is_an_embedding_error(tmp_path: Path) -> None:
    with pytest.raises(EmbeddingError, match="cannot load"):
        SentenceTransformerEmbedder(path=tmp_path / "nothing").embed(["x"])


def test_loading_minilm_leaves_torch_its_own_thread_count_by_default(
    minilm: SentenceTransformerEmbedder,
) -> None:
    import torch

    before = torch.get_num_threads()
    minilm.embed(["one short query"])

    assert DEFAULT_TORCH_THREADS is None
    assert torch.get_num_threads() == before


def test_fewer_than_one_torch_thread_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="threads must be at least 1, not 0"):
        SentenceTransformerEmbedder(threads=0)

"""MiniLM's int8 weights: quantized from the exported file, checked, kept apart, never torch.

The fp32 file the run built (``onnx_race``, then in the run's user cache) is copied into a
folder of each test's own, so every test quantizes (about a second) without exporting again.
"""

import shutil
from pathlib import Path

import pytest
from child_process import TESTS, race

from retrieval import (
    MINILM_INT8_NAME,
    MINILM_NAME,
    EmbeddingError,
    OnnxEmbedder,
    onnx_int8,
    onnx_minilm,
)
from retrieval.onnx_export import PROBE_TEXTS, default_cache_dir, model_key
from retrieval.onnx_int8 import INT8_MIN_COSINE, int8_key
from retrieval.sentence_transformer import packaged_model_path

TEXTS = [
    "Where do I live now?",
    "What did Caroline research about adoption agencies last week?",
    "我搬到柏林了，我的狗叫小白。下个月五号交报告。",  # noqa: RUF001 (Chinese)
    "The deploy of the checkout service changed the retry policy. " * 40,  # past the window
]


@pytest.fixture
def cache(onnx_race: tuple[Path, list[str]], tmp_path: Path) -> Path:
    """A cache folder holding only the exported fp32 file."""
    name = f"minilm-{model_key(packaged_model_path())[:24]}.onnx"
    folder = tmp_path / "onnx"
    folder.mkdir()
    shutil.copyfile(default_cache_dir() / name, folder / name)
    return folder


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


@pytest.mark.slow
def test_int8_vectors_are_near_the_fp32_ones_under_a_name_of_their_own(cache: Path) -> None:
    fp32 = OnnxEmbedder(cache_dir=cache)
    int8 = OnnxEmbedder(cache_dir=cache, int8=True)

    reference = fp32.embed(TEXTS)
    batched = int8.embed(TEXTS)
    one_by_one = [vector for text in TEXTS for vector in int8.embed([text])]

    assert int8.runtime == "onnx"
    for vectors in (batched, one_by_one):
        cosines = [cosine(a, b) for a, b in zip(vectors, reference, strict=True)]
        assert min(cosines) >= INT8_MIN_COSINE, dict(zip(TEXTS, cosines, strict=True))
    assert max(map(cosine, batched, reference)) < 0.9999  # not the fp32 vectors: another name
    assert (int8.name, fp32.name) == (MINILM_INT8_NAME, MINILM_NAME)
    assert int8.dimension == fp32.dimension == len(batched[0])
    built = sorted(path.name for path in cache.iterdir())
    assert built[-1].startswith("minilm-int8-")  # beside the fp32 file, no partial file left
    assert len(built) == 3  # the fp32 file, its lock and the int8 file


@pytest.mark.slow
def test_two_processes_quantizing_at_once_build_once_and_leave_no_partial_file(
    cache: Path,
) -> None:
    [fp32] = list(cache.iterdir())
    said = race(TESTS / "retrieval" / "model_build_child.py", "int8", str(fp32))

    assert sorted(line.split(" ", 1)[0] for line in said) == ["built", "found"]
    [path] = {Path(line.split(" ", 1)[1]) for line in said}
    assert sorted(p.name for p in cache.iterdir()) == sorted(
        [fp32.name, f"{fp32.name}.lock", path.name]
    )


@pytest.mark.slow
def test_an_int8_file_that_fails_its_check_is_not_kept_and_torch_does_not_stand_in(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(onnx_int8, "INT8_MIN_COSINE", 1.01)  # no int8 vector is that close
    embedder = OnnxEmbedder(cache_dir=cache, int8=True)

    with pytest.raises(EmbeddingError, match=r"cosine of 0\.9\d* to the fp32 one") as first:
        embedder.embed(PROBE_TEXTS[:1])
    with pytest.raises(EmbeddingError) as second:  # known now: not quantized again
        embedder.embed(["anything"])

    assert "no fallback" in str(first.value)
    assert second.value is first.value
    assert embedder.runtime is None and embedder.fallback_reason is None
    assert not [path for path in cache.iterdir() if "int8" in path.name]


@pytest.mark.slow
def test_an_int8_file_that_could_not_be_built_is_tried_again_after_a_while(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1_000.0]
    monkeypatch.setattr(onnx_minilm, "monotonic", lambda: now[0])
    monkeypatch.setattr(onnx_int8, "INT8_MIN_COSINE", 1.01)  # the first build fails its check
    embedder = OnnxEmbedder(cache_dir=cache, int8=True)
    with pytest.raises(EmbeddingError) as failed:
        embedder.embed(["Where do I live now?"])
    monkeypatch.setattr(onnx_int8, "INT8_MIN_COSINE", 0.95)  # the cause passed

    now[0] += onnx_minilm.INT8_RETRY_SECONDS - 1
    with pytest.raises(EmbeddingError) as soon:  # not tried again yet: the same error at once
        embedder.embed(["Where do I live now?"])
    assert soon.value is failed.value
    assert not [path for path in cache.iterdir() if "int8" in path.name]

    now[0] += 1
    [vector] = embedder.embed(["Where do I live now?"])

    assert embedder.runtime == "onnx" and embedder.name == MINILM_INT8_NAME
    assert len(vector) == 384
    assert [path for path in cache.iterdir() if path.name.startswith("minilm-int8-")]


def test_an_unwritable_cache_raises_instead_of_embedding_with_torch(tmp_path: Path) -> None:
    not_a_folder = tmp_path / "cache"
    not_a_folder.write_text("a file where the cache folder should be")
    embedder = OnnxEmbedder(cache_dir=not_a_folder, int8=True)

    with pytest.raises(EmbeddingError, match=r"\(int8\) is not available"):
        embedder.embed(["Where do I live now?"])

    assert embedder.runtime is None


def test_the_int8_file_is_rebuilt_when_onnxruntime_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fp32 = Path("minilm-0123.onnx")
    same = int8_key(fp32)
    monkeypatch.setattr(onnx_int8.metadata, "version", lambda name: "0.0.1")

    assert int8_key(fp32) != same
    assert int8_key(Path("minilm-4567.onnx")) != int8_key(fp32)  # new weights or exporters

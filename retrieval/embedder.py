"""The ``Embedder`` protocol and ``HashingEmbedder``, a deterministic fake for tests."""

import hashlib
import math
import re
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

__all__ = ["Embedder", "HashingEmbedder", "normalize"]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into normalized vectors of a fixed dimension, in batches."""

    @property
    def name(self) -> str:
        """The model's name, recorded with the stored vectors."""
        ...

    @property
    def dimension(self) -> int:
        """The length of every vector."""
        ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed texts; one unit-length vector per text, in order."""
        ...


def normalize(vector: Sequence[float]) -> list[float]:
    """Scale a vector to unit length (a zero vector stays zero)."""
    length = math.sqrt(sum(v * v for v in vector))
    return [float(v) / length for v in vector] if length else [0.0 for _ in vector]


_WORD = re.compile(r"\w+")


class HashingEmbedder:
    """A deterministic, model-free embedder for tests: hashed bag of words, normalized.

    Texts sharing words get similar vectors, so tests can reason about search results without
    the real model (like httpx's mock transport: public, so applications can test with it).
    """

    def __init__(self, dimension: int = 384, *, name: str = "hashing-bag-of-words") -> None:
        """Create the fake.

        Args:
            dimension: The vectors' length.
            name: The name recorded with the vectors.
        """
        self._dimension = dimension
        self._name = name
        self.calls = 0

    @property
    def name(self) -> str:
        """The fake model's name."""
        return self._name

    @property
    def dimension(self) -> int:
        """The vectors' length."""
        return self._dimension

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed each text as the normalized counts of its hashed lower-case words."""
        self.calls += 1
        vectors = []
        for text in texts:
            vector = [0.0] * self._dimension
            for word in _WORD.findall(text.lower()):
                digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
                vector[int.from_bytes(digest, "big") % self._dimension] += 1.0
            vectors.append(normalize(vector))
        return vectors

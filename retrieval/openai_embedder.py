"""``OpenAIEmbedder``: any OpenAI-compatible embeddings API, through the ``openai`` client."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from retrieval.embedder import normalize
from retrieval.errors import EmbeddingError

if TYPE_CHECKING:
    import openai

__all__ = ["OpenAIEmbedder"]


class OpenAIEmbedder:
    """Embeddings from ``client.embeddings.create``, batched and normalized."""

    def __init__(
        self,
        client: openai.OpenAI,
        model: str,
        *,
        dimension: int,
        batch_size: int = 256,
        request_dimensions: bool = False,
    ) -> None:
        """Describe the remote model.

        Args:
            client: A configured client (base URL, key, timeout, retries).
            model: The embedding model's name at the API.
            dimension: The length of its vectors.
            batch_size: Texts per request.
            request_dimensions: Send ``dimensions=dimension`` (models that can shorten vectors).
        """
        self._client = client
        self._model = model
        self._dimension = dimension
        self._batch_size = batch_size
        self._request_dimensions = request_dimensions

    @property
    def name(self) -> str:
        """The model's name at the API."""
        return self._model

    @property
    def dimension(self) -> int:
        """The vectors' length."""
        return self._dimension

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed texts, one request per batch.

        Raises:
            EmbeddingError: The API failed or answered vectors of another size or count.
        """
        import openai  # the client given was made with it

        vectors: list[list[float]] = []
        for start in range(0, len(texts), self._batch_size):
            batch = list(texts[start : start + self._batch_size])
            try:
                if self._request_dimensions:
                    response = self._client.embeddings.create(
                        model=self._model, input=batch, dimensions=self._dimension
                    )
                else:
                    response = self._client.embeddings.create(model=self._model, input=batch)
            except openai.OpenAIError as error:
                raise EmbeddingError(f"embedding with {self._model} failed: {error}") from error
            data = sorted(response.data, key=lambda item: item.index)
            if len(data) != len(batch):
                raise EmbeddingError(
                    f"{self._model} returned {len(data)} vectors for {len(batch)} texts"
                )
            for item in data:
                if len(item.embedding) != self._dimension:
                    raise EmbeddingError(
                        f"{self._model} returned {len(item.embedding)} dimensions, "
                        f"expected {self._dimension}"
                    )
                vectors.append(normalize(item.embedding))
        return vectors

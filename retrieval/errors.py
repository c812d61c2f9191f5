"""The exceptions the retrieval layer raises.

The whole tree, under the root of every error stratamem raises (``storage.errors``)::

    StratamemError
    └── RetrievalError               base of every error raised by retrieval itself
        ├── EmbeddingError           an embedder could not embed (model missing, API error,
        │                            wrong dimension); wraps the underlying error
        └── EmbedderMismatchError    the embedder is not the one the card store was opened with

Storage errors (``storage.StorageError`` and its subclasses, e.g.
``storage.EmbeddingModelMismatchError``) pass through unchanged.
"""

from storage.errors import StratamemError

__all__ = ["EmbedderMismatchError", "EmbeddingError", "RetrievalError"]


class RetrievalError(StratamemError):
    """Base class of the errors raised by the retrieval layer."""


class EmbeddingError(RetrievalError):
    """Texts could not be embedded."""


class EmbedderMismatchError(RetrievalError):
    """The embedder differs from the model recorded by the card store it is used with."""

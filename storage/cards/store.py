"""``CardStore``: a user's long-term memory cards, their keyword terms and embeddings, in Postgres.

Storage does no text analysis and computes no embeddings: callers (``retrieval``) hand it the
vector and the keyword terms of each card, and the same for queries.
"""

from sqlalchemy import text

from storage.cards.queries import BM25_B, BM25_K1, CardQueries
from storage.cards.reads import CardReads
from storage.cards.records import (
    MAX_CARD_KEY_CHARS,
    MAX_CARD_TAG_CHARS,
    MAX_CARD_TAGS,
    MAX_CARD_TEXT_CHARS,
    MAX_CARD_TOPIC_CHARS,
    Card,
    CardDraft,
    CardFilter,
    CardMatch,
    CardType,
    NewCard,
    content_hash,
)
from storage.cards.search import Candidates
from storage.cards.vectors import CurrentVectors
from storage.cards.writes import CardWrites
from storage.engine import Database
from storage.errors import StorageError
from storage.migrations import EMBEDDING_DIM

__all__ = [
    "BM25_B",
    "BM25_K1",
    "MAX_CARD_KEY_CHARS",
    "MAX_CARD_TAGS",
    "MAX_CARD_TAG_CHARS",
    "MAX_CARD_TEXT_CHARS",
    "MAX_CARD_TOPIC_CHARS",
    "Candidates",
    "Card",
    "CardDraft",
    "CardFilter",
    "CardMatch",
    "CardStore",
    "CardType",
    "CurrentVectors",
    "EmbeddingModelMismatchError",
    "NewCard",
    "content_hash",
]


class EmbeddingModelMismatchError(StorageError):
    """The database holds embeddings of another model or dimension than the one given."""


class CardStore:
    """The cards of every user; every method is scoped by ``user_id``.

    Three private parts, each given what it uses: the reads (``CardReads``: cards by id,
    listings, keyed lookups), the writes (``CardWrites``: add, supersede, revive, merge sources,
    pin, delete) and the queries (``CardQueries``: the searches and the vectors). The store is
    where they are wired, and hands out their methods as its own: ``store.add`` is the one way to
    add, with no public ``store.writes`` beside it.

    Opening checks that the database's cards were embedded by the same model and dimension.
    """

    def __init__(
        self,
        database: Database,
        *,
        model: str,
        dimension: int,
    ) -> None:
        """Open the card store, recording the embedding model on first use.

        Args:
            database: The database to use.
            model: The name of the embedding model whose vectors are stored.
            dimension: Its dimension; must be ``EMBEDDING_DIM``.

        Raises:
            EmbeddingModelMismatchError: The database holds vectors of another model or size.
        """
        if dimension != EMBEDDING_DIM:
            raise EmbeddingModelMismatchError(
                f"embedding dimension {dimension} does not fit the cards table "
                f"(vector({EMBEDDING_DIM})): use a {EMBEDDING_DIM}-dimensional model"
            )
        with database.transaction() as transaction:
            transaction.execute(
                text(
                    "INSERT INTO card_embedding_model (name, dimension) VALUES (:name, :dim) "
                    "ON CONFLICT (singleton) DO NOTHING"
                ),
                {"name": model, "dim": dimension},
            )
            stored = transaction.execute(
                text("SELECT name, dimension FROM card_embedding_model")
            ).one()
        if (stored.name, stored.dimension) != (model, dimension):
            raise EmbeddingModelMismatchError(
                f"the cards in this database were embedded with {stored.name!r} "
                f"({stored.dimension} dimensions), not {model!r} ({dimension}); "
                "re-embed them or use that model"
            )
        self.model = model
        self.dimension = dimension
        self._reads = CardReads(database)
        self._writes = CardWrites(database)
        self._queries = CardQueries(database, dimension=dimension)
        # The parts' methods, as the store's: one bound method each, no forwarding layer.
        self.get = self._reads.get
        self.get_many = self._reads.get_many
        self.list_cards = self._reads.list_cards
        self.current_keyed = self._reads.current_keyed
        self.keyed_from_messages = self._reads.keyed_from_messages
        self.add = self._writes.add
        self.supersede = self._writes.supersede
        self.revive = self._writes.revive
        self.merge_sources = self._writes.merge_sources
        self.set_pinned = self._writes.set_pinned
        self.delete = self._writes.delete
        self.count = self._queries.count
        self.search_vector = self._queries.search_vector
        self.candidates = self._queries.candidates
        self.current_vectors = self._queries.current_vectors
        self.similarities = self._queries.similarities

"""Fixtures of the retrieval tests: the real MiniLM model and a card index on the test database."""

import pytest

from retrieval import MINILM_DIMENSION, MINILM_NAME, CardIndex, SentenceTransformerEmbedder
from storage import CardStore, Database


@pytest.fixture(scope="session")
def minilm() -> SentenceTransformerEmbedder:
    """The real all-MiniLM-L6-v2, loaded once for the run (lazily, on first use)."""
    return SentenceTransformerEmbedder()


@pytest.fixture
def index(database: Database, minilm: SentenceTransformerEmbedder) -> CardIndex:
    """A card index with MiniLM on the shared test database."""
    return CardIndex(CardStore(database, model=MINILM_NAME, dimension=MINILM_DIMENSION), minilm)

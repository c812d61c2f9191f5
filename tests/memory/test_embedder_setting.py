"""``cards.embedder``: the settings pick the embedder, and its name decides which database fits.

``minilm-int8`` embeds with MiniLM's int8 weights under a name of its own, so a database whose
cards were embedded with fp32 MiniLM (the shared test database records that name) is refused
clearly, before anything is loaded or embedded, as it is for any other model.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text

from memory import ConfigurationError, Memory, Settings
from memory.longterm.long_term_memory import default_embedder
from memory.settings import CardSettings
from retrieval import (
    MINILM_DIMENSION,
    MINILM_INT8_NAME,
    MINILM_NAME,
    OnnxEmbedder,
    search_config_for,
)
from storage import CardStore, Database, EmbeddingModelMismatchError


@pytest.fixture
def fp32_database(database: Database) -> Iterator[Database]:
    """A new database on the embedded server whose cards are fp32 MiniLM's, dropped after
    (the shared one records whichever model a test opens it with first)."""
    name = f"scratch_{uuid.uuid4().hex}"
    admin = create_engine(database.url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f"CREATE DATABASE {name}"))
    url = database.engine.url.set(database=name).render_as_string(hide_password=False)
    with Database.open(url) as opened:
        CardStore(opened, model=MINILM_NAME, dimension=MINILM_DIMENSION)
        yield opened
    with admin.connect() as connection:
        connection.execute(text(f"DROP DATABASE {name}"))
    admin.dispose()


def test_minilm_int8_is_onnx_int8_under_its_own_name_and_the_minilm_gate() -> None:
    int8 = default_embedder(CardSettings(embedder="minilm-int8"))
    fp32 = default_embedder(CardSettings())

    assert isinstance(int8, OnnxEmbedder) and isinstance(fp32, OnnxEmbedder)
    assert (int8.name, fp32.name) == (MINILM_INT8_NAME, MINILM_NAME)
    assert int8.runtime is None  # nothing loaded before the first embed
    assert search_config_for(int8).min_similarity == search_config_for(fp32).min_similarity


def test_a_database_embedded_with_fp32_minilm_is_refused_by_minilm_int8(
    fp32_database: Database,
) -> None:
    with pytest.raises(EmbeddingModelMismatchError, match=r"all-MiniLM-L6-v2 \(int8\)"):
        Memory(fp32_database, Settings(cards={"embedder": "minilm-int8"}))


def test_an_unknown_embedder_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="minilm-int8"):
        CardSettings(embedder="int8")

"""Fixtures of the retrieval tests: the real MiniLM model and a card index on the test database."""

import shutil
from pathlib import Path

import pytest
from child_process import TESTS, race

from retrieval import MINILM_DIMENSION, MINILM_NAME, CardIndex, SentenceTransformerEmbedder
from retrieval.onnx_export import default_cache_dir
from storage import CardStore, Database


@pytest.fixture(scope="session")
def minilm() -> SentenceTransformerEmbedder:
    """The real all-MiniLM-L6-v2, loaded once for the run (lazily, on first use)."""
    return SentenceTransformerEmbedder()


@pytest.fixture
def index(database: Database, minilm: SentenceTransformerEmbedder) -> CardIndex:
    """A card index with MiniLM on the shared test database."""
    return CardIndex(CardStore(database, model=MINILM_NAME, dimension=MINILM_DIMENSION), minilm)


@pytest.fixture(scope="session")
def onnx_race(user_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """Two processes asked at the same moment for MiniLM's ONNX file in a cache folder of their
    own (the run's user cache may hold it already): the folder, and what each said (``built
    PATH`` or ``found PATH``). The file is then put in the run's user cache when not there
    yet, so later embedders of the run find it instead of exporting again."""
    folder = tmp_path_factory.mktemp("onnx-race")
    said = race(TESTS / "retrieval" / "model_build_child.py", "onnx", str(folder))
    built = Path(said[0].split(" ", 1)[1])
    cached = default_cache_dir() / built.name
    if not cached.exists():
        cached.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built, cached.with_suffix(".copying"))
        cached.with_suffix(".copying").rename(cached)
    return folder, said

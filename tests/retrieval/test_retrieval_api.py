"""Pins the public names of the retrieval package and its place in the layers."""

import ast
import subprocess
import sys
from pathlib import Path

import retrieval


def test_public_names() -> None:
    assert sorted(retrieval.__all__) == [
        "CUT_FAR_LINES",
        "CardDraft",
        "CardIndex",
        "CardQuery",
        "DEFAULT_RRF_K",
        "DEFAULT_SEARCH",
        "Embedder",
        "EmbedderMismatchError",
        "EmbeddingError",
        "Excerpt",
        "Gate",
        "HASHING_NAME",
        "HashingEmbedder",
        "LISTS_CUT_CLOSE",
        "MINILM_DIMENSION",
        "MINILM_INT8_NAME",
        "MINILM_NAME",
        "OnnxEmbedder",
        "OpenAIEmbedder",
        "PrefetchingEmbedder",
        "RECIPES",
        "RetrievalError",
        "STOP_WORDS",
        "ScoredCard",
        "SearchConfig",
        "SentenceTransformerEmbedder",
        "TurnCardText",
        "Utterance",
        "analyze",
        "asks_for_several",
        "compose_excerpts",
        "day_label",
        "normalize",
        "relevant_cards",
        "search_config_for",
        "split_turn_card",
        "term_frequencies",
        "turn_card_text",
        "turn_window",
        "weighted_rrf",
    ]
    assert all(hasattr(retrieval, name) for name in retrieval.__all__)


def test_retrieval_imports_storage_never_memory() -> None:
    imported: set[str] = set()
    for source in Path(retrieval.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module.split(".")[0])

    assert "storage" in imported
    assert "memory" not in imported


def test_importing_retrieval_does_not_load_torch() -> None:
    # The model (and torch) load on the first embed, not at import: importing stays cheap.
    code = "import sys, retrieval; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"

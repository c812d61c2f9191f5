"""An offline ``Memory`` for evaluation, with a search recipe of one's choice.

``stratamem eval locomo`` and ``benchmarks/locomo_recipes.py`` build their memories the same
way: no chat model whatever the environment says, the background summary mode with no
debounce (the evaluation runs the worker until idle), the cards settings they ask for, and
recall searching with a named recipe (``retrieval.RECIPES``) instead of the default.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memory.facade import Memory
from memory.longterm.long_term_memory import default_embedder
from memory.settings import CardSettings, Settings
from retrieval import DEFAULT_SEARCH, CardIndex, Embedder, SearchConfig, search_config_for
from storage import Database

__all__ = ["EMBEDDERS", "make_embedder", "offline_memory"]

#: The embedders an evaluation can run with (``cards.embedder``'s MiniLM choices).
EMBEDDERS = ("minilm", "minilm-int8")


def make_embedder(choice: str) -> Embedder:
    """The embedder a user gets with ``cards.embedder = choice``: MiniLM on ONNX Runtime
    (``minilm-int8``: its int8 weights), offline (tests replace this function)."""
    return default_embedder(CardSettings(embedder=choice))


def offline_memory(
    database: Database,
    data_dir: Path,
    embedder: Embedder,
    *,
    recipe: SearchConfig = DEFAULT_SEARCH,
    **cards: Any,
) -> Memory:
    """A ``Memory`` on ``database`` with no chat model, ``cards`` as its cards settings.

    Args:
        database: The open database.
        data_dir: The database's folder (the settings' ``data_dir``).
        embedder: The embedder of the cards.
        recipe: The search recipe recall and search use; one with no relevance gate (a
            named recipe) gets the one measured for ``embedder``. The default recipe is the
            index's own.
        cards: ``CardSettings`` fields (``k``, ``max_tokens``).
    """
    settings = Settings(
        data_dir=data_dir,
        llm_base_url=None,
        llm_api_key=None,
        summary={"mode": "background", "debounce_seconds": 0},
        cards=cards,
    )
    memory = Memory(database, settings, embedder=embedder)
    if recipe != DEFAULT_SEARCH:
        if recipe.min_similarity is None:
            gate = search_config_for(embedder).min_similarity
            recipe = recipe.model_copy(update={"min_similarity": gate})
        # The long-term memory's index, made again with the recipe. ``Memory`` has no setting
        # for a recipe: the default is the one product recipe, the others are for evaluation.
        longterm = memory._longterm()
        longterm.index = CardIndex(longterm.index.store, embedder, config=recipe)
    return memory

"""Long-term memory retrieval: embedders, keyword analysis, fusion and hybrid card search.

``retrieval`` may import ``storage``; it never imports ``memory`` and never calls an LLM.
"""

from retrieval.embedder import Embedder, HashingEmbedder, normalize
from retrieval.errors import EmbedderMismatchError, EmbeddingError, RetrievalError
from retrieval.excerpts import Excerpt, compose_excerpts
from retrieval.fusion import DEFAULT_RRF_K, weighted_rrf
from retrieval.keywords import STOP_WORDS, analyze, term_frequencies
from retrieval.onnx_minilm import OnnxEmbedder
from retrieval.openai_embedder import OpenAIEmbedder
from retrieval.prefetch import PrefetchingEmbedder
from retrieval.question_shape import asks_for_several
from retrieval.recipe import (
    CUT_FAR_LINES,
    DEFAULT_SEARCH,
    HASHING_NAME,
    LISTS_CUT_CLOSE,
    RECIPES,
    SearchConfig,
    search_config_for,
)
from retrieval.relevance_gate import Gate, relevant_cards
from retrieval.search import CardDraft, CardIndex, CardQuery, ScoredCard
from retrieval.sentence_transformer import (
    MINILM_DIMENSION,
    MINILM_INT8_NAME,
    MINILM_NAME,
    SentenceTransformerEmbedder,
)
from retrieval.turns import (
    TurnCardText,
    Utterance,
    day_label,
    split_turn_card,
    turn_card_text,
    turn_window,
)

__all__ = [
    "CUT_FAR_LINES",
    "DEFAULT_RRF_K",
    "DEFAULT_SEARCH",
    "HASHING_NAME",
    "LISTS_CUT_CLOSE",
    "MINILM_DIMENSION",
    "MINILM_INT8_NAME",
    "MINILM_NAME",
    "RECIPES",
    "STOP_WORDS",
    "CardDraft",
    "CardIndex",
    "CardQuery",
    "Embedder",
    "EmbedderMismatchError",
    "EmbeddingError",
    "Excerpt",
    "Gate",
    "HashingEmbedder",
    "OnnxEmbedder",
    "OpenAIEmbedder",
    "PrefetchingEmbedder",
    "RetrievalError",
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

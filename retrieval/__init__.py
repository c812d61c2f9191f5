"""Long-term memory retrieval: embedders, keyword analysis, fusion and hybrid card search.

``retrieval`` may import ``storage``; it never imports ``memory`` and never calls an LLM.
"""

from retrieval.embedder import Embedder, HashingEmbedder, normalize
from retrieval.errors import EmbedderMismatchError, EmbeddingError, RetrievalError
from retrieval.fusion import DEFAULT_RRF_K, weighted_rrf
from retrieval.keywords import STOP_WORDS, analyze, term_frequencies
from retrieval.onnx_minilm import OnnxEmbedder
from retrieval.openai_embedder import OpenAIEmbedder
from retrieval.prefetch import PrefetchingEmbedder
from retrieval.search import KEYWORD_WEIGHT, CardDraft, CardIndex, CardQuery, ScoredCard
from retrieval.sentence_transformer import (
    MINILM_DIMENSION,
    MINILM_NAME,
    SentenceTransformerEmbedder,
)
from retrieval.turns import (
    TURN_CONTEXT_AFTER,
    TURN_CONTEXT_BEFORE,
    Utterance,
    turn_card_text,
    turn_window,
)

__all__ = [
    "DEFAULT_RRF_K",
    "KEYWORD_WEIGHT",
    "MINILM_DIMENSION",
    "MINILM_NAME",
    "STOP_WORDS",
    "TURN_CONTEXT_AFTER",
    "TURN_CONTEXT_BEFORE",
    "CardDraft",
    "CardIndex",
    "CardQuery",
    "Embedder",
    "EmbedderMismatchError",
    "EmbeddingError",
    "HashingEmbedder",
    "OnnxEmbedder",
    "OpenAIEmbedder",
    "PrefetchingEmbedder",
    "RetrievalError",
    "ScoredCard",
    "SentenceTransformerEmbedder",
    "Utterance",
    "analyze",
    "normalize",
    "term_frequencies",
    "turn_card_text",
    "turn_window",
    "weighted_rrf",
]

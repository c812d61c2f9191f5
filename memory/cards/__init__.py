"""Long-term memory judgment: card extraction (LLM and rules), supersede decisions, query rewriting.

Pure judgment, no database: ``ExtractedCard`` is what extraction finds (archiving turns it into
the store's one draft type, ``storage.CardDraft``), ``decide_supersede`` tells which stored cards
a new one (either) replaces, and ``rewrite_query`` turns the user's input
into a self-contained query for recall. The submodules hold the parts; this package exports
what the facade and the store use.
"""

import warnings

from memory.cards import model as _model
from memory.cards.dates import ResolvedDate, resolve_date, time_range_of_query
from memory.cards.extract import CardExtractor, Extraction, ExtractionEvent, RulesFallback
from memory.cards.model import (
    CardType,
    DatePrecision,
    ExtractedCard,
    SourceMessage,
    normalize_text,
)
from memory.cards.rewrite import Rewrite, RewriteMethod, rewrite_query
from memory.cards.rules import extract_by_rules
from memory.cards.supersede import (
    CardId,
    ExistingCard,
    SupersedeDecision,
    decide_supersede,
    task_attribute,
    task_key,
)

__all__ = [
    "CardExtractor",
    "CardId",
    "CardType",
    "DatePrecision",
    "ExistingCard",
    "ExtractedCard",
    "Extraction",
    "ExtractionEvent",
    "ResolvedDate",
    "Rewrite",
    "RewriteMethod",
    "RulesFallback",
    "SourceMessage",
    "SupersedeDecision",
    "decide_supersede",
    "extract_by_rules",
    "normalize_text",
    "resolve_date",
    "rewrite_query",
    "task_attribute",
    "task_key",
    "time_range_of_query",
]


def __getattr__(name: str) -> object:
    """``content_hash``, retired (``memory.cards.model`` says why), until the next release."""
    if name != "content_hash":
        raise AttributeError(f"module 'memory.cards' has no attribute {name!r}")
    warnings.warn(_model._RETIRED_HASH, DeprecationWarning, stacklevel=2)
    return _model._normalized_text_hash

"""Long-term memory judgment: card extraction (LLM and rules), supersede decisions, query rewriting.

Pure judgment, no database: ``ExtractedCard`` is what extraction finds (archiving turns it into
the store's one draft type, ``storage.CardDraft``), ``decide_supersede`` tells which stored cards
a new one (either) replaces, and ``rewrite_query`` turns the user's input
into a self-contained query for recall. The submodules hold the parts; this package exports
what the facade and the store use.
"""

from memory.cards.dates import ResolvedDate, resolve_date, time_range_of_query
from memory.cards.extract import CardExtractor, Extraction, ExtractionEvent, RulesFallback
from memory.cards.model import (
    CardType,
    DatePrecision,
    ExtractedCard,
    SourceMessage,
    content_hash,
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
    "content_hash",
    "decide_supersede",
    "extract_by_rules",
    "normalize_text",
    "resolve_date",
    "rewrite_query",
    "task_attribute",
    "task_key",
    "time_range_of_query",
]

"""The public surface of ``memory.cards`` is explicit and pinned: changing it is a decision."""

import types

import memory.cards

EXPECTED = {
    "ExtractedCard",
    "CardExtractor",
    "CardId",
    "CardType",
    "DatePrecision",
    "ExistingCard",
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
}


def test_the_exported_names_are_pinned() -> None:
    assert set(memory.cards.__all__) == EXPECTED


def test_nothing_else_public_is_exported() -> None:
    public = {
        name
        for name, value in vars(memory.cards).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public == set(memory.cards.__all__)


def test_every_module_declares_its_public_names() -> None:
    modules = [
        value for value in vars(memory.cards).values() if isinstance(value, types.ModuleType)
    ]
    assert len(modules) >= 10
    for module in modules:
        assert hasattr(module, "__all__"), module.__name__
        missing = [name for name in module.__all__ if not hasattr(module, name)]
        assert missing == [], module.__name__

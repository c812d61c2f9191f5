"""The public surface of ``memory`` is explicit and pinned: changing it is a decision."""

import types

import memory

EXPECTED = {
    "INTERRUPTED_CONTENT",
    "AssembledContext",
    "Budget",
    "BudgetError",
    "CardNotFoundError",
    "CardSettings",
    "ChatModel",
    "Completion",
    "ConfigurationError",
    "ContextOverflowError",
    "ContextReport",
    "Dropped",
    "Forgotten",
    "InterruptedCall",
    "JobOutcome",
    "JobSettings",
    "InvalidHistoryError",
    "LLMChain",
    "LLMChainFailed",
    "LLMError",
    "LLMEvent",
    "LayerTokens",
    "Memory",
    "Message",
    "ModelLimits",
    "OpenAIChatModel",
    "Problem",
    "PinBudgetError",
    "OpenCall",
    "RecordConflictError",
    "ReplyFormat",
    "RetrievedMemory",
    "ScriptedChatModel",
    "Settings",
    "StratamemError",
    "SummaryContext",
    "SummaryEvent",
    "SummaryResult",
    "SummarySettings",
    "SummaryState",
    "Summarizer",
    "TiktokenCounter",
    "TokenCounter",
    "ToolCallInterruptedError",
    "ToolResultCut",
    "Unit",
    "assemble",
    "count_tokens",
    "limits_for",
    "parse_messages",
    "plan_budget",
    "render_messages",
    "split_units",
    "trim_history",
    "validate_history",
    "WorkerRun",
}


def test_the_exported_names_are_pinned() -> None:
    assert set(memory.__all__) == EXPECTED


def test_nothing_else_public_is_exported() -> None:
    public = {
        name
        for name, value in vars(memory).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public == set(memory.__all__)


def test_every_exported_name_exists() -> None:
    missing = [name for name in memory.__all__ if not hasattr(memory, name)]
    assert missing == []


def test_the_errors_are_value_errors_where_the_input_is_at_fault() -> None:
    assert issubclass(memory.InvalidHistoryError, ValueError)
    assert issubclass(memory.ContextOverflowError, ValueError)
    assert issubclass(memory.BudgetError, ValueError)
    assert issubclass(memory.RecordConflictError, ValueError)
    assert issubclass(memory.ToolCallInterruptedError, memory.InvalidHistoryError)
    assert issubclass(memory.LLMError, memory.StratamemError)

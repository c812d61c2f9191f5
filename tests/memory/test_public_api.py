"""The public surface of ``memory`` is explicit and pinned: changing it is a decision."""

import types
import warnings

import pytest

import memory
import memory.testing

EXPECTED = {
    "INTERRUPTED_CONTENT",
    "AssembledContext",
    "Budget",
    "BudgetError",
    "Card",
    "CardNotFoundError",
    "CardSettings",
    "ChatModel",
    "Completion",
    "ConfigurationError",
    "ContextOverflowError",
    "ContextReport",
    "DatabaseUnavailableError",
    "Dropped",
    "EmbedderMismatchError",
    "EmbeddingError",
    "ExportFormatError",
    "Forgotten",
    "ImportConflictError",
    "InterruptedCall",
    "InvalidArgumentError",
    "InvalidHistoryError",
    "InvalidInputError",
    "JobSettings",
    "LLMError",
    "LayerTokens",
    "Memory",
    "Message",
    "ModelLimits",
    "OpenAIChatModel",
    "OpenCall",
    "PinBudgetError",
    "Problem",
    "RecordConflictError",
    "ReplyFormat",
    "ReplyFormatError",
    "ReportSettings",
    "RetrievalError",
    "RetrievedMemory",
    "ScoredCard",
    "SessionErasedError",
    "Settings",
    "StorageError",
    "StoredMessage",
    "StratamemError",
    "SummaryContext",
    "SummaryRecord",
    "SummarySettings",
    "SummaryState",
    "TiktokenCounter",
    "TokenCounter",
    "ToolCallInterruptedError",
    "ToolResultCut",
    "WorkerRun",
    "count_tokens",
    "limits_for",
    "parse_messages",
    "plan_budget",
    "render_messages",
    "split_units",
    "trim_history",
    "validate_history",
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


def test_the_types_the_methods_return_and_the_errors_they_raise_are_exported() -> None:
    from retrieval import RetrievalError, ScoredCard
    from storage import Card, StorageError, StoredMessage, SummaryRecord

    assert (memory.ScoredCard, memory.Card) == (ScoredCard, Card)
    assert (memory.StoredMessage, memory.SummaryRecord) == (StoredMessage, SummaryRecord)
    assert (memory.StorageError, memory.RetrievalError) == (StorageError, RetrievalError)
    assert issubclass(memory.InvalidInputError, memory.StorageError)
    assert issubclass(memory.SessionErasedError, LookupError)


def test_a_moved_name_still_imports_with_a_warning_naming_its_new_place() -> None:
    from memory.summary.summarizer import Summarizer

    with pytest.warns(DeprecationWarning, match=r"memory\.Summarizer moved to memory\.summary"):
        assert memory.Summarizer is Summarizer
    with pytest.warns(DeprecationWarning, match="memory.testing"):
        assert memory.ScriptedChatModel is memory.testing.ScriptedChatModel
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError, match="no attribute 'Nonsense'"):
            _ = memory.Nonsense


def test_the_fakes_are_in_memory_testing() -> None:
    assert set(memory.testing.__all__) == {"HashingEmbedder", "ScriptedChatModel"}
    reply = memory.testing.ScriptedChatModel(["hi"]).complete(
        [{"role": "user", "content": "hello"}],
        model="m",
        temperature=0.0,
        max_tokens=None,
        timeout=1.0,
    )
    assert reply.text == "hi"
    assert len(memory.testing.HashingEmbedder().embed(["a text"])[0]) > 0

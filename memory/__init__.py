"""stratamem's top layer: the context engine, the rolling summary and the ``Memory`` facade.

The pure core (``memory.context``) does no I/O and works on plain lists of OpenAI-format
message dicts, e.g. ``trim_history(messages, max_tokens=3_000)``. Everything an application
needs is exported here (the types its methods return and the errors they raise included); the
subpackages hold the parts, importable from their modules, and ``memory.testing`` the fakes.
"""

import importlib
import warnings

from memory.context.assembler import AssembledContext, RetrievedMemory, SummaryContext
from memory.context.budget import Budget, ModelLimits, limits_for, plan_budget
from memory.context.messages import Message, parse_messages, render_messages
from memory.context.report import (
    ContextReport,
    Dropped,
    InterruptedCall,
    LayerTokens,
    SummaryState,
    ToolResultCut,
)
from memory.context.tokens import TiktokenCounter, TokenCounter, count_tokens
from memory.context.trim import trim_history
from memory.context.units import split_units, validate_history
from memory.errors import (
    BudgetError,
    CardNotFoundError,
    ConfigurationError,
    ContextOverflowError,
    ExportFormatError,
    InvalidArgumentError,
    InvalidHistoryError,
    LLMError,
    PinBudgetError,
    Problem,
    RecordConflictError,
    ReplyFormatError,
    StratamemError,
    ToolCallInterruptedError,
)
from memory.facade import Forgotten, Memory
from memory.jobs.consolidation import WorkerRun
from memory.llm import ChatModel, Completion, OpenAIChatModel, ReplyFormat
from memory.session.open_calls import INTERRUPTED_CONTENT, OpenCall
from memory.settings import CardSettings, JobSettings, ReportSettings, Settings, SummarySettings
from retrieval import EmbedderMismatchError, EmbeddingError, RetrievalError, ScoredCard
from storage import (
    Card,
    DatabaseUnavailableError,
    InvalidInputError,
    SessionErasedError,
    StorageError,
    StoredMessage,
    SummaryRecord,
)
from storage.errors import ImportConflictError

__all__ = [
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
]

# Names that left the top level: internals, and the fakes (now in ``memory.testing``). Each
# still imports from here, with a DeprecationWarning, until the next release.
_MOVED = {
    "JobOutcome": "memory.jobs.consolidation",
    "LLMChain": "memory.llm",
    "LLMChainFailed": "memory.llm",
    "LLMEvent": "memory.llm",
    "ScriptedChatModel": "memory.testing",
    "Summarizer": "memory.summary.summarizer",
    "SummaryEvent": "memory.summary.summarizer",
    "SummaryResult": "memory.summary.summarizer",
    "Unit": "memory.context.units",
    "assemble": "memory.context.assembler",
}


def __getattr__(name: str) -> object:
    """A moved name, from its new module, with a warning that says where it went."""
    module = _MOVED.get(name)
    if module is None:
        raise AttributeError(f"module 'memory' has no attribute {name!r}")
    warnings.warn(
        f"memory.{name} moved to {module}.{name}; the old name goes in the next release",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(module), name)

"""stratamem's top layer: the context engine, the rolling summary and the ``Memory`` facade.

The pure core (``memory.context``) does no I/O and works on plain lists of OpenAI-format
message dicts, e.g. ``trim_history(messages, max_tokens=3_000)``. Everything an application
needs is exported here; the subpackages hold the parts.
"""

from memory.calls import INTERRUPTED_CONTENT, OpenCall
from memory.context.assembler import AssembledContext, RetrievedMemory, SummaryContext, assemble
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
from memory.context.units import Unit, split_units, validate_history
from memory.errors import (
    BudgetError,
    CardNotFoundError,
    ConfigurationError,
    ContextOverflowError,
    InvalidHistoryError,
    LLMError,
    PinBudgetError,
    Problem,
    RecordConflictError,
    StratamemError,
    ToolCallInterruptedError,
)
from memory.facade import Forgotten, Memory
from memory.jobs import JobOutcome, WorkerRun
from memory.llm import (
    ChatModel,
    Completion,
    LLMChain,
    LLMChainFailed,
    LLMEvent,
    OpenAIChatModel,
    ReplyFormat,
    ScriptedChatModel,
)
from memory.settings import CardSettings, JobSettings, Settings, SummarySettings
from memory.summary.summarizer import Summarizer, SummaryEvent, SummaryResult

__all__ = [
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
    "InvalidHistoryError",
    "JobOutcome",
    "JobSettings",
    "LLMChain",
    "LLMChainFailed",
    "LLMError",
    "LLMEvent",
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
    "RetrievedMemory",
    "ScriptedChatModel",
    "Settings",
    "StratamemError",
    "Summarizer",
    "SummaryContext",
    "SummaryEvent",
    "SummaryResult",
    "SummarySettings",
    "SummaryState",
    "TiktokenCounter",
    "TokenCounter",
    "ToolCallInterruptedError",
    "ToolResultCut",
    "Unit",
    "WorkerRun",
    "assemble",
    "count_tokens",
    "limits_for",
    "parse_messages",
    "plan_budget",
    "render_messages",
    "split_units",
    "trim_history",
    "validate_history",
]

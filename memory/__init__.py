"""stratamem's top layer: the context engine, the rolling summary and the ``Memory`` facade.

The pure core (messages to assembler) does no I/O and works on plain lists of OpenAI-format
message dicts, e.g. ``trim_history(messages, max_tokens=3_000)``.
"""

from memory.assembler import AssembledContext, RetrievedMemory, SummaryContext, assemble
from memory.budget import Budget, ModelLimits, limits_for, plan_budget
from memory.errors import (
    BudgetError,
    ConfigurationError,
    ContextOverflowError,
    InvalidHistoryError,
    LLMError,
    StratamemError,
)
from memory.facade import Memory
from memory.llm import ChatModel, Completion, OpenAIChatModel, ScriptedChatModel
from memory.messages import Message, parse_messages, render_messages
from memory.report import ContextReport, Dropped, LayerTokens, SummaryState, ToolResultCut
from memory.settings import Settings
from memory.summary import Summarizer, SummaryEvent, SummaryResult, SummarySettings
from memory.tokens import TiktokenCounter, TokenCounter, count_tokens
from memory.trim import trim_history
from memory.units import Unit, split_units, validate_history

__all__ = [
    "AssembledContext",
    "Budget",
    "BudgetError",
    "ChatModel",
    "Completion",
    "ConfigurationError",
    "ContextOverflowError",
    "ContextReport",
    "Dropped",
    "InvalidHistoryError",
    "LLMError",
    "LayerTokens",
    "Memory",
    "Message",
    "ModelLimits",
    "OpenAIChatModel",
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
]

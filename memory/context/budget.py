"""Token budgets: known models' limits and the history budget left after output and margin."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import MappingProxyType

from memory.errors import BudgetError

__all__ = [
    "KNOWN_MODELS",
    "Budget",
    "ModelLimits",
    "default_safety_margin",
    "limits_for",
    "plan_budget",
]

#: Share of an explicit window reserved for the answer when no ``max_output`` is given.
UNKNOWN_OUTPUT_SHARE = 0.20
#: The safety margin is this share of the window ...
SAFETY_MARGIN_SHARE = 0.02
#: ... and never less than this many tokens.
MIN_SAFETY_MARGIN = 64


@dataclass(frozen=True, slots=True)
class ModelLimits:
    """What a model accepts.

    Attributes:
        context_window: tokens of prompt and answer together.
        max_output: the most tokens the model writes in one answer.
    """

    context_window: int
    max_output: int


_OPEN_WEIGHT_OUTPUT = 8_192

#: Published limits, keyed by a normalised name prefix (see ``limits_for``). OpenAI and
#: Anthropic numbers are the providers' documented context windows and max output tokens.
#: Open-weight models (Qwen, Llama) have no fixed max output: the server decides, so the
#: reserve is 8,192 tokens; the windows are the models' native ones (Qwen2.5 and Qwen3 reach
#: 131,072 only with YaRN scaling: pass ``context_window`` when you serve them that way).
KNOWN_MODELS: MappingProxyType[str, ModelLimits] = MappingProxyType(
    {
        # OpenAI
        "gpt-4o": ModelLimits(128_000, 16_384),
        "gpt-4o-mini": ModelLimits(128_000, 16_384),
        "chatgpt-4o": ModelLimits(128_000, 16_384),
        "gpt-4.1": ModelLimits(1_047_576, 32_768),
        "gpt-4.1-mini": ModelLimits(1_047_576, 32_768),
        "gpt-4.1-nano": ModelLimits(1_047_576, 32_768),
        "gpt-4.5": ModelLimits(128_000, 16_384),
        "gpt-4": ModelLimits(8_192, 8_192),
        "gpt-4-turbo": ModelLimits(128_000, 4_096),
        "gpt-4-1106-preview": ModelLimits(128_000, 4_096),
        "gpt-4-0125-preview": ModelLimits(128_000, 4_096),
        "gpt-3.5-turbo": ModelLimits(16_385, 4_096),
        "o1": ModelLimits(200_000, 100_000),
        "o1-mini": ModelLimits(128_000, 65_536),
        "o1-preview": ModelLimits(128_000, 32_768),
        "o3": ModelLimits(200_000, 100_000),
        "o3-mini": ModelLimits(200_000, 100_000),
        "o4-mini": ModelLimits(200_000, 100_000),
        # Anthropic
        "claude-3-haiku": ModelLimits(200_000, 4_096),
        "claude-3-opus": ModelLimits(200_000, 4_096),
        "claude-3-5-haiku": ModelLimits(200_000, 8_192),
        "claude-3-5-sonnet": ModelLimits(200_000, 8_192),
        "claude-3-7-sonnet": ModelLimits(200_000, 64_000),
        "claude-sonnet-4": ModelLimits(200_000, 64_000),
        "claude-opus-4": ModelLimits(200_000, 32_000),
        "claude-haiku-4-5": ModelLimits(200_000, 64_000),
        # Qwen (native windows)
        "qwen2.5": ModelLimits(32_768, _OPEN_WEIGHT_OUTPUT),
        "qwen3": ModelLimits(32_768, _OPEN_WEIGHT_OUTPUT),
        # Llama
        "llama3.1": ModelLimits(131_072, _OPEN_WEIGHT_OUTPUT),
        "llama3.2": ModelLimits(131_072, _OPEN_WEIGHT_OUTPUT),
        "llama3.3": ModelLimits(131_072, _OPEN_WEIGHT_OUTPUT),
    }
)


def _normalise(model: str) -> str:
    """The table spelling of a model name.

    Lowercase; provider prefixes (``openai/``, ``anthropic/``, ``meta-llama/``...) and a leading
    ``meta-`` dropped; ``llama-3.1`` and ``qwen-3`` written ``llama3.1`` and ``qwen3``; Claude's
    dotted versions (``claude-3.5-sonnet``) written with dashes as Anthropic does.
    """
    name = model.strip().lower().rsplit("/", 1)[-1].removeprefix("meta-")
    name = re.sub(r"^(llama|qwen)-(?=\d)", r"\1", name)
    if name.startswith("claude"):
        name = re.sub(r"(?<=\d)\.(?=\d)", "-", name)
    return name


def limits_for(model: str) -> ModelLimits:
    """The limits of a model, matched on the longest known prefix of its normalised name.

    ``gpt-4o-mini-2024-07-18``, ``openai/gpt-4o-mini`` and ``gpt-4o-mini`` all match
    ``gpt-4o-mini``; ``anthropic/claude-3.5-sonnet`` matches ``claude-3-5-sonnet``.

    Raises:
        BudgetError: no known model is a prefix of the name.
    """
    name = _normalise(model)
    matches = [prefix for prefix in KNOWN_MODELS if name.startswith(prefix)]
    if not matches:
        raise BudgetError(
            f"unknown model {model!r}: pass context_window (and max_output) explicitly"
        )
    return KNOWN_MODELS[max(matches, key=len)]


def default_safety_margin(context_window: int) -> int:
    """2% of the window, at least 64 tokens.

    The margin absorbs what a local count cannot know exactly: a provider's own tokenizer
    (Claude, Llama and Qwen are counted with an OpenAI encoding) and its hidden framing tokens.
    For models far from the OpenAI tokenizers, pass a larger ``safety_margin``.
    """
    return max(MIN_SAFETY_MARGIN, int(context_window * SAFETY_MARGIN_SHARE))


@dataclass(frozen=True, slots=True)
class Budget:
    """How a context window is shared out.

    Attributes:
        context_window: tokens of prompt and answer together.
        reserved_output: tokens kept free for the answer.
        safety_margin: tokens kept free for counting errors.
        history: what is left for the prompt: window - reserved output - safety margin.

    Raises:
        BudgetError: a number is negative or the reserve and margin leave no room.
    """

    context_window: int
    reserved_output: int
    safety_margin: int
    history: int = field(init=False)

    def __post_init__(self) -> None:
        if min(self.context_window, self.reserved_output, self.safety_margin) < 0:
            raise BudgetError(
                f"budget numbers must not be negative: context window {self.context_window}, "
                f"reserved output {self.reserved_output}, safety margin {self.safety_margin}"
            )
        history = self.context_window - self.reserved_output - self.safety_margin
        if history <= 0:
            raise BudgetError(
                f"reserved output {self.reserved_output} + safety margin {self.safety_margin} "
                f"= {self.reserved_output + self.safety_margin} leaves no room in a context "
                f"window of {self.context_window}"
            )
        object.__setattr__(self, "history", history)


def plan_budget(
    model: str | None = None,
    *,
    context_window: int | None = None,
    max_output: int | None = None,
    safety_margin: int | None = None,
) -> Budget:
    """Plan the history budget of a model, from the table or explicit numbers.

    Explicit numbers win over the table. The output reserve is ``max_output``; else, for the
    table's window, the model's max output; else (an explicit window) 20% of that window, never
    more than the model's max output when the table knows it: a small window given on purpose
    must not be swallowed by the reserve of the model's largest answer. The safety margin
    defaults to ``default_safety_margin(window)``.

    Args:
        model: a model name looked up with ``limits_for``; optional with an explicit window.
        context_window: the window, overriding the table's.
        max_output: the output reserve, overriding the table's.
        safety_margin: the margin, overriding the default.

    Raises:
        BudgetError: no window is known (unknown or missing model and no ``context_window``),
            or the reserve and margin leave no room in the window.
    """
    limits = _table_limits(model, context_window)
    window = context_window if context_window is not None else _window_of(model, limits)
    if max_output is not None:
        reserve = max_output
    elif context_window is None and limits is not None:
        reserve = limits.max_output
    else:
        reserve = int(window * UNKNOWN_OUTPUT_SHARE)
        if limits is not None:
            reserve = min(reserve, limits.max_output)
    margin = default_safety_margin(window) if safety_margin is None else safety_margin
    return Budget(window, reserve, margin)


def _table_limits(model: str | None, context_window: int | None) -> ModelLimits | None:
    """The table's limits; ``None`` for a missing model or an unknown one with a window."""
    if model is None:
        return None
    try:
        return limits_for(model)
    except BudgetError:
        if context_window is None:
            raise
        return None


def _window_of(model: str | None, limits: ModelLimits | None) -> int:
    if limits is None:
        raise BudgetError(f"no context window for model {model!r}: pass context_window")
    return limits.context_window

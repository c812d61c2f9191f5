"""The model table and the history budget: window - output reserve - safety margin."""

from __future__ import annotations

import dataclasses

import pytest

from memory.context.budget import (
    KNOWN_MODELS,
    Budget,
    ModelLimits,
    default_safety_margin,
    limits_for,
    plan_budget,
)
from memory.errors import BudgetError


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("gpt-4o", ModelLimits(128_000, 16_384)),
        ("gpt-4o-mini", ModelLimits(128_000, 16_384)),
        ("gpt-4o-mini-2024-07-18", ModelLimits(128_000, 16_384)),
        ("gpt-4.1-nano-2025-04-14", ModelLimits(1_047_576, 32_768)),
        ("gpt-4-turbo-2024-04-09", ModelLimits(128_000, 4_096)),
        ("gpt-4-0613", ModelLimits(8_192, 8_192)),
        ("gpt-3.5-turbo-0125", ModelLimits(16_385, 4_096)),
        ("o1", ModelLimits(200_000, 100_000)),
        ("o1-mini-2024-09-12", ModelLimits(128_000, 65_536)),
        ("o3-mini", ModelLimits(200_000, 100_000)),
        ("o4-mini", ModelLimits(200_000, 100_000)),
        ("openai/gpt-4o", ModelLimits(128_000, 16_384)),
        ("claude-3-5-sonnet-20241022", ModelLimits(200_000, 8_192)),
        ("anthropic/claude-3.5-haiku", ModelLimits(200_000, 8_192)),
        ("claude-3-7-sonnet-latest", ModelLimits(200_000, 64_000)),
        ("claude-sonnet-4-20250514", ModelLimits(200_000, 64_000)),
        ("anthropic/claude-opus-4.1", ModelLimits(200_000, 32_000)),
        ("claude-haiku-4-5", ModelLimits(200_000, 64_000)),
        ("Qwen/Qwen2.5-72B-Instruct", ModelLimits(32_768, 8_192)),
        ("qwen3:8b", ModelLimits(32_768, 8_192)),
        ("meta-llama/Llama-3.1-8B-Instruct", ModelLimits(131_072, 8_192)),
        ("meta-llama/Meta-Llama-3.1-70B-Instruct", ModelLimits(131_072, 8_192)),
        ("llama3.2:3b", ModelLimits(131_072, 8_192)),
        ("llama-3.3-70b-versatile", ModelLimits(131_072, 8_192)),
    ],
)
def test_limits_for_known_models(model: str, expected: ModelLimits) -> None:
    assert limits_for(model) == expected


def test_longest_prefix_wins() -> None:
    assert limits_for("gpt-4o-mini") != limits_for("gpt-4")
    assert limits_for("o1-mini") != limits_for("o1")


@pytest.mark.parametrize("model", ["mistral-large", "gpt-5", "", "my-finetune"])
def test_unknown_model_is_a_budget_error(model: str) -> None:
    with pytest.raises(BudgetError, match="unknown model"):
        limits_for(model)


def test_table_is_consistent_and_read_only() -> None:
    for name, limits in KNOWN_MODELS.items():
        assert name == name.lower()
        assert 0 < limits.max_output <= limits.context_window
    with pytest.raises(TypeError):
        KNOWN_MODELS["x"] = ModelLimits(1, 1)  # type: ignore[index]


def test_plan_from_the_table() -> None:
    budget = plan_budget("gpt-4o-mini")
    assert budget == Budget(128_000, 16_384, 2_560)
    assert budget.history == 128_000 - 16_384 - 2_560


def test_explicit_window_without_model_reserves_a_fifth() -> None:
    budget = plan_budget(context_window=8_000)
    assert (budget.reserved_output, budget.safety_margin, budget.history) == (1_600, 160, 6_240)


def test_explicit_window_for_unknown_model() -> None:
    assert plan_budget("my-finetune", context_window=10_000).reserved_output == 2_000


def test_explicit_numbers_win_over_the_table() -> None:
    budget = plan_budget("qwen3-8b", context_window=131_072, max_output=4_000, safety_margin=10)
    assert budget == Budget(131_072, 4_000, 10)
    assert plan_budget("qwen3-8b", context_window=131_072).reserved_output == 8_192


def test_zero_reserve_and_margin_are_allowed() -> None:
    assert plan_budget(context_window=100, max_output=0, safety_margin=0).history == 100


def test_safety_margin_default() -> None:
    assert default_safety_margin(1_000) == 64
    assert default_safety_margin(200_000) == 4_000


def test_unknown_model_without_window_is_an_error() -> None:
    with pytest.raises(BudgetError, match="mistral"):
        plan_budget("mistral-large")


def test_no_model_and_no_window_is_an_error() -> None:
    with pytest.raises(BudgetError, match="context_window"):
        plan_budget()


def test_reserve_larger_than_window_names_the_numbers() -> None:
    with pytest.raises(BudgetError) as caught:
        plan_budget("o1", context_window=50_000, max_output=100_000)
    message = str(caught.value)
    for number in ("100000", "1000", "50000"):
        assert number in message


def test_an_explicit_small_window_reserves_a_share_of_itself_not_the_tables_output() -> None:
    # gpt-4o-mini's table max output is 16,384: far more than a 1,000-token window.
    budget = plan_budget("gpt-4o-mini", context_window=1_000)
    assert (budget.reserved_output, budget.safety_margin, budget.history) == (200, 64, 736)
    # A large explicit window never reserves more than the model can write.
    assert plan_budget("gpt-4o-mini", context_window=128_000).reserved_output == 16_384
    assert plan_budget("gpt-4o-mini").reserved_output == 16_384


def test_reserve_plus_margin_equal_to_window_is_an_error() -> None:
    with pytest.raises(BudgetError):
        plan_budget(context_window=1_000, max_output=900, safety_margin=100)


def test_negative_numbers_are_errors() -> None:
    with pytest.raises(BudgetError, match="negative"):
        plan_budget(context_window=1_000, max_output=-1)
    with pytest.raises(BudgetError, match="negative"):
        plan_budget(context_window=1_000, safety_margin=-5)


def test_budget_is_frozen_and_checked_on_construction() -> None:
    budget = Budget(1_000, 100, 64)
    assert budget.history == 836
    with pytest.raises(dataclasses.FrozenInstanceError):
        budget.history = 5  # type: ignore[misc]
    with pytest.raises(BudgetError):
        Budget(100, 100, 0)
    assert isinstance(BudgetError("x"), ValueError)

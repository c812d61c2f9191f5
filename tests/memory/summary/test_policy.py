"""Planning a fold: when consolidation triggers and where the fold point falls."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory.context.messages import Message, parse_messages
from memory.context.units import current_turn_start, split_units, validate_history
from memory.errors import BudgetError
from memory.summary.policy import FoldPolicy, limit_fold, plan_fold


def user(text: str = "question") -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str = "answer") -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def calls(*ids: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": id_, "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
            for id_ in ids
        ],
    }


def result(id_: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": id_, "content": "found it"}


def plan(history: list[dict[str, Any]], tokens: list[int], **limits: int) -> int:
    settings = {"trigger_tokens": 100, "target_tokens": 60, "min_recent_messages": 0} | limits
    return plan_fold(parse_messages(history), tokens, **settings)


def test_nothing_is_folded_up_to_the_trigger() -> None:
    history = [user(), assistant(), user(), assistant()]

    assert plan(history, [25, 25, 25, 25]) == 0
    assert plan(history, [25, 25, 25, 26]) > 0


def test_past_the_trigger_the_newest_units_that_fit_the_target_are_kept() -> None:
    history = [user(), assistant(), user(), assistant(), user(), assistant()]

    # Kept from the newest: 20 + 20 (current turn) + 20 = 60 fits the target; +20 does not.
    assert plan(history, [20, 20, 20, 20, 20, 20]) == 3


def test_a_tool_exchange_is_kept_or_folded_whole() -> None:
    history = [user(), calls("a", "b"), result("a"), result("b"), assistant(), user(), assistant()]
    tokens = [30, 10, 10, 10, 10, 20, 20]

    # The current turn (40) plus the answer (10) fit; the whole exchange (30) does not.
    assert plan(history, tokens) == 4


def test_the_current_turn_is_kept_even_when_it_alone_exceeds_the_target() -> None:
    history = [user(), assistant(), user(), calls("a"), result("a"), assistant()]
    tokens = [10, 10, 10, 40, 40, 10]

    assert plan(history, tokens) == 2


def test_a_current_turn_that_is_the_whole_increment_is_not_folded() -> None:
    history = [user(), calls("a"), result("a"), calls("b"), result("b")]

    assert plan(history, [10, 50, 50, 50, 50]) == 0


def test_the_last_messages_are_kept_past_the_target_while_under_the_trigger() -> None:
    history = [user(), assistant(), user(), assistant(), user(), assistant()]
    tokens = [25, 25, 25, 25, 25, 25]

    assert plan(history, tokens, min_recent_messages=0) == 4  # 50 fits the target of 60
    assert plan(history, tokens, min_recent_messages=3) == 3  # 75 is past it, under 100
    assert plan(history, tokens, min_recent_messages=5) == 2  # 100 still fits the trigger
    assert plan(history, tokens, min_recent_messages=6) == 2  # 125 would not


def test_a_leading_run_of_orphan_tool_results_is_folded_whole() -> None:
    history = [result("old1"), result("old2"), user(), assistant()]

    # Keeping the second orphan would fit the target, but would leave a tool message first.
    assert plan(history, [90, 5, 5, 5]) == 2


def test_without_a_user_message_every_unit_is_a_candidate() -> None:
    history = [assistant(), assistant(), assistant()]

    assert plan(history, [50, 50, 50]) == 2


@pytest.mark.parametrize(
    ("tokens", "trigger", "target"),
    [([1, 2], 100, 60), ([1, 2, 3], 100, 101), ([1, 2, 3], 100, 0)],
)
def test_impossible_inputs_are_refused(tokens: list[int], trigger: int, target: int) -> None:
    with pytest.raises(BudgetError):
        plan([user(), assistant(), user()], tokens, trigger_tokens=trigger, target_tokens=target)


def test_the_default_policy_triggers_at_half_the_budget_and_keeps_sixty_percent() -> None:
    policy = FoldPolicy.for_history_budget(8_000)

    assert (policy.trigger_tokens, policy.target_tokens, policy.min_recent_messages) == (
        4_000,
        2_400,
        5,
    )
    history = parse_messages([user(), assistant()] * 20)
    assert policy.plan(history, [100] * 40) == 0
    # 4,001 tokens: keep the newest 23 messages (2,301 tokens), fold the 17 before them.
    assert policy.plan(history, [100] * 39 + [101]) == 17


def test_a_policy_refuses_a_target_above_its_trigger() -> None:
    with pytest.raises(BudgetError):
        FoldPolicy(trigger_tokens=100, target_tokens=200)


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[Message], list[int]]:
    """Valid increments: plain messages and tool exchanges, some with parallel calls."""
    raw: list[dict[str, Any]] = []
    # Tool results whose call was folded earlier: plan_fold never leaves them, but copes.
    raw.extend(result(f"orphan{n}") for n in range(draw(st.integers(0, 2))))
    for index in range(draw(st.integers(0, 20))):
        shape = draw(st.sampled_from(["user", "assistant", "tools"]))
        if shape == "tools":
            ids = [f"c{index}_{n}" for n in range(draw(st.integers(1, 3)))]
            raw.extend([calls(*ids), *map(result, ids)])
        else:
            raw.append(user() if shape == "user" else assistant())
    tokens = draw(st.lists(st.integers(1, 60), min_size=len(raw), max_size=len(raw)))
    return parse_messages(raw), tokens


@given(histories(), st.integers(1, 400), st.floats(0.1, 1.0), st.integers(0, 8))
def test_the_fold_point_is_a_safe_unit_boundary(
    history: tuple[list[Message], list[int]], trigger: int, share: float, recent: int
) -> None:
    messages, tokens = history
    target = max(int(trigger * share), 1)

    fold = plan_fold(
        messages, tokens, trigger_tokens=trigger, target_tokens=target, min_recent_messages=recent
    )

    turn = current_turn_start(messages)
    kept = sum(tokens[fold:])
    assert 0 <= fold <= turn
    if sum(tokens) <= trigger:
        assert fold == 0
        return
    starts = {unit.start for unit in split_units(messages)} | {len(messages)}
    assert fold in starts
    assert validate_history(messages[fold:], allow_pending_calls=True) == []
    assert kept <= trigger or fold == turn
    previous = max((start for start in starts if start < fold), default=None)
    if previous is not None and messages[previous].role != "tool":
        # The unit just before the fold point could not have been kept as well.
        grown = kept + sum(tokens[previous:fold])
        recent_unit = fold > len(messages) - recent
        assert grown > target and (grown > trigger or not recent_unit)


def test_limit_fold_keeps_whole_units_within_the_limit() -> None:
    history = parse_messages([user(), calls("a", "b"), result("b"), result("a"), assistant()])
    tokens = [10, 10, 10, 10, 10]

    assert limit_fold(history, tokens, 5, max_tokens=25) == 1
    assert limit_fold(history, tokens, 5, max_tokens=40) == 4
    assert limit_fold(history, tokens, 4, max_tokens=1_000) == 4


def test_limit_fold_always_folds_at_least_one_unit() -> None:
    history = parse_messages([calls("a"), result("a"), user()])

    assert limit_fold(history, [500, 500, 5], 2, max_tokens=10) == 2

"""Atomic units, the current turn, and structural validation."""

from __future__ import annotations

from itertools import accumulate
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from memory.context.messages import Message, parse_messages
from memory.context.units import (
    current_turn_start,
    find_problems,
    fit_newest,
    fit_newest_start,
    split_units,
    unit_spans,
    validate_history,
)

ROLES = ["system", "developer", "user", "assistant", "tool", "robot"]
KEYS = [
    "role",
    "content",
    "name",
    "tool_calls",
    "tool_call_id",
    "id",
    "function",
    "type",
    "text",
    "arguments",
    "x",
]


def call(call_id: str, name: str = "f") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


def asks(*call_ids: str) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [call(i) for i in call_ids]}


def result(call_id: str, content: str = "ok") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def user(text: str = "q") -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str = "a") -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def system(text: str = "s") -> dict[str, Any]:
    return {"role": "system", "content": text}


HISTORY = [
    system(),
    user(),
    asks("a", "b"),
    result("b"),
    result("a"),
    assistant(),
    system("later"),
    user(),
    asks("c"),
    result("c"),
]


def test_split_units_groups_calls_with_all_results() -> None:
    units = split_units(parse_messages(HISTORY))
    assert [(unit.start, unit.stop, unit.kind) for unit in units] == [
        (0, 1, "system"),
        (1, 2, "message"),
        (2, 5, "tool_exchange"),
        (5, 6, "message"),
        (6, 7, "message"),
        (7, 8, "message"),
        (8, 10, "tool_exchange"),
    ]


def test_first_system_is_pinned_wherever_it_stands() -> None:
    units = split_units(parse_messages([user(), {"role": "developer", "content": "d"}, system()]))
    assert [unit.kind for unit in units] == ["message", "system", "message"]


def test_split_units_of_nothing() -> None:
    assert split_units([]) == []


def test_current_turn_starts_at_the_last_user_message() -> None:
    assert current_turn_start(parse_messages(HISTORY)) == 7


def test_current_turn_without_user_message_is_empty() -> None:
    messages = parse_messages([system(), assistant()])
    assert current_turn_start(messages) == len(messages)


def test_valid_history_has_no_problems() -> None:
    assert validate_history(HISTORY) == []
    assert validate_history(parse_messages(HISTORY)) == []
    assert validate_history([]) == []


def test_results_in_any_order_are_valid() -> None:
    assert (
        validate_history([user(), asks("a", "b", "c"), result("c"), result("a"), result("b")]) == []
    )


def test_system_message_later_is_not_a_problem() -> None:
    assert validate_history([user(), assistant(), system(), user(), system()]) == []


def one_problem(messages: list[Any], **options: bool) -> str:
    problems = validate_history(messages, **options)
    assert len(problems) == 1, problems
    return problems[0]


def test_tool_message_first() -> None:
    assert one_problem([result("a")]).startswith("message 0:")


def test_tool_result_without_call() -> None:
    problem = one_problem([user(), result("zz")])
    assert problem.startswith("message 1:")
    assert "no preceding matching call" in problem


def test_call_without_all_results() -> None:
    problem = one_problem([user(), asks("a", "b"), result("a"), assistant()])
    assert problem.startswith("message 1:")
    assert "b have no result" in problem


def test_result_separated_from_its_call() -> None:
    problems = validate_history([user(), asks("a", "b"), result("a"), user(), result("b")])
    assert any(p.startswith("message 4:") and "separated" in p for p in problems)
    assert any(p.startswith("message 1:") and "no result" in p for p in problems)


def test_a_completed_call_id_may_be_used_again() -> None:
    # Local models and some OpenAI-compatible servers emit ``call_0`` every turn.
    messages = [user(), asks("a"), result("a"), user(), asks("a"), result("a")]
    assert validate_history(messages) == []
    assert validate_history([*messages, asks("a")], allow_pending_calls=True) == []


def test_duplicate_tool_call_id_in_one_message() -> None:
    problems = validate_history([user(), asks("a", "a"), result("a")])
    assert any(p.startswith("message 1:") and "duplicate tool_call_id" in p for p in problems)


def test_a_result_answers_the_nearest_preceding_call_with_its_id() -> None:
    # The first call of "a" was never answered: that call is the problem, not the reuse.
    problems = validate_history([user(), asks("a"), user(), asks("a"), result("a")])
    assert problems == ["message 1: tool call(s) a have no result"]


def test_problems_are_records_that_render_to_the_same_sentences() -> None:
    [problem] = find_problems([user(), asks("a"), result("a"), user(), result("a")])
    assert (problem.index, problem.related) == (4, 1)
    assert (
        str(problem) == validate_history([user(), asks("a"), result("a"), user(), result("a")])[0]
    )
    assert problem.describe(lambda index: f"#{index + 10}") == (
        "#14: tool result 'a' is separated from its call (#11) by another role"
    )


def test_duplicate_result() -> None:
    problem = one_problem([user(), asks("a"), result("a"), result("a")])
    assert problem.startswith("message 3:")
    assert "duplicate tool result" in problem


def test_unknown_tool_call_id() -> None:
    problems = validate_history([user(), asks("a"), result("a"), result("x")])
    assert problems == [
        "message 3: unknown tool_call_id 'x' (message 1 made no such call)",
    ]


def test_empty_ids() -> None:
    empty_call = {"role": "assistant", "tool_calls": [call("")]}
    assert one_problem([user(), empty_call]).startswith("message 1:")
    assert "without a tool_call_id" in one_problem([user(), asks("a"), result("a"), result("")])


def test_malformed_dicts_are_problems_with_their_index() -> None:
    problems = validate_history([user(), {"role": "robot"}, {"content": "x"}, 3])  # type: ignore[list-item]
    assert [p.split(":")[0] for p in problems] == ["message 1", "message 2", "message 3"]


def test_pending_calls_at_the_end() -> None:
    pending = [user(), asks("a", "b"), result("a")]
    assert "no result" in one_problem(pending)
    assert validate_history(pending, allow_pending_calls=True) == []
    # Pending calls are allowed only at the very end.
    early = [user(), asks("a"), user()]
    assert "no result" in one_problem(early, allow_pending_calls=True)


@pytest.mark.parametrize("role", ["system", "developer", "user", "assistant"])
def test_every_non_tool_role_can_come_first(role: str) -> None:
    assert validate_history([Message(role=role, content="x")]) == []  # type: ignore[arg-type]


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.text(max_size=3), st.sampled_from(ROLES)
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(KEYS) | st.integers(0, 2), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.dictionaries(st.sampled_from(KEYS), values, max_size=5))
@pytest.mark.slow
def test_a_dict_is_a_problem_exactly_when_it_does_not_parse(data: dict[str, Any]) -> None:
    # validate_history reads plain dicts without pydantic when it can: it must agree with it.
    try:
        Message.model_validate(data)
    except ValidationError:
        parses = False
    else:
        parses = True
    event("parses" if parses else "does not parse")
    problems = validate_history([data])
    assert any("not a chat message" in p for p in problems) is not parses


@pytest.mark.parametrize(
    "data",
    [
        {"role": "user", "content": "x", 1: "numeric key"},
        {"role": "user", "content": [{"type": "text", 1: "x"}]},
        {"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "f", 2: 1}}]},
        {"role": "assistant", "tool_calls": [{"id": "a", "type": None, "function": {"name": "f"}}]},
        {"role": "assistant", "tool_calls": [{"id": 1, "function": {"name": "f"}}]},
        {"role": "tool", "tool_call_id": 5, "content": "x"},
        {"role": "user", "content": "x", "name": 3},
    ],
)
def test_near_misses_are_problems(data: dict[Any, Any]) -> None:
    assert "not a chat message" in one_problem([data])


@settings(max_examples=500, deadline=None, derandomize=True)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["user", "assistant", "tool", "tool", "system"]), st.integers(0, 9)
        )
    ),
    st.integers(-3, 60),
    st.data(),
)
@pytest.mark.slow
def test_fit_newest_start_is_where_fit_newests_run_starts(
    messages: list[tuple[str, int]], budget: int, data: st.DataObject
) -> None:
    roles = [role for role, _ in messages]
    before = [0, *accumulate(cost for _, cost in messages)]
    # fit_newest fits the units ending at a unit's end: a non-tool message or the end.
    ends = [i for i in range(1, len(roles)) if roles[i] != "tool"] + [len(roles)]
    stop = data.draw(st.sampled_from([0, *ends]))

    kept = fit_newest(unit_spans(roles, stop), budget, lambda s: before[s[1]] - before[s[0]])

    assert fit_newest_start(roles, before, stop, budget) == (kept[0][0] if kept else stop)
    event("all fit" if kept and kept[0][0] == 0 else "some fit" if kept else "none fit")

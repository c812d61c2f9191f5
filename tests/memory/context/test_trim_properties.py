"""Properties of trim_history on generated histories, for every budget from 0 to the total."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from memory.context.assembler import assemble
from memory.context.messages import parse_messages
from memory.context.tokens import REPLY_PRIMING_TOKENS, count_tokens, counter_for_model
from memory.context.trim import cap_tool_results, trim_history
from memory.context.units import (
    current_turn_start,
    find_problems,
    find_problems_past,
    split_units,
    unit_tokens,
    validate_history,
)
from memory.errors import ContextOverflowError, InvalidHistoryError

MODEL = "gpt-4o-mini"
MARKER = "tokens cut by stratamem"
SYSTEM_ROLES = ("system", "developer")
PROPERTIES = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

Dict = dict[str, Any]

PHRASES = [
    "hello",
    "what is the weather in Paris?",
    "今天天气怎么样",
    "请帮我总结这份报告",
    "ok",
    "",
    "line one\nline two",
    "<|endoftext|> is just text here",
]
text = st.one_of(st.sampled_from(PHRASES), st.text(max_size=30))
content_parts = st.lists(
    st.one_of(
        st.builds(lambda t: {"type": "text", "text": t}, text),
        st.just({"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}),
    ),
    min_size=1,
    max_size=3,
)
tool_output = st.one_of(
    text,
    st.integers(50, 600).map(lambda n: " ".join(f"row{i} 数据{i % 7}" for i in range(n))),
)


@dataclass
class Ids:
    """Hands out unique tool call ids inside one generated history."""

    next: int = 0

    def new(self) -> str:
        self.next += 1
        return f"call_{self.next}"


def tool_exchange(draw: st.DrawFn, ids: Ids) -> list[Dict]:
    call_ids = [ids.new() for _ in range(draw(st.integers(1, 3)))]
    calls = [
        {"id": i, "type": "function", "function": {"name": "lookup", "arguments": '{"q": 1}'}}
        for i in call_ids
    ]
    asking: Dict = {"role": "assistant", "content": draw(st.none() | text), "tool_calls": calls}
    order = draw(st.permutations(call_ids))
    results = [{"role": "tool", "tool_call_id": i, "content": draw(tool_output)} for i in order]
    return [asking, *results]


def ordinary(draw: st.DrawFn) -> Dict:
    kind = draw(st.sampled_from(["user", "user_parts", "assistant", "system"]))
    if kind == "user_parts":
        return {"role": "user", "content": draw(content_parts)}
    return {"role": kind, "content": draw(text)}


@st.composite
def histories(draw: st.DrawFn) -> list[Dict]:
    """Valid histories: optional system first, units, optional in-progress current turn."""
    ids = Ids()
    messages: list[Dict] = []
    if draw(st.booleans()):
        messages.append(
            {"role": draw(st.sampled_from(["system", "developer"])), "content": "Be kind."}
        )
    for _ in range(draw(st.integers(0, 12))):
        if draw(st.integers(0, 3)) == 0:
            messages.extend(tool_exchange(draw, ids))
        else:
            messages.append(ordinary(draw))
    if draw(st.booleans()):
        messages.append({"role": "user", "content": draw(st.one_of(text, content_parts))})
        for _ in range(draw(st.integers(0, 2))):
            messages.extend(tool_exchange(draw, ids))
        if draw(st.booleans()):
            messages.append({"role": "assistant", "content": draw(text)})
    # A unique unknown key tells equal messages apart (and checks that extra keys survive).
    return [{**message, "x-seq": seq} for seq, message in enumerate(messages)]


def first_system_index(messages: list[Dict]) -> int | None:
    return next((i for i, m in enumerate(messages) if m["role"] in ("system", "developer")), None)


def is_cut_of(output: Dict, original: Dict) -> bool:
    return (
        original["role"] == output["role"] == "tool"
        and output["tool_call_id"] == original["tool_call_id"]
        and MARKER in str(output["content"])
    )


def match_subsequence(output: list[Dict], messages: list[Dict]) -> list[int]:
    """The input index of every output message; fails unless the output is a subsequence."""
    indices: list[int] = []
    position = 0
    for message in output:
        while position < len(messages) and not (
            messages[position] == message or is_cut_of(message, messages[position])
        ):
            position += 1
        assert position < len(messages), f"{message} is not from the input, in order"
        indices.append(position)
        position += 1
    return indices


def mandatory_tokens(messages: list[Dict], *, cut_to: int | None) -> int:
    """Tokens of the first system message and the current turn (results cut to ``cut_to``)."""
    counter = counter_for_model(MODEL)
    parsed = parse_messages(messages)
    turn = current_turn_start(parsed)
    units = [u for u in split_units(parsed) if u.kind == "system" or u.start >= turn]
    if cut_to is not None:
        units = [cap_tool_results(u, cut_to, counter) for u in units]
    return sum(unit_tokens(u, counter) for u in units) + REPLY_PRIMING_TOKENS


@st.composite
def histories_and_budgets(draw: st.DrawFn) -> tuple[list[Dict], int]:
    messages = draw(histories())
    total = count_tokens(messages, model=MODEL)
    budget = draw(
        st.one_of(
            st.integers(0, total + 50),
            st.sampled_from([0, max(total - 1, 0), total]),
            st.integers(min(mandatory_tokens(messages, cut_to=0), total), total),
        )
    )
    return messages, budget


@PROPERTIES
@given(histories_and_budgets())
@pytest.mark.slow
def test_trim_keeps_every_promise(case: tuple[list[Dict], int]) -> None:
    messages, budget = case
    assert validate_history(messages) == []
    snapshot = [dict(m) for m in messages]
    try:
        output = trim_history(messages, budget, model=MODEL)
    except ContextOverflowError as overflow:
        event("overflow")
        # Only when the mandatory part cannot fit, even with its results cut to the marker.
        assert overflow.budget == budget
        assert overflow.required > budget
        assert overflow.required == mandatory_tokens(messages, cut_to=0)
        assert mandatory_tokens(messages, cut_to=None) > budget
        return
    finally:
        assert messages == snapshot
    total = count_tokens(messages, model=MODEL)

    assert validate_history(output) == []
    assert count_tokens(output, model=MODEL) <= budget
    if total <= budget:
        event("fits")
        assert output == messages
        assert output is not messages
        return

    event("trimmed, results cut" if any(m not in messages for m in output) else "trimmed")
    kept = match_subsequence(output, messages)
    system = first_system_index(messages)
    if system is not None:
        assert system in kept
        if system == 0:
            assert output[0] == messages[0]
    turn = current_turn_start(parse_messages(messages))
    assert kept[len(kept) - (len(messages) - turn) :] == list(range(turn, len(messages)))
    window = [i for i in range(turn) if i != system]
    kept_window = [i for i in kept if i in set(window)]
    assert kept_window == window[len(window) - len(kept_window) :], "not a contiguous recent run"


@PROPERTIES
@given(histories(), st.integers(0, 2_000))
@pytest.mark.slow
def test_ordinary_messages_are_never_changed(messages: list[Dict], budget: int) -> None:
    try:
        output = trim_history(messages, budget, model=MODEL)
    except ContextOverflowError:
        assert mandatory_tokens(messages, cut_to=None) > budget
        return
    changed = [m for m in output if m not in messages]
    assert all(m["role"] == "tool" and MARKER in str(m["content"]) for m in changed)


def break_history(draw: st.DrawFn, messages: list[Dict]) -> list[Dict]:
    """One structural fault in an otherwise valid history that has a tool exchange."""
    tools = [i for i, m in enumerate(messages) if m["role"] == "tool"]
    asking = [i for i, m in enumerate(messages) if m.get("tool_calls")]
    fault = draw(st.sampled_from(["drop_result", "drop_call", "interrupt", "duplicate", "first"]))
    broken = list(messages)
    if fault == "drop_result":
        del broken[draw(st.sampled_from(tools))]
    elif fault == "drop_call":
        del broken[draw(st.sampled_from(asking))]
    elif fault == "interrupt":
        broken.insert(draw(st.sampled_from(tools)), {"role": "user", "content": "wait"})
    elif fault == "duplicate":
        broken.insert(draw(st.sampled_from(tools)) + 1, broken[draw(st.sampled_from(tools))])
    else:
        broken.insert(0, broken[draw(st.sampled_from(tools))])
    return broken


@st.composite
def invalid_histories(draw: st.DrawFn) -> list[Dict]:
    messages = draw(histories())
    if not any(m["role"] == "tool" for m in messages):
        messages = [*messages, {"role": "user", "content": "go"}, *tool_exchange(draw, Ids(100))]
    if draw(st.integers(0, 4)) == 0:
        broken = list(messages)
        broken.insert(draw(st.integers(0, len(broken))), {"role": "robot", "content": 1})
        return broken
    return break_history(draw, messages)


@PROPERTIES
@given(invalid_histories(), st.integers(0, 5_000))
@pytest.mark.slow
def test_invalid_histories_raise(messages: list[Dict], budget: int) -> None:
    problems = validate_history(messages)
    assert problems
    try:
        trim_history(messages, budget, model=MODEL)
    except InvalidHistoryError as error:
        assert error.problems
    else:
        raise AssertionError("an invalid history was trimmed")


@PROPERTIES
@given(history=histories(), data=st.data())
@pytest.mark.slow
def test_trim_history_and_the_assembler_keep_the_same_messages(
    history: list[Dict], data: st.DataObject
) -> None:
    # The assembler sends the system message first: compare where it already stands first.
    if first_system_index(history) not in (None, 0):
        history = [message for message in history if message["role"] not in SYSTEM_ROLES]
    counter = counter_for_model(MODEL)
    budget = data.draw(st.integers(0, count_tokens(history, model=MODEL) + 10))
    recent = data.draw(st.integers(0, 6))
    try:
        trimmed = trim_history(history, budget, model=MODEL)
    except ContextOverflowError:
        with pytest.raises(ContextOverflowError):
            assemble(parse_messages(history), budget=budget, counter=counter)
        return
    assembled = assemble(
        parse_messages(history), budget=budget, counter=counter, recent_messages=recent
    )
    assert assembled.messages == trimmed
    assert validate_history(assembled.messages) == []  # the assembler no longer re-checks


@st.composite
def stored_and_more(draw: st.DrawFn) -> tuple[list[Dict], int]:
    """A run of stored messages and what follows it (valid or not), and the run's length.

    The run is valid but for calls of its last unit, which may still wait for results (as a
    session is between two requests). What follows is built from pieces that parse but may
    break every rule: results for calls made, answered or never made, empty and repeated ids.
    """
    stored = draw(histories())
    if draw(st.booleans()):
        exchange = tool_exchange(draw, Ids(500))
        stored = [*stored, *exchange[: draw(st.integers(1, len(exchange)))]]
    made = [call["id"] for m in stored for call in m.get("tool_calls", ())]
    ids = st.sampled_from([*made, "call_900", ""])
    piece = st.one_of(
        st.builds(lambda i: {"role": "tool", "tool_call_id": i, "content": "r"}, ids),
        st.just({"role": "user", "content": "go on"}),
        st.just({"role": "assistant", "content": "done"}),
        st.lists(ids, min_size=1, max_size=3).map(
            lambda call_ids: {
                "role": "assistant",
                "tool_calls": [
                    {"id": i, "type": "function", "function": {"name": "f", "arguments": ""}}
                    for i in call_ids
                ],
            }
        ),
    )
    return [*stored, *draw(st.lists(piece, max_size=6))], len(stored)


@PROPERTIES
@given(stored_and_more())
@pytest.mark.slow
def test_checking_past_a_valid_run_finds_what_checking_everything_finds(
    case: tuple[list[Dict], int],
) -> None:
    messages, valid_through = case
    parsed = parse_messages(messages)

    assert find_problems_past(parsed, valid_through) == find_problems(parsed)
    event("problems" if find_problems(parsed) else "valid")

"""The hard cap, rule by rule, and a property test of its priority order."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from memory.context.assembler import context_parts
from memory.context.cap import (
    CappedContext,
    apply_cap,
    drop_memories,
    drop_recent_units,
    drop_window_units,
    shorten_summary,
)
from memory.context.floors import Floors, retrieved_tokens
from memory.context.messages import Message, parse_messages
from memory.context.parts import (
    SUMMARY_MIN_TOKENS,
    ContextParts,
    RetrievedMemory,
    SummaryContext,
    memories_message,
    summary_message,
)
from memory.context.report import Dropped
from memory.context.tokens import REPLY_PRIMING_TOKENS, TiktokenCounter, TokenCounter
from memory.context.trim import cap_tool_results
from memory.context.units import unit_tokens, validate_history
from memory.errors import ContextOverflowError

CUT_MARKER = re.compile(r"\[… (\d+) tokens cut by stratamem …\]")


class WordCounter:
    """A token counter that counts words: one per word, one per message, one per tool call."""

    def count_text(self, text: str) -> int:
        return len(text.split())

    def count_message(self, message: Message) -> int:
        calls = sum(
            1 + self.count_text(call.function.arguments) for call in message.tool_calls or ()
        )
        return 1 + self.count_text(message.text) + calls


COUNTER = WordCounter()


def words(count: int, tag: str = "w") -> str:
    return " ".join(f"{tag}{index}" for index in range(count))


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def tool_exchange(call_ids: list[str], sizes: list[int]) -> list[dict[str, Any]]:
    calls = [
        {"id": call_id, "type": "function", "function": {"name": "search", "arguments": "{}"}}
        for call_id in call_ids
    ]
    results = [
        {"role": "tool", "tool_call_id": call_id, "content": words(size, call_id)}
        for call_id, size in zip(call_ids, sizes, strict=True)
    ]
    return [{"role": "assistant", "content": None, "tool_calls": calls}, *results]


def conversation(turns: int, size: int = 9) -> list[dict[str, Any]]:
    """System, then ``turns`` user/assistant pairs of ``size`` words, then the current turn."""
    messages = [{"role": "system", "content": words(4, "sys")}]
    for turn in range(turns):
        messages += [user(words(size, f"u{turn}.")), assistant(words(size, f"a{turn}."))]
    return [*messages, user(words(4, "now"))]


def parts_of(
    messages: list[dict[str, Any]],
    *,
    summary: SummaryContext | None = None,
    memories: tuple[RetrievedMemory, ...] = (),
    recent_messages: int = 0,
) -> ContextParts:
    return context_parts(
        parse_messages(messages),
        summary=summary,
        memories=memories,
        recent_messages=recent_messages,
    )


def total(capped: CappedContext) -> int:
    measured = capped.parts.measure(COUNTER).total
    assert capped.total == measured  # the running total never drifts from a recount
    return measured


def start(parts: ContextParts) -> CappedContext:
    return CappedContext(parts, parts.measure(COUNTER).total)


def test_a_context_that_fits_is_left_alone() -> None:
    parts = parts_of(
        conversation(3) + tool_exchange(["c1"], [50]),
        summary=SummaryContext(words(40), 6, "llm"),
        memories=(RetrievedMemory("likes tea", 0.2),),
    )
    capped = apply_cap(parts, budget=parts.measure(COUNTER).total, counter=COUNTER)
    assert capped == start(parts)


def test_a_negative_budget_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="must not be negative"):
        apply_cap(parts_of(conversation(1)), budget=-1, counter=COUNTER)


def test_oldest_window_units_go_first_and_only_as_many_as_needed() -> None:
    parts = parts_of(conversation(4))  # 8 window messages of 10 tokens each
    capped = apply_cap(parts, budget=parts.measure(COUNTER).total - 25, counter=COUNTER)
    assert [drop.detail.split(" (")[0] for drop in capped.dropped] == [
        "message 1",
        "message 2",
        "message 3",
    ]
    assert {drop.layer for drop in capped.dropped} == {"window"}
    assert [drop.tokens for drop in capped.dropped] == [10, 10, 10]
    assert all("oldest window units go first" in drop.reason for drop in capped.dropped)
    assert [unit.start for unit in capped.parts.window] == [4, 5, 6, 7, 8]


def test_a_dropped_tool_exchange_is_described_by_its_indices_and_calls() -> None:
    messages = [user("hi"), *tool_exchange(["a", "b"], [5, 5]), assistant("ok"), user("now")]
    parts = parts_of(messages)
    capped = apply_cap(parts, budget=parts.measure(COUNTER).total - 1, counter=COUNTER)
    assert [drop.detail for drop in capped.dropped] == ['message 0 (user: "hi")']
    capped = apply_cap(parts, budget=parts.measure(COUNTER).total - 3, counter=COUNTER)
    assert (
        capped.dropped[1].detail == "messages 1-3 (assistant tool calls search, search + 2 results)"
    )
    assert capped.dropped[1].tokens == 5 + 6 + 6  # each call costs 1 + its arguments


def test_window_units_are_whole_and_a_contiguous_run_back_from_the_turn() -> None:
    # A big unit between small ones: dropping it must also drop everything older.
    messages = [user("old"), *tool_exchange(["big"], [60]), assistant("small"), user("now")]
    parts = parts_of(messages)
    capped = apply_cap(
        parts, budget=parts.measure(COUNTER).total - 30, counter=COUNTER, tool_result_max_tokens=999
    )
    assert [unit.start for unit in capped.parts.window] == [3]
    assert len(capped.dropped) == 2


def test_memories_go_after_the_window_the_last_in_prompt_order_first_and_pins_never() -> None:
    # Recall's order, not the score, says which memory matters most: the current value of a
    # fact the question names comes first even when search scored it low.
    memories = (
        RetrievedMemory("pinned fact", 0.0, pinned=True, id="pin"),
        RetrievedMemory(words(5, "current"), 0.1, id="current"),
        RetrievedMemory(words(5, "later"), 0.9, id="later"),
    )
    parts = parts_of(conversation(2), memories=memories)
    window_tokens = parts.measure(COUNTER).window
    capped = apply_cap(
        parts, budget=parts.measure(COUNTER).total - window_tokens - 1, counter=COUNTER
    )
    assert [drop.layer for drop in capped.dropped] == ["window"] * 4 + ["memories"]
    assert capped.dropped[-1].detail == "memory later (score 0.900)"
    assert capped.dropped[-1].tokens == 6  # one bullet word "-" plus five words
    assert [memory.id for memory in capped.parts.memories] == ["pin", "current"]

    capped = apply_cap(parts, budget=0 + _mandatory(parts) + 1, counter=COUNTER)
    assert [memory.id for memory in capped.parts.memories] == ["pin"]


def test_of_memories_with_equal_scores_the_later_one_goes_first_too() -> None:
    memories = (
        RetrievedMemory("first one", 0.5, id="a"),
        RetrievedMemory("second one", 0.5, id="b"),
    )
    parts = parts_of([user("now")], memories=memories)
    capped = drop_memories(start(parts), parts.measure(COUNTER).total - 1, COUNTER)
    assert [memory.id for memory in capped.parts.memories] == ["a"]


def test_the_last_memory_takes_its_label_with_it() -> None:
    parts = parts_of([user("now")], memories=(RetrievedMemory("only", 0.5, id="m"),))
    label = parts.measure(COUNTER).memories
    capped = drop_memories(start(parts), parts.measure(COUNTER).total - 1, COUNTER)
    assert capped.parts.memories == ()
    assert capped.dropped[0].tokens == label
    assert capped.parts.measure(COUNTER).memories == 0


def test_the_summary_is_shortened_after_the_memories_keeping_an_llm_summary_head() -> None:
    summary = SummaryContext(words(200, "s"), 30, "llm")
    parts = parts_of([user("now")], summary=summary, memories=(RetrievedMemory("x y", 0.3),))
    budget = parts.measure(COUNTER).total - 100
    capped = apply_cap(parts, budget=budget, counter=COUNTER)
    assert [drop.layer for drop in capped.dropped] == ["memories", "summary"]
    assert capped.summary_shortened
    shortened = capped.parts.summary
    assert shortened is not None
    assert shortened.text.startswith("s0 s1 s2")
    marker = CUT_MARKER.search(shortened.text)
    assert marker is not None
    kept = shortened.text[: marker.start()].split()
    assert int(marker.group(1)) == 200 - len(kept)
    assert total(capped) <= budget
    drop = capped.dropped[-1]
    before = COUNTER.count_message(summary_message(summary))
    after = COUNTER.count_message(summary_message(shortened))
    assert drop.tokens == before - after
    assert f"shortened from {before} to {after} tokens" in drop.detail


def test_a_raw_archive_keeps_its_tail() -> None:
    summary = SummaryContext(words(200, "r"), 30, "raw")
    parts = parts_of([user("now")], summary=summary)
    capped = shorten_summary(start(parts), parts.measure(COUNTER).total - 100, COUNTER)
    assert capped.parts.summary is not None
    assert capped.parts.summary.text.endswith("r198 r199")
    assert capped.parts.summary.text.startswith("[… ")


def test_a_summary_that_would_fall_below_the_minimum_is_dropped() -> None:
    summary = SummaryContext(words(SUMMARY_MIN_TOKENS + 5, "s"), 30, "llm")
    parts = parts_of([user("now")], summary=summary)
    tokens = parts.measure(COUNTER).summary
    capped = apply_cap(parts, budget=parts.measure(COUNTER).total - 10, counter=COUNTER)
    assert capped.parts.summary is None
    assert not capped.summary_shortened
    assert capped.dropped[0].layer == "summary"
    assert capped.dropped[0].tokens == tokens
    assert f"below {SUMMARY_MIN_TOKENS} tokens" in capped.dropped[0].reason


def test_recent_units_are_protected_until_the_summary_is_gone_then_go_oldest_first() -> None:
    summary = SummaryContext(words(10, "s"), 4, "llm")
    parts = parts_of(conversation(3), summary=summary, recent_messages=3)
    assert [unit.start for unit in parts.recent] == [4, 5, 6]
    budget = parts.measure(COUNTER).total - parts.measure(COUNTER).summary - 3 * 10 - 5
    capped = apply_cap(parts, budget=budget, counter=COUNTER)
    assert [drop.layer for drop in capped.dropped] == ["window"] * 3 + ["summary", "recent"]
    assert capped.dropped[-1].detail.startswith("message 4 ")
    assert "most recent units go last" in capped.dropped[-1].reason
    assert [unit.start for unit in capped.parts.recent] == [5, 6]


def test_the_current_turn_is_never_dropped_but_its_big_tool_results_are_cut() -> None:
    messages = [*conversation(2)[:-1], user("go"), *tool_exchange(["t1", "t2"], [300, 5])]
    parts = parts_of(messages)
    capped = apply_cap(parts, budget=120, counter=COUNTER)
    turn = [message for unit in capped.parts.current_turn for message in unit.messages]
    assert [message.role for message in turn] == ["user", "assistant", "tool", "tool"]
    assert CUT_MARKER.search(turn[2].text)
    assert turn[3].text == words(5, "t2")
    assert COUNTER.count_message(turn[2]) <= 120 // 4
    (cut,) = capped.cuts
    assert (cut.layer, cut.index, cut.tool_call_id) == ("input", 7, "t1")
    assert (cut.tokens_before, cut.tokens_after) == (301, COUNTER.count_message(turn[2]))
    assert total(capped) <= 120


def test_the_current_turn_is_cut_further_when_the_mandatory_part_needs_it() -> None:
    parts = parts_of([user("go"), *tool_exchange(["t1"], [300])])
    capped = apply_cap(parts, budget=60, counter=COUNTER, tool_result_max_tokens=200)
    tool = capped.parts.current_turn[1].messages[1]
    assert 0 < COUNTER.count_message(tool) <= 60
    assert total(capped) <= 60
    marker = CUT_MARKER.search(tool.text)
    assert marker is not None
    assert int(marker.group(1)) > 200


LOOP_MEMORIES = (
    RetrievedMemory(words(8, "best"), 0.9, id="best"),
    RetrievedMemory(words(8, "next"), 0.6, id="next"),
    RetrievedMemory(words(8, "last"), 0.3, id="last"),
)


def test_a_tool_loop_cuts_its_results_further_to_leave_the_summary_and_memories_their_floors() -> (
    None
):
    # Four results of 300 tokens: cut to a quarter of the budget (200) each, they fill it.
    summary = SummaryContext(words(200, "s"), 30, "llm")
    parts = parts_of(
        [user("go"), *tool_exchange(["t1", "t2", "t3", "t4"], [300] * 4)],
        summary=summary,
        memories=LOOP_MEMORIES,
    )
    capped = apply_cap(parts, budget=800, counter=COUNTER)

    floors = Floors.of(summary, LOOP_MEMORIES, 800, COUNTER)
    assert (floors.summary_limit, floors.memories_limit) == (80, 40)
    kept = capped.parts
    assert kept.summary is not None and kept.summary.text.startswith("s0 s1")
    assert SUMMARY_MIN_TOKENS < floors.summary <= 80
    # At least its floor (the turn's bisection may leave it a token more).
    assert floors.summary <= COUNTER.count_message(summary_message(kept.summary)) <= 82
    assert [memory.id for memory in kept.memories] == ["best"]  # the best that fit 40 tokens
    assert [(drop.layer, drop.detail.split(" (")[0]) for drop in capped.dropped] == [
        ("memories", "memory last"),
        ("memories", "memory next"),
        ("summary", "summary"),
    ]
    assert all("floor" in drop.reason for drop in capped.dropped)
    results = [m for unit in kept.current_turn for m in unit.messages if m.role == "tool"]
    assert len(results) == 4
    for result in results:
        assert CUT_MARKER.search(result.text)
        assert result.text.startswith("t") and result.text.split()[-1].endswith("299")
        assert COUNTER.count_message(result) < 200
    assert [cut.layer for cut in capped.cuts] == ["input"] * 4
    assert total(capped) <= 800


def test_the_recent_units_go_before_the_summary_and_memories_fall_below_their_floors() -> None:
    summary = SummaryContext(words(200, "s"), 30, "llm")
    messages = [
        user("before"),
        assistant(words(300, "r")),
        user("go"),
        *tool_exchange(["t1", "t2", "t3", "t4"], [300] * 4),
    ]
    parts = parts_of(messages, summary=summary, memories=LOOP_MEMORIES, recent_messages=2)
    capped = apply_cap(parts, budget=800, counter=COUNTER)

    assert [drop.layer for drop in capped.dropped] == ["memories", "memories", "summary"] + [
        "recent"
    ] * 2
    assert "most recent units go last" in capped.dropped[-1].reason
    assert capped.parts.recent == ()
    assert capped.parts.summary is not None
    assert [memory.id for memory in capped.parts.memories] == ["best"]
    assert total(capped) <= 800


def test_below_their_floors_only_when_the_current_turn_cannot_give_more() -> None:
    # A long question and no tool result to cut: the floors (80 + 32 tokens) cannot be kept.
    summary = SummaryContext(words(200, "s"), 30, "llm")
    parts = parts_of([user(words(700, "q"))], summary=summary, memories=LOOP_MEMORIES)
    capped = apply_cap(parts, budget=780, counter=COUNTER)

    assert not floors_fit(parts, 780, COUNTER)
    below = [drop for drop in capped.dropped if "below its floor" in drop.reason]
    assert [drop.layer for drop in below] == ["memories", "summary"]
    assert capped.parts.memories == ()
    assert capped.parts.summary is not None
    marker = CUT_MARKER.search(capped.parts.summary.text)
    assert marker is not None and int(marker.group(1)) > 200 - 80  # counted from the original
    assert total(capped) <= 780


def test_window_tool_results_are_cut_to_a_quarter_of_the_budget_by_default() -> None:
    messages = [user("q"), *tool_exchange(["w1"], [200]), assistant("a"), user("now")]
    parts = parts_of(messages)
    capped = apply_cap(parts, budget=150, counter=COUNTER)
    (cut,) = capped.cuts
    assert (cut.layer, cut.index, cut.tool_call_id) == ("window", 2, "w1")
    assert cut.tokens_before == 201
    assert cut.tokens_after <= 150 // 4
    assert capped.dropped == ()


def test_cuts_in_units_that_are_dropped_later_are_not_reported() -> None:
    messages = [user("q"), *tool_exchange(["w1"], [200]), *conversation(3)[1:]]
    parts = parts_of(messages)
    capped = apply_cap(parts, budget=70, counter=COUNTER)
    assert any(drop.detail.startswith("messages 1-2") for drop in capped.dropped)
    assert capped.cuts == ()


def test_recent_tool_results_are_reported_as_recent_cuts() -> None:
    messages = [user("q"), *tool_exchange(["r1"], [200]), user("now")]
    capped = apply_cap(parts_of(messages, recent_messages=5), budget=150, counter=COUNTER)
    assert [cut.layer for cut in capped.cuts] == ["recent"]


def test_overflow_names_the_numbers_of_the_mandatory_part() -> None:
    messages = [{"role": "system", "content": words(30)}, user(words(40))]
    pins = (RetrievedMemory(words(10), 1.0, pinned=True),)
    parts = parts_of(messages, memories=pins)
    with pytest.raises(ContextOverflowError) as caught:
        apply_cap(parts, budget=60, counter=COUNTER)
    label = memories_message(pins)
    assert label is not None
    pin_tokens = COUNTER.count_message(label)
    assert pin_tokens == 1 + 22 + 11  # the label is 22 words, the bullet 11
    required = 31 + pin_tokens + 41 + REPLY_PRIMING_TOKENS
    assert (caught.value.required, caught.value.budget) == (required, 60)
    message = str(caught.value)
    assert f"needs {required} tokens but the budget is 60" in message
    assert "system message 31" in message
    assert "pinned memories 34" in message
    assert "current turn 41" in message


def test_overflow_is_not_raised_for_what_can_be_dropped() -> None:
    parts = parts_of(
        [user("now")],
        summary=SummaryContext(words(500), 80, "raw"),
        memories=(RetrievedMemory(words(300), 0.9),),
    )
    capped = apply_cap(parts, budget=10, counter=COUNTER)
    assert capped.parts.summary is None
    assert capped.parts.memories == ()
    assert total(capped) <= 10


def test_each_step_is_a_no_op_when_the_context_fits() -> None:
    parts = parts_of(
        conversation(2), summary=SummaryContext("s", 1, "llm"), memories=(RetrievedMemory("m", 1),)
    )
    capped = start(parts)
    budget = parts.measure(COUNTER).total
    for step in (drop_window_units, drop_memories, shorten_summary, drop_recent_units):
        assert step(capped, budget, COUNTER) == capped


def test_the_cap_does_not_mutate_its_input() -> None:
    parts = parts_of(conversation(3) + tool_exchange(["c"], [100]), recent_messages=2)
    snapshot = replace(parts)
    apply_cap(parts, budget=40, counter=COUNTER)
    assert parts == snapshot


def _mandatory(parts: ContextParts) -> int:
    pins = replace(
        parts,
        summary=None,
        memories=tuple(memory for memory in parts.memories if memory.pinned),
        window=(),
        recent=(),
    )
    return pins.measure(COUNTER).total


# -- property test ---------------------------------------------------------------------------

PHASES = {"window": 0, "memories": 1, "summary": 2, "recent": 3}
BELOW_FLOOR = 4  # memories and the summary below their floors, last


def phase(drop: Dropped) -> int:
    return BELOW_FLOOR if "below its floor" in drop.reason else PHASES[drop.layer]


def floors_fit(parts: ContextParts, budget: int, counter: TokenCounter) -> bool:
    """Whether system, pins, the current turn cut to its markers and the floors fit."""
    floors = Floors.of(parts.summary, parts.memories, budget, counter)
    least = replace(
        parts,
        summary=None,
        memories=tuple(memory for memory in parts.memories if memory.pinned),
        window=(),
        recent=(),
        current_turn=tuple(cap_tool_results(unit, 0, counter) for unit in parts.current_turn),
    )
    return least.measure(counter).total + floors.tokens <= budget


def assert_floors_kept(
    parts: ContextParts, capped: CappedContext, budget: int, counter: TokenCounter
) -> None:
    """The summary and the memories keep at least what their floors hold."""
    floors = Floors.of(parts.summary, parts.memories, budget, counter)
    kept = capped.parts
    assert not [drop for drop in capped.dropped if phase(drop) == BELOW_FLOOR]
    assert retrieved_tokens(kept.memories, counter) >= floors.memories
    if floors.summary:
        assert kept.summary is not None
        assert counter.count_message(summary_message(kept.summary)) >= floors.summary


TEXT = st.sampled_from(
    ["ok", "好的\uff0c我们继续", "the export job failed twice", "数据库 连接 池 已满"]
)


@st.composite
def histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if draw(st.booleans()):
        messages.append({"role": "system", "content": draw(TEXT) * draw(st.integers(1, 5))})
    calls = 0
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["user", "assistant", "tools", "parts"]))
        if kind == "tools":
            count = draw(st.integers(1, 3))
            ids = [f"call_{calls + index}" for index in range(count)]
            calls += count
            sizes = [draw(st.integers(1, 400)) for _ in ids]
            messages += tool_exchange(ids, sizes)
        elif kind == "parts":
            parts = [{"type": "text", "text": draw(TEXT)}, {"type": "image_url", "image_url": {}}]
            messages.append({"role": "user", "content": parts})
        else:
            messages.append({"role": kind, "content": draw(TEXT) * draw(st.integers(1, 30))})
    messages.append(user(draw(TEXT)))
    if draw(st.booleans()):
        messages += tool_exchange([f"call_{calls}"], [draw(st.integers(1, 600))])
    return messages


MEMORIES = st.lists(
    st.builds(
        RetrievedMemory,
        text=TEXT,
        score=st.floats(0, 1),
        pinned=st.booleans(),
        id=st.none() | st.text("abc", min_size=1, max_size=3),
    ),
    max_size=4,
)
SUMMARIES = st.none() | st.builds(
    SummaryContext,
    text=st.integers(1, 300).map(lambda size: words(size, "s")),
    covered=st.integers(1, 50),
    kind=st.sampled_from(["llm", "raw"]),
    degraded=st.booleans(),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    history=histories(),
    memories=MEMORIES,
    summary=SUMMARIES,
    recent=st.integers(0, 6),
    fraction=st.floats(0, 1.1) | st.floats(0.7, 1.0),
)
@pytest.mark.slow
def test_the_cap_keeps_the_priority_order_on_any_input(
    history: list[dict[str, Any]],
    memories: list[RetrievedMemory],
    summary: SummaryContext | None,
    recent: int,
    fraction: float,
) -> None:
    counter = TiktokenCounter("gpt-4o-mini")
    parts = context_parts(
        parse_messages(history), summary=summary, memories=memories, recent_messages=recent
    )
    budget = int(parts.measure(counter).total * fraction)
    try:
        capped = apply_cap(parts, budget=budget, counter=counter)
    except ContextOverflowError as error:
        event("overflow")
        assert error.budget == budget < error.required
        return
    for layer in sorted({drop.layer for drop in capped.dropped}):
        event(f"dropped from {layer}")
    if capped.summary_shortened:
        event("summary shortened")
    if capped.cuts:
        event("tool results cut")
    kept = capped.parts
    messages = kept.messages()
    assert validate_history(messages) == []
    assert kept.measure(counter).total <= budget
    assert kept.measure(counter).total == sum(map(counter.count_message, messages)) + 3
    # What is never dropped.
    assert kept.system == parts.system
    assert [m for m in kept.memories if m.pinned] == [m for m in parts.memories if m.pinned]
    assert [unit.start for unit in kept.current_turn] == [unit.start for unit in parts.current_turn]
    # Drops follow the priority order, and each layer goes only when the ones before are gone
    # (the memories and the summary down to their floors before the recent units go).
    phases = [phase(drop) for drop in capped.dropped]
    assert phases == sorted(phases)
    floors = Floors.of(parts.summary, parts.memories, budget, counter)
    if any(drop.layer != "window" for drop in capped.dropped):
        assert kept.window == ()
    if any(drop.layer in ("summary", "recent") for drop in capped.dropped):
        assert retrieved_tokens(kept.memories, counter) <= floors.memories_limit
    if any(drop.layer == "recent" for drop in capped.dropped) and kept.summary is not None:
        assert counter.count_message(summary_message(kept.summary)) <= floors.summary_limit
    if any(phase(drop) == BELOW_FLOOR for drop in capped.dropped):
        assert kept.recent == ()
    # The floors hold whenever the current turn's tool results can be cut to make room.
    if floors_fit(parts, budget, counter):
        event("floors fit")
        assert_floors_kept(parts, capped, budget, counter)
    # Units are whole and the window is a contiguous run back from the current turn.
    old = (*parts.window, *parts.recent)
    new = (*kept.window, *kept.recent)
    assert [unit.start for unit in new] == [unit.start for unit in old[len(old) - len(new) :]]
    dropped_units = len(old) - len(new)
    assert sum(drop.layer in ("window", "recent") for drop in capped.dropped) == dropped_units
    assert sum(unit_tokens(unit, counter) for unit in new) == kept.measure(counter).window


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(20, 2_000), min_size=1, max_size=4),
    summary_words=st.integers(0, 600),
    memory_words=st.lists(st.integers(1, 60), max_size=5),
    pinned=st.booleans(),
    turns=st.integers(0, 5),
    recent=st.integers(0, 4),
    budget=st.integers(100, 5_000),
)
@pytest.mark.slow
def test_in_a_tool_loop_the_summary_and_the_memories_keep_their_floors(
    sizes: list[int],
    summary_words: int,
    memory_words: list[int],
    pinned: bool,
    turns: int,
    recent: int,
    budget: int,
) -> None:
    ids = [f"t{index}" for index in range(len(sizes))]
    history = [*conversation(turns, size=30), *tool_exchange(ids, sizes)]
    summary = SummaryContext(words(summary_words, "s"), 9, "llm") if summary_words else None
    memories = [
        RetrievedMemory(words(size, f"m{index}."), 1 / (index + 1), id=f"m{index}")
        for index, size in enumerate(memory_words)
    ]
    if pinned:
        memories.append(RetrievedMemory("pinned fact", 1.0, pinned=True, id="pin"))
    parts = parts_of(history, summary=summary, memories=tuple(memories), recent_messages=recent)
    try:
        capped = apply_cap(parts, budget=budget, counter=COUNTER)
    except ContextOverflowError:
        event("overflow")
        assert not floors_fit(parts, budget, COUNTER)
        return
    kept = capped.parts
    assert validate_history(kept.messages()) == []
    assert total(capped) <= budget
    assert [unit.start for unit in kept.current_turn] == [unit.start for unit in parts.current_turn]
    results = [m for unit in kept.current_turn for m in unit.messages if m.role == "tool"]
    assert [result.tool_call_id for result in results] == ids  # cut, never dropped
    phases = [phase(drop) for drop in capped.dropped]
    assert phases == sorted(phases)
    if floors_fit(parts, budget, COUNTER):
        quarter = [cap_tool_results(unit, budget // 4, COUNTER) for unit in parts.current_turn]
        if start(replace(parts, current_turn=tuple(quarter))).total > budget:
            event("the results fill the budget: floors kept")
        assert_floors_kept(parts, capped, budget, COUNTER)
    else:
        event("the floors cannot fit")
        # Then the results were cut as far as they go: to their markers.
        assert all(CUT_MARKER.fullmatch(result.text) for result in results if result.text)

"""trim_history and its building blocks, rule by rule."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from memory.context.cut import cut_marker
from memory.context.messages import Message, parse_messages
from memory.context.tokens import REPLY_PRIMING_TOKENS, TiktokenCounter, count_tokens
from memory.context.trim import cap_tool_results, cut_tool_result, trim_history
from memory.context.units import Unit, fit_newest, split_units, unit_tokens, validate_history
from memory.errors import ContextOverflowError, InvalidHistoryError

MODEL = "gpt-3.5-turbo"
MARKER = re.compile(r"\n?\[… (\d+) tokens cut by stratamem …\]\n?")


def call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "search", "arguments": "{}"}}


def asks(*call_ids: str) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [call(i) for i in call_ids]}


def result(call_id: str, content: str = "ok") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


SYSTEM = {"role": "system", "content": "You are a careful assistant."}


def words(count: int, word: str = "data") -> str:
    return " ".join(f"{word}{i % 10}" for i in range(count))


def tokens(messages: list[dict[str, Any]]) -> int:
    return count_tokens(messages, model=MODEL)


def trim(messages: list[dict[str, Any]], budget: int, **options: Any) -> list[dict[str, Any]]:
    trimmed = trim_history(messages, budget, model=MODEL, **options)
    assert validate_history(trimmed) == []
    assert tokens(trimmed) <= budget
    return trimmed


def history() -> list[dict[str, Any]]:
    return [
        SYSTEM,
        user("first question"),
        assistant("first answer"),
        user("look something up"),
        asks("c1", "c2"),
        result("c2", "two"),
        result("c1", "one"),
        assistant("found it"),
        user("and now?"),
    ]


# -- when everything fits ----------------------------------------------------------------


def test_input_that_fits_comes_back_equal_in_a_new_list() -> None:
    messages = history()
    before = copy.deepcopy(messages)
    trimmed = trim(messages, tokens(messages))
    assert trimmed == messages
    assert trimmed is not messages
    assert all(new is not old for new, old in zip(trimmed, messages, strict=True))
    trimmed[0]["content"] = "changed"
    assert messages == before


def test_one_token_less_than_the_total_drops_the_oldest_unit() -> None:
    messages = history()
    trimmed = trim(messages, tokens(messages) - 1)
    assert trimmed == [messages[0], *messages[2:]]


def test_a_tool_result_above_the_cap_is_not_cut_when_everything_fits() -> None:
    messages = [user("q"), asks("c"), result("c", words(400)), user("next")]
    assert trim(messages, tokens(messages)) == messages


def test_empty_history() -> None:
    assert trim([], REPLY_PRIMING_TOKENS) == []


# -- errors ------------------------------------------------------------------------------


def test_negative_budget_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="negative") as caught:
        trim_history(history(), -1)
    assert not isinstance(caught.value, InvalidHistoryError)


@pytest.mark.parametrize(
    "messages",
    [
        [user("q"), asks("a", "b"), result("a"), user("r")],  # a call without its result
        [result("a"), user("q")],  # a tool message first
        [user("q"), asks("a"), user("x"), result("a")],  # a result cut off from its call
        [user("q"), {"role": "robot", "content": "x"}],  # not a chat message
        [user("q"), {"role": "user", "content": 5}],  # malformed content
    ],
)
def test_invalid_history_raises_listing_the_problems(messages: list[dict[str, Any]]) -> None:
    with pytest.raises(InvalidHistoryError) as caught:
        trim_history(messages, 10_000, model=MODEL)
    assert caught.value.problems
    assert all(problem.index is not None for problem in caught.value.problems)
    assert all(str(problem).startswith("message ") for problem in caught.value.problems)


def test_a_non_dict_is_an_invalid_history() -> None:
    with pytest.raises(InvalidHistoryError):
        trim_history(["hello"], 100)  # type: ignore[list-item]


def test_overflow_names_the_numbers() -> None:
    messages = [SYSTEM, user(words(300))]
    mandatory = tokens(messages)
    with pytest.raises(ContextOverflowError) as caught:
        trim_history(messages, mandatory - 1, model=MODEL)
    assert (caught.value.required, caught.value.budget) == (mandatory, mandatory - 1)
    assert str(mandatory) in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_overflow_counts_tool_results_cut_to_the_marker() -> None:
    messages = [user("q"), asks("c"), result("c", words(500))]
    with pytest.raises(ContextOverflowError) as caught:
        trim_history(messages, 20, model=MODEL)
    smallest = [user("q"), asks("c"), result("c", cut_marker(tokens([messages[2]]) - 3 - 11))]
    assert caught.value.required < tokens(messages)
    assert caught.value.required <= tokens(smallest) + 5


def test_zero_budget_overflows_even_an_empty_history() -> None:
    with pytest.raises(ContextOverflowError):
        trim_history([], 0)


# -- what is always kept -----------------------------------------------------------------


def test_system_and_current_turn_are_kept_when_nothing_else_fits() -> None:
    messages = history()
    trimmed = trim(messages, tokens([SYSTEM, user("and now?")]))
    assert trimmed == [SYSTEM, user("and now?")]


def test_a_later_first_system_message_is_kept_in_place() -> None:
    messages = [user("old"), assistant("old answer"), SYSTEM, user("mid"), assistant("mid")]
    messages.append(user("now"))
    trimmed = trim(messages, tokens([SYSTEM, user("now")]))
    assert trimmed == [SYSTEM, user("now")]
    trimmed = trim(messages, tokens(messages) - 1)
    assert trimmed == messages[1:]


def test_a_developer_message_is_pinned_like_a_system_message() -> None:
    developer = {"role": "developer", "content": "Be brief."}
    messages = [developer, user("a"), assistant("b"), user("c")]
    assert trim(messages, tokens([developer, user("c")])) == [developer, user("c")]


def test_later_system_messages_are_ordinary_units() -> None:
    later = {"role": "system", "content": "a later note"}
    messages = [SYSTEM, user("a"), later, assistant("b"), user("c")]
    assert trim(messages, tokens([SYSTEM, assistant("b"), user("c")])) == [
        SYSTEM,
        assistant("b"),
        user("c"),
    ]


def test_the_current_turn_is_kept_whole_with_its_tool_loop() -> None:
    turn = [user("fix it"), asks("a"), result("a", "done"), asks("b"), result("b", "done")]
    messages = [SYSTEM, user("old"), assistant("old"), *turn]
    assert trim(messages, tokens([SYSTEM, *turn])) == [SYSTEM, *turn]


def test_without_a_user_message_the_newest_units_are_kept() -> None:
    messages = [SYSTEM, assistant("one"), assistant("two"), assistant("three")]
    assert trim(messages, tokens([SYSTEM, assistant("three")])) == [SYSTEM, assistant("three")]


# -- how the window is filled -------------------------------------------------------------


def test_kept_units_are_a_contiguous_recent_run() -> None:
    small_old = user("hi")
    big = assistant(words(200))
    messages = [SYSTEM, small_old, big, user("now")]
    # Room for the small old message but not for the big one between: the old one is not kept.
    budget = tokens([SYSTEM, small_old, user("now")])
    assert trim(messages, budget) == [SYSTEM, user("now")]


def test_a_tool_exchange_is_kept_or_dropped_whole() -> None:
    exchange = [asks("a", "b"), result("b", words(30)), result("a", words(30))]
    messages = [SYSTEM, user("q"), *exchange, user("now")]
    mandatory = [SYSTEM, user("now")]
    # Enough for the call and one result, not for both results.
    budget = tokens([*mandatory, *exchange[:2]])
    assert trim(messages, budget, tool_result_max_tokens=1_000) == mandatory
    budget = tokens([*mandatory, *exchange])
    kept = trim(messages, budget, tool_result_max_tokens=1_000)
    assert kept == [SYSTEM, *exchange, user("now")]


def test_the_window_is_filled_as_far_as_it_fits() -> None:
    messages = [SYSTEM, *[m for i in range(10) for m in (user(f"q{i}"), assistant(f"a{i}"))]]
    messages.append(user("now"))
    expected = [SYSTEM, *messages[-5:]]
    budget = tokens(expected)
    assert trim(messages, budget) == expected
    assert trim(messages, budget + 1) == expected  # the next one costs more than one token


# -- cutting tool results ----------------------------------------------------------------


def test_an_oversized_tool_result_in_the_window_is_cut_inside_its_unit() -> None:
    big = words(2_000)
    messages = [SYSTEM, user("q"), asks("c"), result("c", big), assistant("a"), user("now")]
    budget = 1_000
    trimmed = trim(messages, budget)
    assert [m["role"] for m in trimmed] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]
    cut = trimmed[3]
    assert cut["tool_call_id"] == "c"
    counter = TiktokenCounter(MODEL)
    assert counter.count_message(Message.from_openai(cut)) <= budget // 4
    head, tail = MARKER.split(cut["content"])[::2]
    assert big.startswith(head)
    assert big.endswith(tail)
    assert head
    assert tail
    assert messages[3]["content"] == big  # the input is untouched


def test_the_cap_is_configurable() -> None:
    messages = [user("q"), asks("c"), result("c", words(2_000)), user("now")]
    trimmed = trim(messages, 1_000, tool_result_max_tokens=100)
    counter = TiktokenCounter(MODEL)
    assert counter.count_message(Message.from_openai(trimmed[2])) <= 100
    assert MARKER.search(trimmed[2]["content"])


def test_current_turn_results_are_cut_further_largest_first() -> None:
    large, medium = words(3_000), words(40)
    turn = [user("now"), asks("a", "b"), result("a", large), result("b", medium)]
    messages = [SYSTEM, *turn]
    budget = 400  # the cap (100) is not enough: the large result must shrink below it
    trimmed = trim(messages, budget, tool_result_max_tokens=10_000)
    assert trimmed[:3] == [SYSTEM, *turn[:2]]
    assert trimmed[4] == turn[3]  # the medium result fits once the large one is cut
    assert MARKER.search(trimmed[3]["content"])
    assert tokens(trimmed) > budget - 20  # cut no further than needed


def test_the_marker_states_how_many_tokens_were_cut() -> None:
    big = words(1_000)
    messages = [user("now"), asks("c"), result("c", big)]
    trimmed = trim(messages, 200)
    found = MARKER.search(trimmed[2]["content"])
    assert found is not None
    counter = TiktokenCounter(MODEL)
    kept = trimmed[2]["content"].replace(found.group(0), "")
    assert int(found.group(1)) == pytest.approx(
        counter.count_text(big) - counter.count_text(kept), abs=2
    )


def test_a_custom_counter_is_used() -> None:
    class FlatCounter:
        def count_message(self, message: Message) -> int:
            return 10

        def count_text(self, text: str) -> int:
            return len(text)

    messages = [SYSTEM, user("a"), assistant("b"), user("c")]
    trimmed = trim_history(messages, 10 * 3 + REPLY_PRIMING_TOKENS, counter=FlatCounter())
    assert trimmed == [SYSTEM, assistant("b"), user("c")]


def test_other_models_count_with_their_tokenizer() -> None:
    messages = history()
    trimmed = trim_history(messages, 60, model="anthropic/claude-3.5-sonnet")
    assert trimmed[0] == SYSTEM
    assert trimmed[-1] == user("and now?")


# -- building blocks ---------------------------------------------------------------------


def tool_message(content: Any) -> Message:
    return Message.from_openai({"role": "tool", "tool_call_id": "c", "content": content})


def test_cut_tool_result_returns_a_message_that_fits_as_is() -> None:
    counter = TiktokenCounter(MODEL)
    message = tool_message("short")
    assert cut_tool_result(message, counter.count_message(message), counter) is message


@pytest.mark.parametrize("max_tokens", [30, 50, 100, 1_000])
def test_cut_tool_result_fits_and_keeps_head_and_tail(max_tokens: int) -> None:
    counter = TiktokenCounter(MODEL)
    text = words(5_000, "日志")
    cut = cut_tool_result(tool_message(text), max_tokens, counter)
    assert counter.count_message(cut) <= max_tokens
    assert isinstance(cut.content, str)
    head, tail = MARKER.split(cut.content)[::2]
    assert text.startswith(head)
    assert text.endswith(tail)
    assert cut.tool_call_id == "c"


def test_cut_tool_result_uses_most_of_the_room() -> None:
    counter = TiktokenCounter(MODEL)
    cut = cut_tool_result(tool_message(words(5_000)), 1_000, counter)
    assert counter.count_message(cut) >= 950


def test_cut_tool_result_falls_back_to_the_marker_alone() -> None:
    counter = TiktokenCounter(MODEL)
    cut = cut_tool_result(tool_message(words(500)), 5, counter)
    assert isinstance(cut.content, str)
    assert MARKER.fullmatch(cut.content)


def test_cut_tool_result_joins_content_parts_into_one_text_part() -> None:
    counter = TiktokenCounter(MODEL)
    parts = [
        {"type": "text", "text": words(800)},
        {"type": "text", "text": words(800, "more")},
    ]
    cut = cut_tool_result(tool_message(parts), 200, counter)
    assert isinstance(cut.content, list)
    assert len(cut.content) == 1
    assert cut.content[0]["type"] == "text"
    assert cut.content[0]["text"].endswith("more9")
    assert counter.count_message(cut) <= 200


class SpyCounter(TiktokenCounter):
    """Records how many characters every count encodes (cache hits included)."""

    def __init__(self, model: str) -> None:
        super().__init__(model)
        self.characters = 0

    def count_text(self, text: str) -> int:
        self.characters += len(text)
        return super().count_text(text)


def test_cut_tool_result_encodes_a_megabyte_result_about_once() -> None:
    counter = SpyCounter(MODEL)
    text = ("INFO request served in 12 ms; status=200 path=/api/v1/items\n" * 17_000)[:1_000_000]
    cut = cut_tool_result(tool_message(text), 2_000, counter)
    assert counter.count_message(cut) <= 2_000
    assert counter.characters < 1_100_000


def test_cap_tool_results_cuts_only_tool_messages_above_the_cap() -> None:
    counter = TiktokenCounter(MODEL)
    messages = parse_messages([asks("a", "b"), result("a", words(500)), result("b", "small")])
    (unit,) = split_units(messages)
    capped = cap_tool_results(unit, 100, counter)
    assert capped.start == unit.start
    assert capped.messages[0] is unit.messages[0]
    assert capped.messages[2] is unit.messages[2]
    assert counter.count_message(capped.messages[1]) <= 100
    assert cap_tool_results(unit, 10_000, counter) is unit


def test_fit_newest_takes_a_contiguous_newest_run() -> None:
    counter = TiktokenCounter(MODEL)
    units = split_units(parse_messages([user("a"), assistant(words(100)), user("b"), user("c")]))
    costs = [unit_tokens(unit, counter) for unit in units]

    def cost(unit: Unit) -> int:
        return unit_tokens(unit, counter)

    assert fit_newest(reversed(units), sum(costs), cost) == units
    assert fit_newest(reversed(units), costs[2] + costs[3], cost) == units[2:]
    # The small first unit would fit in what is left, but the run stops at the big one.
    assert fit_newest(reversed(units), costs[0] + costs[2] + costs[3], cost) == units[2:]
    assert fit_newest(reversed(units), 0, cost) == []
    assert fit_newest([], 100, cost) == []


def test_a_cut_never_makes_a_small_tool_result_bigger() -> None:
    counter = TiktokenCounter("gpt-4o-mini")
    small = Message.from_openai(result("c1", "three short words"))
    size = counter.count_message(small)

    cut = cut_tool_result(small, size - 1, counter)  # the marker alone is bigger than it

    assert cut is small

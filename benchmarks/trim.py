"""trim_history against LangChain's trim_messages on one 10,000-message history with tool calls.

Both sides trim the same deterministic history to the same budget with the same warmed
``TiktokenCounter`` (LangChain's ``token_counter`` converts its messages back to OpenAI dicts and
sums our per-message counts), in one process. Prints median times, the ratio, and how many
outputs over 50 budgets break the chat structure (``validate_history``) or lose the current
user message.

Run from the repository root: ``python -m benchmarks.trim`` (needs the ``bench`` extra).
"""

from __future__ import annotations

import json
import random
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.messages import (
    BaseMessage,
    convert_to_messages,
    convert_to_openai_messages,
    trim_messages,
)

from memory.context.messages import Message
from memory.context.tokens import REPLY_PRIMING_TOKENS, TiktokenCounter, count_tokens
from memory.context.trim import trim_history
from memory.context.units import validate_history

MODEL = "gpt-4o-mini"
MESSAGES = 10_000
BUDGET = 8_000
REPEATS = 7
VALIDITY_BUDGETS = range(500, 50_500, 1_000)  # 50 budgets
SEED = 20_240_601

Dict = dict[str, Any]
Trimmer = Callable[[list[Dict], int], list[Dict]]

WORDS = [
    "the",
    "report",
    "export",
    "index",
    "query",
    "cache",
    "latency",
    "user",
    "session",
    "budget",
    "token",
    "window",
]
CHINESE = ["知识库", "导出", "会话", "摘要", "预算", "工具", "结果", "用户"]


def sentence(rng: random.Random, words: int) -> str:
    vocabulary = WORDS + CHINESE if rng.random() < 0.2 else WORDS
    return " ".join(rng.choice(vocabulary) for _ in range(words))


def tool_exchange(rng: random.Random, next_id: int) -> list[Dict]:
    """An assistant message with 1-3 parallel calls and their results in a shuffled order."""
    ids = [f"call_{next_id + k}" for k in range(rng.randint(1, 3))]
    calls = [
        {
            "id": call_id,
            "type": "function",
            "function": {"name": rng.choice(["search", "fetch", "run_sql"]), "arguments": "{}"},
        }
        for call_id in ids
    ]
    results = [
        {"role": "tool", "tool_call_id": call_id, "content": tool_output(rng)} for call_id in ids
    ]
    rng.shuffle(results)
    return [{"role": "assistant", "content": None, "tool_calls": calls}, *results]


def tool_output(rng: random.Random) -> str:
    if rng.random() < 0.05:  # now and then a large result (a log, a table dump)
        return json.dumps([sentence(rng, 12) for _ in range(rng.randint(100, 400))])
    return sentence(rng, rng.randint(5, 60))


def build_history(size: int = MESSAGES, seed: int = SEED) -> list[Dict]:
    """A deterministic history of exactly ``size`` messages that ends in a tool loop."""
    rng = random.Random(seed)
    history: list[Dict] = [{"role": "system", "content": "You are a data assistant. " * 5}]
    current = [{"role": "user", "content": "Now export knowledge base A."}]
    current += tool_exchange(rng, next_id=1_000_000)
    next_id = 0
    while True:
        turn: list[Dict] = [{"role": "user", "content": sentence(rng, rng.randint(5, 40))}]
        if rng.random() < 0.5:
            turn += tool_exchange(rng, next_id)
            next_id += 3
        turn.append({"role": "assistant", "content": sentence(rng, rng.randint(10, 80))})
        if len(history) + len(turn) + len(current) > size:
            break
        history += turn
    while len(history) + len(current) < size:
        history.append({"role": "assistant", "content": sentence(rng, 8)})
    return history + current


def langchain_counter(counter: TiktokenCounter) -> Callable[[list[BaseMessage]], int]:
    """LangChain's token_counter: our per-message counts on the equivalent OpenAI dicts."""

    def count(messages: list[BaseMessage]) -> int:
        dicts = convert_to_openai_messages(messages)
        total = sum(counter.count_message(Message.from_openai(d)) for d in dicts)
        return total + REPLY_PRIMING_TOKENS

    return count


def memoised_langchain_counter(counter: TiktokenCounter) -> Callable[[list[BaseMessage]], int]:
    """The same counts, converting each LangChain message once (LangChain's best case)."""
    memo: dict[int, tuple[BaseMessage, int]] = {}

    def count(messages: list[BaseMessage]) -> int:
        total = REPLY_PRIMING_TOKENS
        for message in messages:
            seen = memo.get(id(message))
            if seen is None or seen[0] is not message:
                dict_form = convert_to_openai_messages(message)
                seen = (message, counter.count_message(Message.from_openai(dict_form)))
                memo[id(message)] = seen
            total += seen[1]
        return total

    return count


def langchain_trimmer(
    token_counter: Callable[[list[BaseMessage]], int], *, recommended: bool
) -> Trimmer:
    """trim_messages as a user would call it, returning OpenAI dicts."""
    options: dict[str, Any] = {"strategy": "last", "include_system": True}
    if recommended:  # the settings LangChain's documentation recommends for chat models
        options |= {"start_on": "human", "end_on": ("human", "tool")}

    def trim(history: list[Dict], budget: int) -> list[Dict]:
        kept = trim_messages(
            convert_to_messages(history), max_tokens=budget, token_counter=token_counter, **options
        )
        return convert_to_openai_messages(kept)

    return trim


def stratamem_trimmer(counter: TiktokenCounter) -> Trimmer:
    def trim(history: list[Dict], budget: int) -> list[Dict]:
        return trim_history(history, budget, model=MODEL, counter=counter)

    return trim


def median_seconds(trim: Trimmer, history: list[Dict], budget: int) -> float:
    trim(history, budget)  # warm-up: every distinct message counted once
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        trim(history, budget)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def faults(trim: Trimmer, history: list[Dict], budgets: Sequence[int]) -> tuple[int, int]:
    """How many outputs are structurally invalid, and how many lost the last user message."""
    last_user = next(m for m in reversed(history) if m["role"] == "user")
    invalid = lost = 0
    for budget in budgets:
        output = trim(history, budget)
        invalid += bool(validate_history(output))
        lost += not any(
            m["role"] == "user" and m["content"] == last_user["content"] for m in output
        )
    return invalid, lost


def main() -> None:
    history = build_history()
    counter = TiktokenCounter(MODEL)
    total = count_tokens(history, model=MODEL)
    budgets = list(VALIDITY_BUDGETS)
    print(f"history: {len(history)} messages, {total} tokens; budget {BUDGET}; model {MODEL}")
    print(f"repeats: {REPEATS} (median shown); validity over {len(budgets)} budgets, ", end="")
    print(f"{budgets[0]} to {budgets[-1]}")
    ours = stratamem_trimmer(counter)
    rows = [("stratamem trim_history", "shared", median_seconds(ours, history, BUDGET))]
    row_faults = [faults(ours, history, budgets)]
    for label, recommended in [("last, include_system", False), ("+ start_on, end_on", True)]:
        name = f"langchain trim_messages ({label})"
        for counter_name, token_counter in [
            ("per call", langchain_counter(counter)),
            ("memoised", memoised_langchain_counter(counter)),
        ]:
            trim = langchain_trimmer(token_counter, recommended=recommended)
            rows.append((name, counter_name, median_seconds(trim, history, BUDGET)))
        # Both counters give the same counts, hence the same outputs: check them once.
        row_faults += [faults(trim, history, budgets)] * 2
    ours_seconds = rows[0][2]
    print(
        f"{'trimmer':46} {'counter':>9} {'median':>9} {'vs ours':>8} {'invalid':>8} {'no user':>8}"
    )
    for (name, counter_name, seconds), (invalid, lost) in zip(rows, row_faults, strict=True):
        print(
            f"{name:46} {counter_name:>9} {seconds * 1000:7.1f}ms {seconds / ours_seconds:7.1f}x "
            f"{invalid:>5}/{len(budgets)} {lost:>5}/{len(budgets)}"
        )
    print(
        "counter: 'per call' converts LangChain messages to OpenAI dicts on every token_counter "
        "call; 'memoised' converts each message object once (LangChain's best case). invalid: "
        "outputs with a structural problem (validate_history); no user: outputs that lost the "
        "current user message."
    )


if __name__ == "__main__":
    main()

"""A tool loop whose results fill the budget: what the hard cap keeps, with and without floors.

    python -m benchmarks.tool_loop

For a few model budgets, one step of a tool loop: a system prompt, a 1,024-token LLM summary
(the summariser's cap), four recalled memories, the five most recent messages, then the current
turn: the question, four calls and four results of 40% of the budget each. The hard cap cuts
each result to a quarter of the budget, so the four fill it. Printed per budget: what each
layer keeps with the floors (``memory.context.floors``: the summary 10% of the budget, the
memories 5%) and with the order before them (the same steps with no floor: the current turn's
results cut only as far as the mandatory part needs), counted with the real tokenizer.
"""

from __future__ import annotations

import json
from dataclasses import replace

from memory.context.assembler import context_parts
from memory.context.budget import plan_budget
from memory.context.cap import (
    CappedContext,
    apply_cap,
    cut_window_tool_results,
    drop_memories,
    drop_recent_units,
    drop_window_units,
    fit_current_turn,
    shorten_summary,
)
from memory.context.messages import parse_messages
from memory.context.parts import ContextParts, RetrievedMemory, SummaryContext
from memory.context.tokens import TiktokenCounter, TokenCounter
from memory.context.trim import tool_result_cap

#: (label, context window, max output): the reserve and margin as ``plan_budget`` plans them.
MODELS = [
    ("gpt-4o-mini (128k)", 128_000, 16_384),
    ("qwen3 (32k, 8k out)", 32_768, 8_192),
    ("gpt-3.5-turbo (16k)", 16_385, 4_096),
    ("an 8k window", 8_192, 1_024),
    ("the test's 6k window", 6_000, 1_000),
]


def text_of(tokens: int, counter: TokenCounter, tag: str) -> str:
    """About ``tokens`` tokens of export rows."""
    rows: list[str] = []
    row = 0
    while counter.count_text("\n".join(rows)) < tokens:
        rows.extend(
            f"{tag} row {row + i}: bucket=s3://kb-a/export/{row + i} size={(row + i) * 37} ok"
            for i in range(50)
        )
        row += 50
    while rows and counter.count_text("\n".join(rows)) > tokens:
        rows.pop()
    return "\n".join(rows)


def step(budget: int, counter: TokenCounter) -> ContextParts:
    """One step of the tool loop, as the assembler sorts it into layers."""
    history: list[dict[str, object]] = [
        {"role": "system", "content": text_of(200, counter, "rule")}
    ]
    for turn in range(3):
        history.append({"role": "user", "content": text_of(100, counter, f"q{turn}")})
        history.append({"role": "assistant", "content": text_of(100, counter, f"a{turn}")})
    history.append({"role": "user", "content": "Check the export of knowledge base A."})
    ids = [f"call_{n}" for n in range(4)]
    calls = [
        {
            "id": i,
            "type": "function",
            "function": {"name": "read", "arguments": json.dumps({"p": i})},
        }
        for i in ids
    ]
    history.append({"role": "assistant", "content": None, "tool_calls": calls})
    history += [
        {"role": "tool", "tool_call_id": i, "content": text_of(budget * 2 // 5, counter, i)}
        for i in ids
    ]
    memories = [
        RetrievedMemory(text_of(50, counter, f"memory{n}"), 0.9 - n / 10, id=str(n))
        for n in range(4)
    ]
    summary = SummaryContext(text_of(1_024, counter, "summary"), 120, "llm")
    return context_parts(
        parse_messages(history), summary=summary, memories=memories, recent_messages=5
    )


def without_floors(parts: ContextParts, budget: int, counter: TokenCounter) -> CappedContext:
    """The hard cap's steps as they ran before the floors."""
    capped = CappedContext(parts, parts.measure(counter).total)
    cap = tool_result_cap(budget)
    capped = fit_current_turn(capped, budget, cap, counter)
    capped = cut_window_tool_results(capped, cap, counter)
    for drop in (drop_window_units, drop_memories, shorten_summary, drop_recent_units):
        capped = drop(capped, budget, counter)
    return capped


def describe(capped: CappedContext, counter: TokenCounter) -> str:
    parts = capped.parts
    tokens = parts.measure(counter)
    results = [
        counter.count_message(m)
        for unit in parts.current_turn
        for m in unit.messages
        if m.role == "tool"
    ]
    return (
        f"summary {tokens.summary:>6}  memories {tokens.memories:>4} ({len(parts.memories)})  "
        f"recent {tokens.window:>5}  results {sum(results):>6} ({min(results)}-{max(results)} "
        f"each)  total {tokens.total}"
    )


def main() -> None:
    counter = TiktokenCounter("gpt-4o-mini")
    for label, window, output in MODELS:
        budget = plan_budget(context_window=window, max_output=output).history
        parts = step(budget, counter)
        measured = parts.measure(counter)
        print(f"{label}: budget {budget}, four results of {budget * 2 // 5} tokens")
        print(f"  as sent    summary {measured.summary:>6}  memories {measured.memories:>4}")
        print(f"  floors     {describe(apply_cap(parts, budget=budget, counter=counter), counter)}")
        print(f"  no floors  {describe(without_floors(replace(parts), budget, counter), counter)}")


if __name__ == "__main__":
    main()

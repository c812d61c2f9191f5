"""Summariser cost: incremental rolling summary vs re-summarising everything on each trigger.

A scripted, deterministic 1,000-turn conversation with tool calls is replayed twice in one
process against the local fake OpenAI server (the one the tests use). Both strategies fold at the
same points (``plan_fold`` with the default trigger and target for the history budget); they
differ only in what the summariser reads:

- incremental: the previous summary plus the newly folded messages (stratamem's strategy);
- re-summarise: every message from the start of the conversation up to the new boundary.

The fake model answers with a summary of 30% of its input (``--summary-share``), capped by the
limit the prompt states, which is the worst case the length rule allows. Input tokens are counted
by the server with tiktoken over the request's message contents.

Run from the repository root: ``python -m benchmarks.summary``.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from memory.context.cut import cut_to_tokens
from memory.context.messages import Message, parse_messages
from memory.context.tokens import TiktokenCounter
from memory.llm import OpenAIChatModel
from memory.settings import SummarySettings
from memory.summary.policy import FoldPolicy
from memory.summary.summarizer import PreviousSummary, Summarizer

FAKE_SERVER = Path(__file__).resolve().parents[1] / "tests" / "fake_openai.py"

TOPICS = (
    "the billing export",
    "the staging cluster",
    "the Lisbon trip",
    "the Q3 report",
    "the search index",
    "the onboarding flow",
    "the mobile release",
    "the data migration",
)
TOOLS = ("search_docs", "run_query", "get_weather", "read_file", "list_tickets")
VOCABULARY = """
the a we it this that should could will after before because with without about deadline budget
owner ticket error retry config region latency report customer invoice schema column index cache
deploy rollback approve prefer avoid confirm monday friday morning total count missing failed
passed pending
"""


def load_fake_server() -> ModuleType:
    """Import the tests' fake OpenAI server by path (one module for tests and benchmarks)."""
    spec = importlib.util.spec_from_file_location("fake_openai", FAKE_SERVER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while building
    spec.loader.exec_module(module)
    return module


def sentence(rng: random.Random, low: int, high: int) -> str:
    """Plausible filler text with a topic, a number and an identifier."""
    vocabulary = VOCABULARY.split()
    words = [rng.choice(vocabulary) for _ in range(rng.randint(low, high))]
    words.insert(rng.randrange(len(words)), rng.choice(TOPICS))
    words.insert(rng.randrange(len(words)), str(rng.randint(2, 9_999)))
    return " ".join(words).capitalize() + "."


def conversation(turns: int, seed: int = 7) -> list[list[Message]]:
    """The scripted conversation, one list of messages per turn (user message first)."""
    rng = random.Random(seed)
    script: list[list[Message]] = []
    for turn in range(turns):
        raw: list[dict[str, Any]] = [{"role": "user", "content": sentence(rng, 6, 40)}]
        if rng.random() < 0.35:
            ids = [f"call_{turn}_{n}" for n in range(rng.choice([1, 1, 1, 2]))]
            raw.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": id_,
                            "type": "function",
                            "function": {
                                "name": rng.choice(TOOLS),
                                "arguments": f'{{"query": "{sentence(rng, 2, 6)}"}}',
                            },
                        }
                        for id_ in ids
                    ],
                }
            )
            for id_ in ids:
                rows = [sentence(rng, 5, 15) for _ in range(rng.choice([1, 2, 4, 8, 16, 32]))]
                raw.append({"role": "tool", "tool_call_id": id_, "content": " ".join(rows)})
        raw.append({"role": "assistant", "content": sentence(rng, 15, 110)})
        script.append(parse_messages(raw))
    return script


def scripted_summary(fake: ModuleType, counter: TiktokenCounter, share: float) -> Any:
    """A responder for the fake server: a summary of ``share`` of the input, within the limit."""

    def respond(body: dict[str, Any]) -> Any:
        system, user = (str(message["content"]) for message in body["messages"])
        stated = re.search(r"at most (\d+) tokens", system)
        limit = int(stated.group(1)) if stated else 1_024
        wanted = min(int(counter.count_text(user) * share), limit)
        words = user.split()
        sample = " ".join(words[:: max(len(words) // max(wanted, 1), 1)])  # spread over the input
        return fake.Reply(cut_to_tokens(sample, wanted, counter, keep="head") or "nothing to keep")

    return respond


@dataclass
class Tally:
    """Summariser calls and input tokens of one strategy."""

    calls: int = 0
    tokens_in: int = 0


def replay(
    script: list[list[Message]], summarizer: Summarizer, policy: FoldPolicy, *, incremental: bool
) -> Tally:
    """Replay the conversation, consolidating when each user message arrives."""
    counter = summarizer.counter
    history: list[Message] = []
    tokens: list[int] = []
    boundary = 0
    previous: PreviousSummary | None = None
    tally = Tally()
    for turn in script:
        history.append(turn[0])
        tokens.append(counter.count_message(turn[0]))
        fold = policy.plan(history[boundary:], tokens[boundary:])
        if fold:
            if incremental:
                result = summarizer.summarise(previous, history[boundary : boundary + fold])
            else:
                result = summarizer.summarise(None, history[: boundary + fold])
            if result.degraded or result.attempts != 1:
                raise RuntimeError(f"the fake summariser failed: {result}")
            previous = PreviousSummary(result.text, result.kind)
            boundary += fold
            tally.calls += 1
            tally.tokens_in += result.tokens_in
        history.extend(turn[1:])
        tokens.extend(counter.count_message(message) for message in turn[1:])
    return tally


def main() -> None:
    """Run both strategies and print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1_000)
    parser.add_argument("--history-budget", type=int, default=8_000)
    parser.add_argument("--summary-share", type=float, default=0.3)
    args = parser.parse_args()

    counter = TiktokenCounter("gpt-4o-mini")
    script = conversation(args.turns)
    messages = [message for turn in script for message in turn]
    own_tokens = sum(map(counter.count_message, messages))
    policy = FoldPolicy.for_history_budget(args.history_budget)
    fake = load_fake_server()
    server = fake.FakeOpenAI(
        responder=scripted_summary(fake, counter, args.summary_share),
        count_tokens=counter.count_text,
    )
    with server:
        chat = OpenAIChatModel(base_url=server.base_url, api_key="bench")
        summarizer = Summarizer(chat, counter, SummarySettings(model="fake-summariser"))
        incremental = replay(script, summarizer, policy, incremental=True)
        everything = replay(script, summarizer, policy, incremental=False)

    print(
        f"conversation: {args.turns:,} turns, {len(messages):,} messages, {own_tokens:,} tokens; "
        f"history budget {args.history_budget:,} (trigger {policy.trigger_tokens:,}, "
        f"target {policy.target_tokens:,}); fake summary {args.summary_share:.0%} of its input"
    )
    print(f"{'strategy':<26}{'calls':>7}{'input tokens':>15}{'input/conv':>12}{'turns/call':>12}")
    for name, tally in (("incremental (stratamem)", incremental), ("re-summarise all", everything)):
        print(
            f"{name:<26}{tally.calls:>7,}{tally.tokens_in:>15,}"
            f"{tally.tokens_in / own_tokens:>12.2f}{args.turns / max(tally.calls, 1):>12.1f}"
        )
    factor = everything.tokens_in / max(incremental.tokens_in, 1)
    print(f"re-summarise / incremental input tokens: {factor:.1f}x")
    ratio, per_call = incremental.tokens_in / own_tokens, args.turns / max(incremental.calls, 1)
    print(
        f"goals: input <= 1.3x conversation: {'met' if ratio <= 1.3 else 'NOT met'} ({ratio:.2f}); "
        f">= 10 turns per call: {'met' if per_call >= 10 else 'NOT met'} ({per_call:.1f})"
    )


if __name__ == "__main__":
    main()

"""LLM cost of long-term memory: rolling summary and card extraction together, per conversation.

    python -m benchmarks.extraction [--turns 1000] [--history-budget 8000]

Replays ``benchmarks.summary``'s scripted 1,000-turn conversation (with tool calls) against the
local fake OpenAI server. Each time the window folds, the incremental summariser reads the
previous summary and the folded messages (one call), and the card extractor reads the folded
user and assistant messages (tool results are not turns), in batches of at most
``EXTRACTION_BATCH_MESSAGES``, exactly as ``LongTermMemory.archive`` does after a fold. The
server counts input tokens with tiktoken over each request's message contents; the fake
extractor answers two cards per call. Reported: calls and input tokens of each, and of both,
against the conversation's own tokens. Goals (issue 10): input tokens <= 1.3x the conversation
and at most one call per 10 turns, summary and extraction together.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from benchmarks.summary import conversation, load_fake_server, scripted_summary
from memory.cards import CardExtractor, SourceMessage
from memory.cards.prompts import EXTRACTION_INSTRUCTIONS
from memory.context.messages import Message
from memory.context.tokens import TiktokenCounter
from memory.llm import OpenAIChatModel
from memory.longterm import EXTRACTION_BATCH_MESSAGES
from memory.settings import SummarySettings
from memory.summary.policy import FoldPolicy
from memory.summary.summarizer import PreviousSummary, Summarizer

_EPOCH = "2024-01-01T00:00:00+00:00"


@dataclass
class Tally:
    """Calls and input tokens of one kind of LLM use."""

    calls: int = 0
    tokens_in: int = 0


def responder(fake: ModuleType, counter: TiktokenCounter, share: float) -> Any:
    """The fake model: cards for extraction requests, a scripted summary for the others."""
    summary = scripted_summary(fake, counter, share)
    cards = json.dumps(
        {
            "cards": [
                {"type": "fact", "text": "The team reviews the billing export on Fridays",
                 "subject": "team", "attribute": "review day", "source": [1]},
                {"type": "task", "text": "To do: fix the staging cluster", "subject": "user",
                 "attribute": "task", "source": [1]},
            ]
        }
    )  # fmt: skip

    def respond(body: dict[str, Any]) -> Any:
        if body["messages"][0]["content"] == EXTRACTION_INSTRUCTIONS:
            return fake.Reply(cards)
        return summary(body)

    return respond


def sources(messages: list[Message], first_index: int) -> list[SourceMessage]:
    """The folded messages as extraction reads them: user and assistant text only."""
    from datetime import datetime

    when = datetime.fromisoformat(_EPOCH)
    return [
        SourceMessage(message.role, message.text, when, first_index + offset)
        for offset, message in enumerate(messages)
        if message.role in ("user", "assistant") and message.text.strip()
    ]


def replay(
    script: list[list[Message]],
    summarizer: Summarizer,
    extractor: CardExtractor,
    policy: FoldPolicy,
) -> tuple[Tally, Tally]:
    """Replay the conversation; at each fold, summarise and extract what left the window."""
    counter = summarizer.counter
    history: list[Message] = []
    tokens: list[int] = []
    boundary = 0
    previous: PreviousSummary | None = None
    summary, extraction = Tally(), Tally()
    for turn in script:
        history.append(turn[0])
        tokens.append(counter.count_message(turn[0]))
        fold = policy.plan(history[boundary:], tokens[boundary:])
        if fold:
            folded = history[boundary : boundary + fold]
            result = summarizer.summarise(previous, folded)
            if result.degraded or result.attempts != 1:
                raise RuntimeError(f"the fake summariser failed: {result}")
            previous = PreviousSummary(result.text, result.kind)
            summary.calls += 1
            summary.tokens_in += result.tokens_in
            batch = sources(folded, boundary)
            for start in range(0, len(batch), EXTRACTION_BATCH_MESSAGES):
                cards = extractor.extract(batch[start : start + EXTRACTION_BATCH_MESSAGES])
                if cards.method != "llm" or cards.calls != 1:
                    raise RuntimeError(f"the fake extractor failed: {cards}")
                extraction.calls += cards.calls
                extraction.tokens_in += cards.tokens_in
            boundary += fold
        history.extend(turn[1:])
        tokens.extend(counter.count_message(message) for message in turn[1:])
    return summary, extraction


def main() -> None:
    """Replay the conversation and print the cost table and the goals."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1_000)
    parser.add_argument("--history-budget", type=int, default=8_000)
    parser.add_argument("--summary-share", type=float, default=0.3)
    args = parser.parse_args()

    counter = TiktokenCounter("gpt-4o-mini")
    script = conversation(args.turns)
    messages = [message for turn in script for message in turn]
    own_tokens = sum(map(counter.count_message, messages))
    text_tokens = sum(
        counter.count_text(m.text) for m in messages if m.role in ("user", "assistant")
    )
    policy = FoldPolicy.for_history_budget(args.history_budget)
    fake = load_fake_server()
    server = fake.FakeOpenAI(
        responder=responder(fake, counter, args.summary_share), count_tokens=counter.count_text
    )
    settings = SummarySettings(model="fake-model")
    with server:
        chat = OpenAIChatModel(base_url=server.base_url, api_key="bench")
        summarizer = Summarizer(chat, counter, settings)
        extractor = CardExtractor(chat, settings)
        summary, extraction = replay(script, summarizer, extractor, policy)

    print(
        f"conversation: {args.turns:,} turns, {len(messages):,} messages, {own_tokens:,} tokens "
        f"({text_tokens:,} in user and assistant text, the rest tool calls and results); "
        f"history budget {args.history_budget:,} (trigger {policy.trigger_tokens:,}, "
        f"target {policy.target_tokens:,})"
    )
    both = Tally(summary.calls + extraction.calls, summary.tokens_in + extraction.tokens_in)
    print(f"{'LLM use':<22}{'calls':>7}{'input tokens':>15}{'input/conv':>12}{'turns/call':>12}")
    for name, tally in (("summary", summary), ("extraction", extraction), ("together", both)):
        print(
            f"{name:<22}{tally.calls:>7,}{tally.tokens_in:>15,}"
            f"{tally.tokens_in / own_tokens:>12.2f}{args.turns / max(tally.calls, 1):>12.1f}"
        )
    # Not built: one call that summarises and extracts (the summariser's prompt already holds
    # the folded messages; the extraction instructions would be added to it).
    instructions = counter.count_text(EXTRACTION_INSTRUCTIONS)
    shared = Tally(summary.calls, summary.tokens_in + summary.calls * instructions)
    print(
        f"{'shared call (estimate)':<22}{shared.calls:>7,}{shared.tokens_in:>15,}"
        f"{shared.tokens_in / own_tokens:>12.2f}{args.turns / max(shared.calls, 1):>12.1f}"
    )
    ratio, per_call = both.tokens_in / own_tokens, args.turns / max(both.calls, 1)
    print(
        f"goals, together: input <= 1.3x conversation: {'met' if ratio <= 1.3 else 'NOT met'} "
        f"({ratio:.2f}); >= 10 turns per call: {'met' if per_call >= 10 else 'NOT met'} "
        f"({per_call:.1f})"
    )


if __name__ == "__main__":
    main()

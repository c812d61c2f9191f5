"""LLM cost of long-term memory: rolling summary and card extraction together, per conversation.

    python -m benchmarks.extraction [--turns 1000] [--history-budget 8000 16000 32000]
                                    [--model json|prose|refusing]
                                    [--archive folds|soon] [--turns-per-job 1]

Replays ``benchmarks.summary``'s scripted 1,000-turn conversation (with tool calls) through the
real code path: ``Memory.prepare`` stores each user message and ``Memory.record`` the rest of
the turn, in inline mode, on an embedded Postgres (a temporary folder), with long-term memory on
(the hashing embedder: this measures LLM calls, not recall; ``cards.k = 0``, so no query
rewrite asks the model anything). Every fold makes the one shared call that writes the summary
and extracts the cards (``memory.longterm.summary_and_cards``), exactly as an application's
would; any other call (a summary-only or extraction-only request) is counted too.

The local fake OpenAI server answers a fold with JSON: a summary of 30% of its input
(``--summary-share``, within the limit the prompt states, keeping the previous summary's key
facts so that it passes the retention check) and two cards. It counts input tokens with
tiktoken over each request's message contents. Goals (issue 10): input tokens <= 1.3x the
conversation and at most one call per 10 turns, summary and extraction together.

``--model`` picks how the fake model answers (issue 17): ``json`` follows the JSON prompts (the
default; the run stops with an error if any attempt was retried or degraded); ``prose`` answers
every JSON prompt in plain text (a fold with the summary alone, an extraction with a sentence),
as a model that ignores both ``response_format`` and the prompt would; ``refusing`` refuses
everything, so every fold fails although the model answers. For each, also printed: how many of
the conversation's messages went to the model in more than one request (found by their text in
every request, the numbered transcript and a raw archive alike), and the most requests one
message went in.

``--archive soon`` replays in background mode with cards made soon after ``record``
(``cards.archive_promptly``, the default there; issue 18): after every ``--turns-per-job`` turns
the worker runs what is due, so each ``cards`` job archives that many turns (1: a user slower
than the debounce, each turn on its own; more: a faster one), and each fold finds its messages
archived and asks for the summary alone. ``folds`` (the default) is the inline replay above,
where each fold's one call also extracts its messages.

Also printed: what cutting tool results in the fold's request shorter would save and leave
out of the summariser's view (the share of the tool results' key facts, numbers, ids and names
as ``memory.summary.acceptance.key_facts`` finds them, still in the request), so the cut
``TOOL_RESULT_CHARS`` is chosen on numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

from benchmarks.summary import conversation, load_fake_server
from memory import Memory
from memory.cards.prompts import EXTRACTION_INSTRUCTIONS
from memory.context.cut import cut_to_chars, one_line
from memory.context.messages import Message
from memory.context.tokens import TiktokenCounter
from memory.llm import OpenAIChatModel
from memory.longterm.summary_and_cards import FOLD_INSTRUCTIONS, TOOL_RESULT_CHARS
from memory.summary.acceptance import key_facts
from memory.summary.summarizer import SummaryEvent
from memory.summary.transcript import INSTRUCTIONS, render_line
from retrieval import HashingEmbedder

#: The first turn's time; a turn every ten minutes, so the conversation spans about a week.
_START = datetime(2024, 1, 1, 9, tzinfo=UTC)
_TURN_GAP = timedelta(minutes=10)
#: What a request's system message starts with, by kind of call.
_KINDS = (
    ("fold", FOLD_INSTRUCTIONS[:60]),
    ("summary only", INSTRUCTIONS[:60]),
    ("extraction only", EXTRACTION_INSTRUCTIONS[:60]),
)


@dataclass
class Tally:
    """Calls and input tokens of one kind of LLM request."""

    calls: int = 0
    tokens_in: int = 0
    #: Of ``tokens_in``: the instructions, the current summary, the new messages.
    instructions: int = 0
    summary: int = 0
    transcript: int = 0


class Resends:
    """How many requests each message of the conversation went in, found by its text.

    A message is known by the first ``KEY_CHARS`` characters of its text, as every request
    renders it (a numbered transcript line, a raw archive line: ``[n] role: text``); messages
    without text (a call with no words) or whose key is not unique are not counted.
    """

    KEY_CHARS = 48
    _PREFIX = re.compile(r"^(?:\[\d+\] )?(?:user|assistant|system|tool [\w-]+): ")

    def __init__(self, messages: list[Message]) -> None:
        keys: dict[str, int] = {}
        for index, message in enumerate(messages):
            text = one_line(message.text)
            if len(text) >= self.KEY_CHARS:
                key = text[: self.KEY_CHARS]
                keys[key] = -1 if key in keys else index
        self._keys = {key: index for key, index in keys.items() if index >= 0}
        self.sent: dict[int, int] = {}

    def count(self, material: str) -> None:
        """Count the messages one request holds (each once per request)."""
        found = {
            self._keys.get(self._PREFIX.sub("", line, count=1)[: self.KEY_CHARS])
            for line in material.split("\n")
        }
        for index in found - {None}:
            assert index is not None
            self.sent[index] = self.sent.get(index, 0) + 1

    def more_than_once(self) -> int:
        """Messages sent in more than one request."""
        return sum(1 for times in self.sent.values() if times > 1)


def kind_of(body: dict[str, Any]) -> str:
    """Which kind of call a request is, by its instructions."""
    system = str(body["messages"][0]["content"])
    return next((kind for kind, start in _KINDS if system.startswith(start)), "other")


def responder(fake: ModuleType, counter: TiktokenCounter, share: float, model: str) -> Any:
    """The fake model: a JSON summary and two cards for a fold, plain text or JSON otherwise.

    ``model`` ``prose`` answers every JSON prompt in plain text; ``refusing`` refuses all.
    """

    def summary_of(system: str, material: str) -> str:
        stated = re.search(r"at most (\d+) tokens", system)
        limit = int(stated.group(1)) if stated else 1_024
        wanted = min(int(counter.count_text(material) * share), limit)
        current, _, new = material.partition("\n\nNew messages:\n")
        # A faithful summariser keeps the previous summary's key facts, then samples the rest.
        kept = " ".join(sorted(key_facts(current)))
        words = new.split()
        sample = " ".join(words[:: max(len(words) // max(wanted, 1), 1)])
        words = f"{kept} {sample}".split()
        keep = len(words)
        while keep > 1 and counter.count_text(" ".join(words[:keep])) > wanted:
            keep = max(1, int(keep * 0.9))
        # Notes, never a line that opens like the transcript's ``user: ...`` (a copy).
        return "Notes: " + (" ".join(words[:keep]) or "nothing to keep")

    def respond(body: dict[str, Any]) -> Any:
        system, material = (str(message["content"]) for message in body["messages"])
        kind = kind_of(body)
        if model == "refusing":
            return fake.Reply("I'm sorry, but I can't help with that.")
        if model == "prose" and kind == "fold":
            return fake.Reply(summary_of(system, material))
        if model == "prose" and kind == "extraction only":
            return fake.Reply("The user wants to fix the staging cluster.")
        if kind == "fold":
            numbers = [int(n) for n in re.findall(r"^\[(\d+)\] ", material, re.M)]
            cards = [
                {"type": "fact", "text": f"The team reviews item {numbers[0]} on Fridays",
                 "subject": "team", "attribute": "review day", "source": [numbers[0]]},
                {"type": "task", "text": "To do: fix the staging cluster", "subject": "user",
                 "attribute": "task", "source": [numbers[-1]]},
            ]  # fmt: skip
            return fake.Reply(json.dumps({"summary": summary_of(system, material), "cards": cards}))
        if kind == "extraction only":
            return fake.Reply(json.dumps({"cards": []}))
        return fake.Reply(summary_of(system, material))

    return respond


def replay(mem: Memory, script: list[list[Message]], turns_per_job: int | None = None) -> None:
    """Each turn as an application plays it: ``prepare`` with the user's input, then ``record``.

    With ``turns_per_job`` (background mode), the worker runs what is due after that many turns.
    """
    user_id, session_id = f"bench-{uuid.uuid4().hex[:8]}", "s1"
    for number, turn in enumerate(script):
        when = (_START + number * _TURN_GAP).isoformat()
        first, *rest = (message.to_openai() | {"timestamp": when} for message in turn)
        mem.prepare(user_id=user_id, session_id=session_id, input=first)
        mem.record(user_id=user_id, session_id=session_id, messages=rest)
        if turns_per_job is not None and (number + 1) % turns_per_job == 0:
            mem.run_worker(until_idle=True)
    if turns_per_job is not None:
        mem.run_worker(until_idle=True)


def run_budget(
    history_budget: int,
    script: list[list[Message]],
    share: float,
    data_dir: Path,
    model: str = "json",
    turns_per_job: int | None = None,
) -> tuple[dict[str, Tally], int, Resends, int]:
    """Replay the conversation at one history budget: inline, or (``turns_per_job``) in
    background mode with cards made soon after ``record``.

    Returns:
        The tallies by kind, the budget used, the messages' requests, the failed attempts.
    """
    counter = TiktokenCounter("gpt-4o-mini")
    fake = load_fake_server()
    tallies: dict[str, Tally] = {}
    answer = responder(fake, counter, share, model)
    resends = Resends([message for turn in script for message in turn])

    def counted(body: dict[str, Any]) -> Any:
        tally = tallies.setdefault(kind_of(body), Tally())
        tally.calls += 1
        tally.tokens_in += sum(counter.count_text(str(m["content"])) for m in body["messages"])
        system, material = (str(message["content"]) for message in body["messages"])
        current, _, new = material.partition("\n\nNew messages:\n")
        if not new:  # an extraction request: no summary, only the messages
            current, new = "", material
        tally.instructions += counter.count_text(system)
        tally.summary += counter.count_text(current)
        tally.transcript += counter.count_text(new)
        resends.count(material)
        return answer(body)

    failed: list[SummaryEvent] = []  # a retried or degraded attempt: the fake misbehaved

    def on_event(event: SummaryEvent) -> None:
        if event.kind in ("retry", "degrade"):
            failed.append(event)

    server = fake.FakeOpenAI(responder=counted, count_tokens=counter.count_text)
    with server:
        mem = Memory.open(
            data_dir=data_dir,
            chat=OpenAIChatModel(base_url=server.base_url, api_key="bench"),
            on_summary_event=on_event,
            embedder=HashingEmbedder(),
            model="gpt-4o-mini",
            # An explicit window whose history budget is exactly ``history_budget``.
            context_window=history_budget + 2_000,
            max_output=1_000,
            safety_margin=1_000,
            summary={
                "mode": "inline" if turns_per_job is None else "background",
                "debounce_seconds": 0,
                "backoff_seconds": 0,
            },
            cards={"embedder": "hashing", "k": 0, "debounce_seconds": 0},
        )
        with mem:
            replay(mem, script, turns_per_job)
            budget = mem.budget.history
    if failed and model == "json":
        raise RuntimeError(f"{len(failed)} failed attempt(s), e.g. {failed[0].error}")
    return tallies, budget, resends, len(failed)


def tool_result_cuts(script: list[list[Message]], counter: TiktokenCounter, chars: int) -> str:
    """What cutting tool results to ``chars`` in a fold request costs and leaves out.

    The tokens of every tool result's line (each is sent once, in the fold that takes it out
    of the window), and the share of the tool results' key facts (numbers, ids, names:
    ``key_facts``) that the cut line still holds: what the summariser can still keep.
    """
    total = visible = tokens = 0
    for turn in script:
        names = {c.id: c.function.name for m in turn for c in m.tool_calls or ()}
        for message in turn:
            if message.role != "tool":
                continue
            line = render_line(message, names, compact=True)
            cut = cut_to_chars(line, chars)
            facts = key_facts(line)
            total += len(facts)
            visible += len(facts & key_facts(cut))
            tokens += counter.count_text(cut)
    label = "uncut" if chars >= 10**6 else f"{chars:,} chars"
    return f"{label:>11}: {tokens:>7,} tokens, {visible / max(total, 1):>6.1%} of key facts"


def main() -> None:
    """Replay the conversation at each budget; print the cost table and the goals."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1_000)
    parser.add_argument("--history-budget", type=int, nargs="+", default=[8_000, 16_000, 32_000])
    parser.add_argument("--summary-share", type=float, default=0.3)
    parser.add_argument("--model", choices=("json", "prose", "refusing"), default="json")
    parser.add_argument("--archive", choices=("folds", "soon"), default="folds")
    parser.add_argument("--turns-per-job", type=int, default=1)
    args = parser.parse_args()
    turns_per_job = args.turns_per_job if args.archive == "soon" else None

    counter = TiktokenCounter("gpt-4o-mini")
    script = conversation(args.turns)
    messages = [message for turn in script for message in turn]
    own_tokens = sum(map(counter.count_message, messages))
    print(
        f"conversation: {args.turns:,} turns, {len(messages):,} messages, {own_tokens:,} tokens; "
        f"fake summary {args.summary_share:.0%} of its input; model {args.model}; "
        + (
            "cards at folds (inline)"
            if turns_per_job is None
            else f"cards soon after record, {turns_per_job} turn(s) per job (background)"
        )
        + f"; load {os.getloadavg()[0]:.1f}"
    )
    print(
        f"{'history budget':>14}  {'LLM use':<16}{'calls':>7}{'input tokens':>15}"
        f"{'input/conv':>12}{'turns/call':>12}"
    )
    verdicts: list[str] = []
    for budget in args.history_budget:
        with tempfile.TemporaryDirectory() as folder:
            tallies, used, resends, failed = run_budget(
                budget, script, args.summary_share, Path(folder), args.model, turns_per_job
            )
        both = Tally(
            sum(t.calls for t in tallies.values()), sum(t.tokens_in for t in tallies.values())
        )
        for name, tally in [*sorted(tallies.items()), ("together", both)]:
            print(
                f"{used:>14,}  {name:<16}{tally.calls:>7,}{tally.tokens_in:>15,}"
                f"{tally.tokens_in / own_tokens:>12.2f}{args.turns / max(tally.calls, 1):>12.1f}"
            )
        for name, tally in sorted(tallies.items()):
            print(
                f"{'':>14}  {name}: per call {tally.instructions // tally.calls:,} tokens of "
                f"instructions, {tally.summary // tally.calls:,} of current summary, "
                f"{tally.transcript // tally.calls:,} of new messages"
            )
        print(
            f"{'':>14}  messages in more than one request: {resends.more_than_once():,} of "
            f"{len(resends.sent):,} sent (at most {max(resends.sent.values(), default=0)} "
            f"requests each); failed attempts: {failed:,}"
        )
        ratio, per_call = both.tokens_in / own_tokens, args.turns / max(both.calls, 1)
        verdicts.append(
            f"history budget {used:,}: input <= 1.3x conversation: "
            f"{'met' if ratio <= 1.3 else 'NOT met'} ({ratio:.2f}); >= 10 turns per call: "
            f"{'met' if per_call >= 10 else 'NOT met'} ({per_call:.1f})"
        )
    print("goals, summary and extraction together:")
    for verdict in verdicts:
        print(f"  {verdict}")
    print(
        f"tool results in fold requests (now cut at {TOOL_RESULT_CHARS:,} characters; cards "
        "never cite them), by cut:"
    )
    for chars in (500, 1_000, 1_500, 2_000, 10**6):
        print(f"  {tool_result_cuts(script, counter, chars)}")


if __name__ == "__main__":
    main()

"""``stratamem demo``: a scripted conversation through ``Memory``, offline, on the embedded DB."""

from __future__ import annotations

import argparse
import uuid
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from memory.cli.base import Subcommands
from memory.context.cut import preview
from memory.context.messages import Message
from memory.facade import Memory

__all__ = ["demo_turn", "register_demo"]

DEMO_SYSTEM = "You are Ops Copilot, the on-call assistant of a small e-commerce team."
DEMO_FACTS = (
    "Our checkout service runs in eu-west-1 on three nodes.",
    "I prefer answers in bullet points, please.",
    "The payment provider is Stripe; the timeout to it is 2 seconds.",
    "We deploy every weekday at 09:30 UTC.",
    "The on-call phone number changed to the team rota this week.",
    "Keep the error budget for checkout at 99.9% availability.",
)


def register_demo(subcommands: Subcommands) -> None:
    """Add ``stratamem demo``: a scripted conversation through ``Memory``, offline."""
    demo = subcommands.add_parser(
        "demo",
        help="run a scripted conversation through Memory on the embedded database, offline",
        description="Run a scripted 30-turn conversation with tool calls through Memory on the "
        "embedded Postgres (or STRATAMEM_DATABASE_URL), with no LLM: the window, the hard cap "
        "and the rolling summary (as a raw archive) at work on a small context window.",
    )
    demo.add_argument("--turns", type=int, default=30, help="turns to play (default 30)")
    demo.add_argument("--data-dir", type=Path, help="embedded database folder")
    demo.set_defaults(handler=_run_demo)


def demo_turn(turn: int) -> tuple[str, list[dict[str, Any]]]:
    """The user's input of one scripted turn, and the assistant's messages that answer it."""
    if turn < len(DEMO_FACTS):
        return DEMO_FACTS[turn], [
            {"role": "assistant", "content": "Noted, I will keep that in mind."}
        ]
    call_id = f"call_{turn}"
    question = f"Turn {turn}: checkout p95 latency looks high again. What do the logs say?"
    log = "\n".join(
        f"2026-11-29T09:{turn % 60:02d}:{second:02d}Z checkout-{second % 3} WARN "
        f"payment call took {1800 + 7 * second} ms (order {turn * 1000 + second})"
        for second in range(8)
    )
    return question, [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "search_logs", "arguments": '{"service": "checkout"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": log},
        {
            "role": "assistant",
            "content": f"Turn {turn}: payment calls are close to the 2 s timeout on all nodes.",
        },
    ]


def _run_demo(args: argparse.Namespace, out: Console) -> int:
    options: dict[str, Any] = {"data_dir": args.data_dir} if args.data_dir else {}
    # Offline on purpose, whatever the environment says: no key, no endpoint.
    with Memory.open(
        context_window=2_048,
        max_output=256,
        summary={"mode": "inline"},
        llm_api_key=None,
        llm_base_url=None,
        **options,
    ) as mem:
        user_id, session_id = "demo-user", f"demo-{uuid.uuid4().hex[:8]}"
        budget = mem.budget
        title = (
            f"{args.turns} turns; window {budget.context_window:,} tokens, history budget "
            f"{budget.history:,} (after {budget.reserved_output:,} for the answer and a "
            f"{budget.safety_margin:,} margin)"
        )
        table = Table(box=box.SIMPLE_HEAD, title=title)
        for name in ("turn", "stored", "summary", "tokens", "window", "sent", "dropped"):
            table.add_column(name, justify="right")
        for turn in range(args.turns):
            question, answer = demo_turn(turn)
            context = mem.prepare(
                user_id=user_id, session_id=session_id, input=question, system=DEMO_SYSTEM
            )
            mem.record(user_id=user_id, session_id=session_id, messages=answer)
            report = context.report
            summary = report.summary
            table.add_row(
                str(turn),
                str(len(mem.history(user_id=user_id, session_id=session_id))),
                f"{summary.kind}, {summary.covered} msgs" if summary else "-",
                str(report.tokens.summary),
                str(report.tokens.window),
                f"{report.tokens.total}/{report.budget}",
                str(len(report.dropped)),
            )
        out.print(table)
        out.print("[bold]The last request, as sent:[/]")
        for message in map(Message.from_openai, context.messages):
            calls = [f"calls {call.function.name}()" for call in message.tool_calls or ()]
            text = message.text or " ".join(calls)
            out.print(f"  {message.role:>9}  {preview(text, 64)}", highlight=False)
        stored = mem.history(user_id=user_id, session_id=session_id)
        out.print(
            f"{len(stored)} messages stored in session {session_id} (none deleted); the last "
            f"request carried {context.report.tokens.total} tokens of a "
            f"{context.report.budget}-token budget.",
            highlight=False,
        )
    return 0

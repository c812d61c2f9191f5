"""``stratamem demo``: all four layers on a scripted long conversation, offline by default.

Three sessions of an on-call assistant (facts and preferences in English and Chinese, one
changed later, a pinned rule, ops turns with tool calls) go through ``Memory`` on the embedded
database; then a new session weeks later asks about what was said in the first. The demo shows
what each request sends against the whole history, the layers of the last request, the summary
and its boundary, the recalled cards, the superseded one, the pin and the assembled prompt.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from memory.cli.base import EXIT_OK, Subcommands, whole_number
from memory.cli.demo_script import QUESTIONS, SYSTEM, ScriptSession, demo_script, questions_session
from memory.context.assembler import AssembledContext
from memory.context.cut import preview
from memory.context.messages import Message
from memory.facade import Memory
from memory.settings import Settings
from storage import Card, StoredMessage

__all__ = ["register_demo", "removal_hint", "sparkline"]

_BLOCKS = " ▁▂▃▄▅▆▇█"


def register_demo(subcommands: Subcommands) -> None:
    """Add ``stratamem demo``."""
    demo = subcommands.add_parser(
        "demo",
        help="all four layers on a scripted long conversation, offline, on the embedded database",
        description="Play a scripted conversation of three sessions (facts in English and "
        "Chinese, one changed later, a pin, ops turns with tool calls) through Memory, then ask "
        "about it in a new session; show what each request sends, the summary, the recalled "
        "cards and the assembled prompt. Offline unless --llm.",
    )
    demo.add_argument(
        "--turns", type=whole_number(0), default=70, help="ops turns per session (default 70)"
    )
    demo.add_argument("--data-dir", type=Path, help="embedded database folder")
    demo.add_argument(
        "--llm",
        action="store_true",
        help="use the configured LLM (OPENAI_BASE_URL, OPENAI_API_KEY) for summaries",
    )
    demo.set_defaults(handler=_run_demo)


def sparkline(values: Sequence[int], *, width: int, top: int) -> str:
    """``values`` as one line of block characters, ``width`` wide at most, scaled to ``top``."""
    if not values:
        return ""
    size = -(-len(values) // width)  # each character is the largest value of its bucket
    buckets = [max(values[i : i + size]) for i in range(0, len(values), size)]
    scale = (len(_BLOCKS) - 1) / max(top, 1)
    # A value above zero shows as at least the lowest block: small is not nothing.
    levels = [min(len(_BLOCKS) - 1, max(round(v * scale), v > 0)) for v in buckets]
    return "".join(_BLOCKS[level] for level in levels)


def _run_demo(args: argparse.Namespace, out: Console) -> int:
    options: dict[str, Any] = {"data_dir": args.data_dir} if args.data_dir else {}
    if not args.llm:  # offline on purpose, whatever the environment says
        options |= {"llm_api_key": None, "llm_base_url": None}
    with Memory.open(
        context_window=4_096, max_output=512, summary={"mode": "inline"}, **options
    ) as mem:
        user_id = f"demo-{uuid.uuid4().hex[:8]}"
        llm = mem.settings.llm_base_url if mem.settings.llm_configured else None
        out.print(_intro(mem, llm))
        started = time.monotonic()
        mem.search(user_id=user_id, query="warm up")  # loads the embedding model once
        out.print(f"embedding model loaded in {time.monotonic() - started:.1f} s", style="dim")
        started = time.monotonic()
        sessions = demo_script(args.turns)
        history, sent = _play(mem, user_id, sessions, out)
        out.print(_growth(history, sent, mem.budget.context_window))
        asked = _ask(mem, user_id, questions_session(), out)
        _show_state(mem, user_id, sessions[-1].id, asked, out)
        took = time.monotonic() - started
        out.print(
            f"\nplayed {len(history) + len(QUESTIONS)} turns in {took:.1f} s. "
            + removal_hint(mem.settings, user_id),
            highlight=False,
            soft_wrap=True,  # the commands are pasted: no line break inside them
        )
        out.print(inspector_hint(mem.settings), highlight=False, soft_wrap=True)
    return EXIT_OK


def inspector_hint(settings: Settings) -> str:
    """How to look at the demo's requests, cards and summaries in ``stratamem ui``."""
    folder = shlex.quote(str(settings.data_dir.expanduser().resolve()))
    prefix = "" if settings.database_url is not None else f"STRATAMEM_DATA_DIR={folder} "
    command = f"{prefix}{_this_command()}"
    return (
        f"See it in a browser: [bold]{escape(f'{command} keys create --admin --label ui')}[/], "
        f"then [bold]{escape(f'{command} ui')}[/] and log in with that key."
    )


def removal_hint(settings: Settings, user_id: str) -> str:
    """Where the demo's data lives and the commands that remove it, ready to paste in a shell.

    ``forget`` reads its database from the environment, not from the demo's ``--data-dir``:
    the command names the folder itself (``STRATAMEM_DATA_DIR=...``), so it removes what the
    demo made wherever that is, and names the ``stratamem`` that runs now when the shell would
    not find it.
    """
    forget = f"{_this_command()} forget --user {shlex.quote(user_id)} --yes"
    if settings.database_url is not None:  # the same variable reaches forget
        where = f"The data lives in the database (user {user_id})."
        return f"{where} Remove it with [bold]{escape(forget)}[/]."
    folder = shlex.quote(str(settings.data_dir.expanduser().resolve()))
    return (
        f"The data lives in {escape(folder)} (user {user_id}). Remove it with "
        f"[bold]{escape(f'STRATAMEM_DATA_DIR={folder} {forget}')}[/], "
        f"or everything with [bold]{escape(f'rm -rf {folder}')}[/]."
    )


def _this_command() -> str:
    """How a shell runs this ``stratamem``: its name when the shell finds it, else its path."""
    running = Path(sys.argv[0])
    if running.name == "stratamem":
        found = shutil.which("stratamem")
        if found is not None and Path(found).resolve() == running.resolve():
            return "stratamem"
        return shlex.quote(str(running.resolve()))
    return f"{shlex.quote(sys.executable)} -m memory.cli"  # python -m memory.cli, or a test


def _intro(mem: Memory, llm: str | None) -> Panel:
    budget = mem.budget
    mode = (
        f"summaries by the LLM at {llm}"
        if llm
        else "offline: no LLM, summaries are raw archives, cards come from the rule extractor"
    )
    return Panel(
        f"window {budget.context_window:,} tokens, history budget {budget.history:,}; {mode}",
        title="stratamem demo",
        title_align="left",
    )


def _play(
    mem: Memory, user_id: str, sessions: Sequence[ScriptSession], out: Console
) -> tuple[list[int], list[int]]:
    """Play every session; the whole history's tokens and the request's tokens per turn."""
    history: list[int] = []
    sent: list[int] = []
    total = 0
    with Progress(
        TextColumn("{task.description:<22}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=out,
    ) as progress:
        for session in sessions:
            task = progress.add_task(
                f"session {session.id} ({session.language})", total=len(session.turns)
            )
            if session.pin:
                mem.pin(user_id=user_id, text=session.pin, session_id=session.id)
            for context, recorded in _turns(mem, user_id, session):
                total += context.report.tokens.input + sum(m.tokens for m in recorded)
                history.append(total)
                sent.append(context.report.tokens.total)
                progress.advance(task)
            mem.end_session(user_id=user_id, session_id=session.id)
    return history, sent


def _turns(
    mem: Memory, user_id: str, session: ScriptSession
) -> Iterator[tuple[AssembledContext, list[StoredMessage]]]:
    """Each turn of ``session``: prepare the input, record the replies; yields both."""
    for n, turn in enumerate(session.turns):
        moment = session.start + timedelta(minutes=2 * n)
        stamp = moment.isoformat()
        context = mem.prepare(
            user_id=user_id,
            session_id=session.id,
            input={
                "role": "user",
                "content": turn.input,
                "id": f"{session.id}-{n}u",
                "timestamp": stamp,
            },
            system=SYSTEM,
        )
        replies = [
            reply
            | {
                "id": f"{session.id}-{n}a{i}",
                "timestamp": (moment + timedelta(seconds=i + 1)).isoformat(),
            }
            for i, reply in enumerate(turn.replies)
        ]
        yield context, mem.record(user_id=user_id, session_id=session.id, messages=replies)


def _growth(history: list[int], sent: list[int], window: int) -> Table:
    top = max(history)
    table = Table(box=box.SIMPLE_HEAD, title="tokens per turn", title_justify="left")
    table.add_column("")
    table.add_column(f"over {len(history)} turns")
    table.add_column("last", justify="right")
    table.add_row("whole history", sparkline(history, width=48, top=top), f"{history[-1]:,}")
    table.add_row("each request", sparkline(sent, width=48, top=top), f"{sent[-1]:,}")
    table.caption = (
        f"each request stays under the {window:,}-token window: the last sent "
        f"{100 * sent[-1] / history[-1]:.1f}% of the history"
    )
    return table


def _ask(mem: Memory, user_id: str, session: ScriptSession, out: Console) -> AssembledContext:
    """Ask the questions of the new session; show what each one recalled. The last context."""
    out.print(f"\n[bold]A new session ({session.id}, {session.start:%d %B %Y}) asks:[/]")
    contexts = list(_turns(mem, user_id, session))
    for turn, (context, _) in zip(session.turns, contexts, strict=True):
        recall = context.report.recall
        table = Table(box=box.SIMPLE_HEAD, title=f"“{turn.input}”", title_justify="left")
        for name in ("score", "type", "said on", "sources", "card"):
            table.add_column(name, justify="right" if name == "score" else "left")
        cards = _cards(mem, user_id, [c.card_id for c in recall.cards] if recall else [])
        for recalled in recall.cards if recall else ():
            card = cards[recalled.card_id]
            table.add_row(
                "pin" if recalled.pinned else f"{recalled.score:.3f}",
                card.type,
                f"{card.observed_at:%d %b %Y}",
                _sources(card),
                preview(" ".join(card.text.split()), 90),
            )
        if recall and recall.query and recall.query != turn.input:
            table.caption = f"searched as: {recall.query} ({recall.method})"
        out.print(table)
    return contexts[-1][0]


def _sources(card: Card) -> str:
    """The first source message's client id, and how many more there are."""
    first, *more = card.source_client_ids or ["-"]
    return f"{first} +{len(more)}" if more else first


def _cards(mem: Memory, user_id: str, ids: Sequence[int]) -> dict[int, Card]:
    return {card_id: mem.card(user_id=user_id, card_id=card_id) for card_id in ids}


def _show_state(
    mem: Memory, user_id: str, session_id: str, context: AssembledContext, out: Console
) -> None:
    """The last request's layers, a summary, the superseded card, the pin, the prompt."""
    tokens = context.report.tokens
    layers = Table(box=box.SIMPLE_HEAD, title="the last request, by layer", title_justify="left")
    layers.add_column("layer")
    layers.add_column("tokens", justify="right")
    for name in ("system", "summary", "memories", "window", "input"):
        layers.add_row(name, f"{getattr(tokens, name):,}")
    layers.add_row("total", f"{tokens.total:,} of {context.report.budget:,}", style="bold")
    out.print(layers)

    summary = mem.summary(user_id=user_id, session_id=session_id)
    if summary is not None:
        out.print(
            Panel(
                preview(summary.content, 600),
                title=f"summary of session {session_id}: {summary.kind}, covers messages "
                f"1-{summary.boundary_seq} (version {summary.version})",
                title_align="left",
            )
        )
    changed = [
        hit.card
        for hit in mem.search(
            user_id=user_id, query="where does the user live", k=10, include_superseded=True
        )
        if hit.card.superseded_by is not None
    ]
    for card in changed:
        out.print(
            f"superseded: [strike]{card.text}[/] (valid until {card.valid_to:%d %B %Y}, "
            f"replaced by card {card.superseded_by})",
            highlight=False,
        )
    for pin in mem.pins(user_id=user_id):
        out.print(f"pinned: {pin.text}", highlight=False)
    out.print("\n[bold]The last request, as sent:[/]")
    for message in map(Message.from_openai, context.messages):
        calls = [f"calls {call.function.name}()" for call in message.tool_calls or ()]
        text = message.text or " ".join(calls)
        out.print(f"  {message.role:>9}  {preview(' '.join(text.split()), 100)}", highlight=False)

"""``stratamem inspect``: a transcript's units, their tokens, and what a trim to a budget keeps."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from memory.cli.base import EXIT_OK, EXIT_PROBLEM, CommandError, Subcommands, whole_number
from memory.cli.inspect_session import DEFAULT_MESSAGES, show_session
from memory.context.cut import preview
from memory.context.messages import Message, parse_messages
from memory.context.tokens import DEFAULT_MODEL, REPLY_PRIMING_TOKENS, TiktokenCounter
from memory.context.trim import trim_history
from memory.context.units import (
    Unit,
    current_turn_start,
    split_units,
    unit_tokens,
    validate_history,
)

__all__ = ["load_transcript", "match_trimmed", "register_inspect"]

Fate = Literal["kept", "cut", "dropped"]


def register_inspect(subcommands: Subcommands) -> None:
    """Add ``stratamem inspect``: a transcript's units, or a stored session."""
    inspect = subcommands.add_parser(
        "inspect",
        help="show a transcript's units and what a trim keeps, or a stored session",
        description="With a FILE: show a transcript's atomic units, their tokens, structural "
        "problems, and what trim_history keeps, cuts and drops at the given budget. With "
        "--user and --session: show a stored session (messages, summary and boundary, cards, "
        "pins) and what its next request would contain, layer by layer.",
    )
    inspect.add_argument(
        "file", type=Path, nargs="?", help="JSON list of OpenAI messages, or {messages}"
    )
    inspect.add_argument("--budget", type=whole_number(0), help="token budget to trim a FILE to")
    inspect.add_argument("--model", default=DEFAULT_MODEL, help="model whose tokenizer counts")
    inspect.add_argument("--user", help="the user of a stored session")
    inspect.add_argument("--session", help="the stored session to show")
    inspect.add_argument("--system", help="the system prompt of the next request")
    inspect.add_argument(
        "--messages",
        type=whole_number(0),
        default=DEFAULT_MESSAGES,
        help=f"newest stored messages to list (default {DEFAULT_MESSAGES})",
    )
    inspect.set_defaults(handler=_run_inspect)


def load_transcript(path: Path) -> list[dict[str, Any]]:
    """Read a transcript: a JSON list of OpenAI messages, or an object with ``messages``.

    Raises:
        CommandError: the file cannot be read, is not JSON, or has no message list.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise CommandError(f"cannot read {path}: {error.strerror or error}") from error
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CommandError(f"{path} is not valid JSON: {error}") from error
    if isinstance(data, dict):
        data = data.get("messages")
    if not isinstance(data, list):
        raise CommandError(f"{path} holds neither a list of messages nor an object with one")
    return data


@dataclass(frozen=True, slots=True)
class UnitRow:
    """One unit of a transcript as the ``inspect`` table shows it.

    Attributes:
        unit: the unit.
        part: where the unit stands: the system message, the window, or the current turn.
        tokens: tokens of the unit as written.
        sent: tokens of the unit after the trim (cut tool results counted as cut).
        fate: what the trim did to the unit.
    """

    unit: Unit
    part: Literal["system", "window", "turn"]
    tokens: int
    sent: int
    fate: Fate


def _run_inspect(args: argparse.Namespace, out: Console) -> int:
    if args.file is None:
        if args.user is None and args.session is None:
            raise CommandError("give a transcript FILE, or --user and --session")
        return show_session(args, out)
    if args.user is not None or args.session is not None:
        raise CommandError(
            "give a transcript FILE or a stored session (--user, --session), not both"
        )
    if args.budget is None:
        raise CommandError("inspecting a transcript FILE needs --budget")
    path: Path = args.file
    raw = load_transcript(path)
    problems = validate_history(raw)
    if problems:
        out.print(
            f"[bold red]{escape(str(path))}: {len(problems)} structural problem(s)[/]",
            highlight=False,
        )
        for problem in problems:
            out.print(f"  - {problem}", highlight=False, markup=False)
        return EXIT_PROBLEM
    messages = parse_messages(raw)
    counter = TiktokenCounter(args.model)
    sent = match_trimmed(raw, trim_history(raw, args.budget, counter=counter))
    turn = current_turn_start(messages)
    rows: list[UnitRow] = []
    for unit in split_units(messages):
        kept = [item for item in sent[unit.start : unit.stop] if item is not None]
        rows.append(
            UnitRow(
                unit,
                "system" if unit.kind == "system" else "turn" if unit.start >= turn else "window",
                unit_tokens(unit, counter),
                sum(counter.count_message(Message.from_openai(item)) for item in kept),
                _fate(raw[unit.start : unit.stop], sent[unit.start : unit.stop]),
            )
        )
    total = sum(row.tokens for row in rows) + REPLY_PRIMING_TOKENS
    out.print(
        f"[bold]{escape(str(path))}[/]: {_count(len(messages), 'message')} "
        f"in {_count(len(rows), 'unit')}, "
        f"{total:,} tokens ({args.model})",
        highlight=False,
        soft_wrap=True,
    )
    out.print(_unit_table(rows, args.budget, out.width))
    out.print(_summary_line(rows, args.budget), highlight=False, soft_wrap=True)
    return EXIT_OK


def match_trimmed(
    messages: Sequence[dict[str, Any]], trimmed: Sequence[dict[str, Any]]
) -> list[dict[str, Any] | None]:
    """What ``trim_history`` sent for each input message: the message, its cut, or ``None``.

    Matches from the end: a trim keeps the system message and a contiguous run of the newest
    messages, so matching backwards cannot pair an older duplicate with a newer kept message.
    """
    sent: list[dict[str, Any] | None] = [None] * len(messages)
    position = len(trimmed) - 1
    for index in range(len(messages) - 1, -1, -1):
        if position < 0:
            break
        original, candidate = messages[index], trimmed[position]
        same_result = original.get("role") == candidate.get("role") == "tool" and original.get(
            "tool_call_id"
        ) == candidate.get("tool_call_id")
        if candidate == original or same_result:
            sent[index] = candidate
            position -= 1
    return sent


def _fate(originals: Sequence[dict[str, Any]], sent: Sequence[dict[str, Any] | None]) -> Fate:
    if any(item is None for item in sent):
        return "dropped"
    changed = any(item != original for item, original in zip(sent, originals, strict=True))
    return "cut" if changed else "kept"


def _count(number: int, noun: str) -> str:
    return f"{number:,} {noun}" + ("" if number == 1 else "s")


_FATE_STYLES = {"kept": "green", "cut": "yellow", "dropped": "red"}
_HEADERS = ("#", "part", "unit", "tokens", "sent", "preview")
#: What the table spends besides its cells: three characters between two columns (padding, the
#: box's divider, padding) and one at each edge.
_PADDING = 3 * (len(_HEADERS) - 1) + 2


def _unit_table(rows: Sequence[UnitRow], budget: int, width: int) -> Table:
    """The table of units; previews are cut to fit a console ``width`` characters wide.

    Every column but the preview is as wide as its widest cell (header included), so spans of
    three-digit indices or long token counts never squeeze a header: only previews are cut.
    """
    table = Table(
        title=f"Units, and what a trim to {budget:,} tokens sends",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    cells = [_cells(row) for row in rows]
    widths = [
        max([len(name), *(len(Text.from_markup(line[column]).plain) for line in cells)])
        for column, name in enumerate(_HEADERS[:-1])
    ]
    for name, column_width in zip(_HEADERS, [*widths, None], strict=True):
        right = name in ("#", "tokens", "sent")
        table.add_column(
            name, justify="right" if right else "left", no_wrap=True, min_width=column_width
        )
    room = max(12, width - sum(widths) - _PADDING)
    for row, line in zip(rows, cells, strict=True):
        table.add_row(*line, preview(_unit_text(row.unit), room))
    return table


def _cells(row: UnitRow) -> list[str]:
    """The cells of a row before its preview: span, part, roles, tokens, what was sent."""
    unit = row.unit
    span = str(unit.start) if len(unit.messages) == 1 else f"{unit.start}-{unit.stop - 1}"
    sent = "dropped" if row.fate == "dropped" else f"{row.sent:,}"
    if row.fate == "cut":
        sent += " cut"
    return [span, row.part, _roles(unit), f"{row.tokens:,}", f"[{_FATE_STYLES[row.fate]}]{sent}[/]"]


def _roles(unit: Unit) -> str:
    if unit.kind == "tool_exchange":
        return f"assistant + {len(unit.messages) - 1} tool"
    return unit.messages[0].role


def _unit_text(unit: Unit) -> str:
    first = unit.messages[0]
    if unit.kind == "tool_exchange":
        return ", ".join(f"{call.function.name}()" for call in first.tool_calls or ())
    if isinstance(first.content, list) and not first.text:
        return f"[{_count(len(first.content), 'content part')}]"
    return first.text


def _summary_line(rows: Sequence[UnitRow], budget: int) -> str:
    kept = [row for row in rows if row.fate != "dropped"]
    cut = sum(1 for row in rows if row.fate == "cut")
    dropped = [row for row in rows if row.fate == "dropped"]
    sent = sum(row.sent for row in kept) + REPLY_PRIMING_TOKENS
    return (
        f"Trim to {budget:,} tokens sends {sent:,}: "
        f"kept {len(kept)} of {_count(len(rows), 'unit')} "
        f"({cut} with cut tool results), dropped {_count(len(dropped), 'unit')} "
        f"({_count(sum(len(row.unit.messages) for row in dropped), 'message')}, "
        f"{sum(row.tokens for row in dropped):,} tokens)."
    )

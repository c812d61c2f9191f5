"""``stratamem eval locomo``: evidence recall at equal token budgets on LoCoMo, offline.

Everything goes through the public API, as an application would use it
(``memory.cli.eval_locomo``): the conversations are recorded and archived, then every
question is asked with ``Memory.prepare`` once per token budget, and the memories of the
prompt are scored (``memory.eval.equal_budgets``) beside turn-level BM25 and MiniLM baselines:
evidence recall (the evidence turns the memories cite), and answer in text (for questions
whose gold answer is at most four words, the share whose answer the memories' words hold;
``memory.eval.answers``).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from memory.cli.base import EXIT_OK, CommandError, Subcommands, whole_number
from memory.cli.eval_locomo import (
    METHODS,
    CachedEmbedder,
    EvalReport,
    MemoryBackend,
    evaluate,
    open_backend,
    session_messages,
    user_id_of,
)
from memory.cli.eval_updates import register_updates
from memory.eval.equal_budgets import BUDGETS
from memory.eval.locomo import Conversation, LocomoFormatError, load_locomo
from memory.eval.offline import EMBEDDERS, make_embedder
from retrieval import DEFAULT_SEARCH, RECIPES

__all__ = [
    "EvalReport",
    "MemoryBackend",
    "evaluate",
    "register_eval",
    "session_messages",
    "user_id_of",
]


def register_eval(subcommands: Subcommands) -> None:
    """Add ``stratamem eval locomo`` and ``stratamem eval updates``."""
    evaluation = subcommands.add_parser(
        "eval", help="measure recall on a benchmark", description="Measure recall offline."
    )
    benchmarks = evaluation.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    locomo = benchmarks.add_parser(
        "locomo",
        help="evidence recall at token budgets on LoCoMo, beside turn-level baselines",
        description="Ingest each LoCoMo conversation into a fresh database (one user each), "
        "ask every question with evidence through prepare, and score the evidence turns of "
        "the memories taken in rank order until each token budget is spent (and of k "
        "memories), per category, beside turn-level BM25 and MiniLM baselines.",
    )
    locomo.add_argument("--data", type=Path, required=True, help="the LoCoMo JSON file")
    locomo.add_argument("--k", type=whole_number(1), default=10, help="memories for recall@k (10)")
    locomo.add_argument(
        "--budgets",
        type=_budgets,
        default=BUDGETS,
        help="tokens of recalled text, comma-separated (256,512,1024,2048)",
    )
    locomo.add_argument(
        "--split",
        type=lambda text: tuple(part for part in text.split(",") if part),
        default=(),
        help="the conversations the parameters were tuned on (e.g. conv-26,conv-30,conv-41): "
        "reported apart from the others",
    )
    locomo.add_argument(
        "--embedder",
        choices=EMBEDDERS,
        default="minilm",
        help="minilm (default) or minilm-int8: the cards, the query and the MiniLM baseline "
        "all embedded with it",
    )
    locomo.add_argument(
        "--embedding-cache",
        type=Path,
        help="keep MiniLM's vectors in this file across runs (e.g. under /tmp)",
    )
    locomo.add_argument(
        "--recipe",
        choices=sorted(RECIPES),
        default=DEFAULT_SEARCH.name,
        help="the search recipe recall and search use, one of retrieval.RECIPES "
        f"(default: {DEFAULT_SEARCH.name})",
    )
    locomo.add_argument("--limit", type=whole_number(1), help="only the first N conversations")
    locomo.add_argument("--json", type=Path, dest="json_out", help="also write the numbers here")
    locomo.add_argument(
        "--data-dir", type=Path, help="database folder (default: a temporary one, removed after)"
    )
    locomo.set_defaults(handler=_run_locomo)
    register_updates(benchmarks)


def _budgets(text: str) -> tuple[int, ...]:
    """``256,512`` as token budgets, each a whole number >= 1."""
    try:
        budgets = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of whole numbers: {text!r}") from None
    if not budgets or min(budgets) < 1:
        raise argparse.ArgumentTypeError(f"budgets must be whole numbers >= 1: {text!r}")
    return budgets


def _run_locomo(args: argparse.Namespace, out: Console) -> int:
    conversations = _load(args.data)[: args.limit]
    embedder = make_embedder(args.embedder)
    cache = CachedEmbedder(embedder, args.embedding_cache) if args.embedding_cache else None
    used = cache or embedder
    try:
        with (
            open_backend(
                args.data_dir, used, args.budgets, args.k, RECIPES[args.recipe]
            ) as backend,
            _progress(out) as progress,
        ):
            report = evaluate(
                conversations,
                backend,
                used,
                k=args.k,
                budgets=args.budgets,
                split=args.split,
                progress=progress,
            )
    finally:
        if cache is not None:
            cache.save()
    for group in report.groups:
        out.print(_table(report, group))
        out.print(_answer_table(report, group))
    out.print(
        f"evidence ids skipped: {report.malformed} malformed, {report.missing} pointing at no turn",
        highlight=False,
    )
    out.print(f"search recipe: {args.recipe}; embedder: {embedder.name}", highlight=False)
    if args.json_out is not None:
        numbers = {"recipe": args.recipe, "embedder": embedder.name, **report.as_json()}
        args.json_out.write_text(json.dumps(numbers, indent=2) + "\n", encoding="utf-8")
    return EXIT_OK


def _load(path: Path) -> list[Conversation]:
    """Read the data, or a one-line ``CommandError`` (exit code 2)."""
    try:
        return load_locomo(path)
    except OSError as error:
        raise CommandError(f"cannot read {path}: {error.strerror or error}") from error
    except LocomoFormatError as error:
        raise CommandError(str(error)) from error


@contextmanager
def _progress(out: Console) -> Iterator[Progress]:
    """A progress bar per phase (ingesting, searching), on the command's console."""
    with Progress(
        TextColumn("{task.description:<10}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=out,
        transient=False,
    ) as progress:
        yield progress


def _table(report: EvalReport, group: str) -> Table:
    """Evidence recall per method and budget (rows) and category (columns)."""
    members = report.members[group]
    table = Table(
        title=f"LoCoMo, {group}: {', '.join(members)}. Evidence recall of the memories taken in "
        "rank order until a token budget is spent (or k memories); sent = mean tokens, "
        "repeated = share of them in a line sent already",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    table.add_column("method", no_wrap=True)
    table.add_column("tokens", justify="right", no_wrap=True)
    rows = report.groups[group][METHODS[0]]
    for row in rows:
        table.add_column(f"{row.name} ({row.questions})", justify="right")
    table.add_column("sent", justify="right")
    table.add_column("repeated", justify="right")
    for method in METHODS:
        rows = report.groups[group][method]
        overall = rows[-1]
        keys: list[int | str] = [*report.budgets, "k"]
        for key in keys:
            label = str(key) if key != "k" else f"k={report.k}"
            table.add_row(
                method if key == report.budgets[0] else "",
                label,
                *(f"{row.recall[key]:.3f}" for row in rows),
                f"{overall.tokens[key]:.0f}",
                f"{100 * overall.repeated[key]:.0f}%",
                style="bold" if method == METHODS[0] and key == 1024 else None,
            )
    return table


def _answer_table(report: EvalReport, group: str) -> Table:
    """Answer in text per method and budget (rows) and category (columns); a category's
    count is its questions with an answer short enough to check (``-``: none)."""
    members = report.members[group]
    table = Table(
        title=f"LoCoMo, {group}: {', '.join(members)}. Answer in text: the share of questions "
        "whose gold answer (at most 4 words, normalised) appears in the memories taken",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    table.add_column("method", no_wrap=True)
    table.add_column("tokens", justify="right", no_wrap=True)
    for row in report.groups[group][METHODS[0]]:
        table.add_column(f"{row.name} ({row.answerable})", justify="right")
    keys: list[int | str] = [*report.budgets, "k"]
    for method in METHODS:
        rows = report.groups[group][method]
        for key in keys:
            table.add_row(
                method if key == report.budgets[0] else "",
                str(key) if key != "k" else f"k={report.k}",
                *(f"{row.answered[key]:.3f}" if row.answered else "-" for row in rows),
                style="bold" if method == METHODS[0] and key == 1024 else None,
            )
    return table

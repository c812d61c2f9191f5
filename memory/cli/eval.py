"""``stratamem eval locomo``: evidence recall@k, MRR and token share on LoCoMo, offline.

Each conversation is one user (``locomo-<sample_id>``), each LoCoMo session one session, each
turn a ``turn`` card (the turn with one neighbour on each side of the same session, rendered by
``turn_card_text`` with the session's day, its sources the dialog ids it holds, its time the
session's). Every question with evidence is searched with ``k``; ``memory.evaluation`` scores it.

Today ingestion and search go straight to ``CardIndex`` + ``CardStore`` (``CardBackend``): the
facade's ``Memory.record`` (with per-message ``timestamp``), ``Memory.end_session`` and
``Memory.search`` are being added on another branch. Once they land, ``CardBackend.ingest``
becomes "record each session's messages (dialog id as the client id, session time as the
timestamp), then ``end_session``, then run the worker until idle", and ``CardBackend.recall``
becomes ``Memory.search(user_id=, query=, k=)`` mapped to ``Recalled``: one function each.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from memory.cards import time_range_of_query
from memory.cli.base import EXIT_OK, CommandError, Subcommands
from memory.context.tokens import DEFAULT_MODEL, TiktokenCounter
from memory.evaluation import (
    Conversation,
    LocomoFormatError,
    QuestionScore,
    Recalled,
    ScoreRow,
    Session,
    conversation_tokens,
    load_locomo,
    score_question,
    summarize,
)
from retrieval import (
    CardDraft,
    CardIndex,
    Embedder,
    SentenceTransformerEmbedder,
    Utterance,
    turn_card_text,
    turn_window,
)
from storage import CardStore, Database

__all__ = ["CardBackend", "EvalReport", "evaluate", "make_embedder", "register_eval", "user_id_of"]


def register_eval(subcommands: Subcommands) -> None:
    """Add ``stratamem eval locomo``."""
    evaluation = subcommands.add_parser(
        "eval", help="measure recall on a benchmark", description="Measure recall offline."
    )
    benchmarks = evaluation.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    locomo = benchmarks.add_parser(
        "locomo",
        help="evidence recall@k, MRR and token share on LoCoMo",
        description="Ingest each LoCoMo conversation into a fresh database (one user each), "
        "search every question with evidence, and score evidence recall@k, MRR and the "
        "recalled cards' share of the conversation's tokens, per category and overall.",
    )
    locomo.add_argument("--data", type=Path, required=True, help="the LoCoMo JSON file")
    locomo.add_argument("--k", type=_positive, default=10, help="cards per search (10)")
    locomo.add_argument("--limit", type=_positive, help="only the first N conversations")
    locomo.add_argument("--json", type=Path, dest="json_out", help="also write the numbers here")
    locomo.add_argument(
        "--data-dir", type=Path, help="database folder (default: a temporary one, removed after)"
    )
    locomo.set_defaults(handler=_run_locomo)


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {number}")
    return number


def make_embedder() -> Embedder:
    """The embedder of the evaluation: MiniLM, offline (tests replace this function)."""
    return SentenceTransformerEmbedder()


def user_id_of(conversation: Conversation) -> str:
    """The user a conversation is ingested as."""
    return f"locomo-{conversation.sample_id}"


class CardBackend:
    """Ingestion and search of the evaluation, on ``CardIndex`` until the facade has them."""

    def __init__(self, index: CardIndex) -> None:
        """Evaluate through ``index``."""
        self._index = index

    def ingest(self, conversation: Conversation) -> None:
        """Store every turn of the conversation as a turn card, one session at a time."""
        user_id = user_id_of(conversation)
        for session in conversation.sessions:
            self._index.add(user_id, session_drafts(session))

    def recall(self, user_id: str, question: str, k: int) -> list[Recalled]:
        """The user's top ``k`` cards for ``question``: texts and dialog ids, best first.

        A time the question names boosts the cards of that time, as ``Memory.search`` does
        (relative words count from today, years after the conversations: they boost nothing).
        """
        during = time_range_of_query(question, datetime.now(UTC))
        return [
            Recalled(hit.card.text, tuple(hit.card.source_client_ids))
            for hit in self._index.search(user_id, question, k=k, during=during)
        ]


def session_drafts(session: Session) -> list[CardDraft]:
    """The turn cards of one session: each turn with its neighbours, dated by the session."""
    utterances = [
        Utterance(speaker=t.speaker, text=t.text, caption=t.caption) for t in session.turns
    ]
    day = session.time.date() if session.time is not None else None
    drafts = []
    for index in range(len(session.turns)):
        window = turn_window(len(session.turns), index)
        drafts.append(
            CardDraft(
                type="turn",
                text=turn_card_text([utterances[i] for i in window], day=day),
                session_id=f"session_{session.number}",
                source_client_ids=[session.turns[i].dia_id for i in window],
                observed_at=session.time,
                occurred_at=session.time,
            )
        )
    return drafts


@dataclass(frozen=True, slots=True)
class EvalReport:
    """What a run measured: rows per category and overall, and what it had to skip."""

    k: int
    conversations: int
    turns: int
    rows: list[ScoreRow]
    malformed: int
    missing: int

    def as_json(self) -> dict[str, Any]:
        """The report as a JSON object."""
        return {
            "k": self.k,
            "conversations": self.conversations,
            "turns": self.turns,
            "evidence_ids_malformed": self.malformed,
            "evidence_ids_missing": self.missing,
            "token_model": DEFAULT_MODEL,
            "categories": {row.name: row.as_json() for row in self.rows[:-1]},
            "overall": self.rows[-1].as_json(),
        }


def evaluate(
    conversations: Sequence[Conversation], backend: CardBackend, *, k: int, progress: Progress
) -> EvalReport:
    """Ingest every conversation, then search and score every question with evidence."""
    counter = TiktokenCounter(DEFAULT_MODEL)
    turns = sum(len(c.turns) for c in conversations)
    ingesting = progress.add_task("ingesting", total=turns)
    for conversation in conversations:
        backend.ingest(conversation)
        progress.advance(ingesting, len(conversation.turns))
    searching = progress.add_task("searching", total=sum(len(c.questions) for c in conversations))
    scores: list[QuestionScore] = []
    for conversation in conversations:
        full = conversation_tokens(conversation, counter.count_text)
        for question in conversation.questions:
            recalled = backend.recall(user_id_of(conversation), question.text, k)
            scores.append(
                score_question(question, recalled, full_tokens=full, count=counter.count_text)
            )
            progress.advance(searching)
    return EvalReport(
        k=k,
        conversations=len(conversations),
        turns=turns,
        rows=summarize(scores),
        malformed=sum(c.malformed for c in conversations),
        missing=sum(c.missing for c in conversations),
    )


def _run_locomo(args: argparse.Namespace, out: Console) -> int:
    conversations = _load(args.data)[: args.limit]
    with _backend(args.data_dir) as backend, _progress(out) as progress:
        report = evaluate(conversations, backend, k=args.k, progress=progress)
    out.print(_table(report))
    out.print(
        f"evidence ids skipped: {report.malformed} malformed, {report.missing} pointing at no turn",
        highlight=False,
    )
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(report.as_json(), indent=2) + "\n", encoding="utf-8")
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
def _backend(data_dir: Path | None) -> Iterator[CardBackend]:
    """A backend on the embedded database in ``data_dir``, or in a temporary folder."""
    with ExitStack() as stack:
        if data_dir is None:
            data_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="stratamem-")))
        database = stack.enter_context(Database.open(None, data_dir=data_dir))
        embedder = make_embedder()
        store = CardStore(database, model=embedder.name, dimension=embedder.dimension)
        yield CardBackend(CardIndex(store, embedder))


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


def _table(report: EvalReport) -> Table:
    """Per category and overall: questions, recall@k, MRR, token share."""
    table = Table(
        title=f"LoCoMo: {report.conversations} conversations, {report.turns} turns, k={report.k}",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    table.add_column("category")
    for name in ("questions", f"recall@{report.k}", "MRR", "tokens"):
        table.add_column(name, justify="right")
    for row in report.rows:
        table.add_row(
            row.name,
            str(row.questions),
            f"{row.recall:.3f}",
            f"{row.mrr:.3f}",
            f"{100 * row.token_share:.1f}%",
            style="bold" if row.name == "overall" else None,
        )
    return table

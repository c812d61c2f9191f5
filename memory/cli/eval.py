"""``stratamem eval locomo``: evidence recall@k, MRR and token share on LoCoMo, offline.

Everything goes through the public API, as an application would use it. Each conversation is
one user (``locomo-<sample_id>``) and each LoCoMo session one session: its turns are recorded
with ``Memory.record`` (the dialog id as the client id, the session's time as the timestamp, the
speaker as the message's name, an image's caption kept in the text), then ``end_session``; the
worker runs until idle, which archives every turn as a ``turn`` card (the turn with its
neighbours, dated) and the rule-extracted cards. Every question with evidence is then searched
with ``Memory.search(user_id=, query=, k=)``; ``memory.evaluation`` scores the sources.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from memory.cli.base import EXIT_OK, CommandError, Subcommands, whole_number
from memory.cli.eval_updates import register_updates
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
from memory.facade import Memory
from memory.settings import Settings
from retrieval import Embedder, OnnxEmbedder
from storage import Database

__all__ = [
    "EvalReport",
    "MemoryBackend",
    "evaluate",
    "make_embedder",
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
        help="evidence recall@k, MRR and token share on LoCoMo",
        description="Ingest each LoCoMo conversation into a fresh database (one user each), "
        "search every question with evidence, and score evidence recall@k, MRR and the "
        "recalled cards' share of the conversation's tokens, per category and overall.",
    )
    locomo.add_argument("--data", type=Path, required=True, help="the LoCoMo JSON file")
    locomo.add_argument("--k", type=whole_number(1), default=10, help="cards per search (10)")
    locomo.add_argument("--limit", type=whole_number(1), help="only the first N conversations")
    locomo.add_argument("--json", type=Path, dest="json_out", help="also write the numbers here")
    locomo.add_argument(
        "--data-dir", type=Path, help="database folder (default: a temporary one, removed after)"
    )
    locomo.set_defaults(handler=_run_locomo)
    register_updates(benchmarks)


def make_embedder() -> Embedder:
    """The embedder of the evaluation: MiniLM, offline (tests replace this function)."""
    return OnnxEmbedder()


def user_id_of(conversation: Conversation) -> str:
    """The user a conversation is ingested as."""
    return f"locomo-{conversation.sample_id}"


class MemoryBackend:
    """Ingestion and search of the evaluation, through a ``Memory`` (background mode)."""

    def __init__(self, memory: Memory) -> None:
        """Evaluate through ``memory``."""
        self._memory = memory

    def ingest(self, conversation: Conversation) -> None:
        """Record every session, end it, then run the worker until the cards are stored."""
        user_id = user_id_of(conversation)
        first_speaker = next((t.speaker for t in conversation.turns), None)
        for session in conversation.sessions:
            session_id = f"session_{session.number}"
            messages = session_messages(session, user_speaker=first_speaker)
            if messages:
                self._memory.record(user_id=user_id, session_id=session_id, messages=messages)
                self._memory.end_session(user_id=user_id, session_id=session_id)
        self._memory.run_worker(until_idle=True)

    def recall(self, user_id: str, question: str, k: int) -> list[Recalled]:
        """The user's top ``k`` cards for ``question``: texts and dialog ids, best first.

        A time the question names boosts the cards of that time, as ``Memory.search`` does
        (relative words count from today, years after the conversations: they boost nothing).
        """
        return [
            Recalled(hit.card.text, tuple(hit.card.source_client_ids))
            for hit in self._memory.search(user_id=user_id, query=question, k=k)
        ]


def session_messages(session: Session, *, user_speaker: str | None) -> list[dict[str, Any]]:
    """The messages ``record`` takes for one LoCoMo session.

    The conversation's first speaker is the user and the other the assistant (only the user's
    messages are read by the rule extractor, whose cards speak of "the user"); both keep their
    names, which their turn cards show. An image's caption stays in the text, as the turn card
    showed it when cards were written directly.
    """
    messages: list[dict[str, Any]] = []
    for turn in session.turns:
        text = turn.text
        if turn.caption:
            text += f" [shares an image: {turn.caption}]"
        message: dict[str, Any] = {
            "role": "user" if turn.speaker == user_speaker else "assistant",
            "name": turn.speaker,
            "content": text,
            "id": turn.dia_id,
        }
        if session.time is not None:
            message["timestamp"] = session.time
        messages.append(message)
    return messages


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
    conversations: Sequence[Conversation], backend: MemoryBackend, *, k: int, progress: Progress
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
def _backend(data_dir: Path | None) -> Iterator[MemoryBackend]:
    """A backend on the embedded database in ``data_dir``, or in a temporary folder.

    Offline whatever the environment says: no chat model, the background worker mode (run
    until idle after each conversation) and no debounce.
    """
    with ExitStack() as stack:
        if data_dir is None:
            data_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="stratamem-")))
        database = stack.enter_context(Database.open(None, data_dir=data_dir))
        settings = Settings(
            data_dir=data_dir,
            llm_base_url=None,
            llm_api_key=None,
            summary={"mode": "background", "debounce_seconds": 0},
        )
        memory = Memory(database, settings, embedder=make_embedder())
        yield MemoryBackend(memory)


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

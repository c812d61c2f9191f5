"""``stratamem eval updates``: does the current value of a changed fact reach the prompt first?

Everything goes through the public API, as an application would use it, with the offline defaults a
user gets (MiniLM, rules extraction, no LLM), or with ``--chat prose`` a chat model whose every
reply is prose where JSON was asked for (the rules take over). Each user's sessions are recorded
with their dates (``memory.eval.knowledge_updates.session_messages``) and ended; the worker runs
until idle; then each question is asked with ``prepare`` in a new session at the user's
``ask_date``, and ``memory.eval.knowledge_updates`` scores the context built for it. After a user's
sessions are stored, the supersede chains of their cards are checked: no cycle, one current card per
fact (``memory.cards.chain_problems``).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from memory.cards.supersede import ChainLink, chain_problems
from memory.chat_models import ChatModel, Completion, ReplyFormat
from memory.cli.base import EXIT_OK, CommandError, Subcommands, whole_number
from memory.eval.knowledge_updates import (
    UpdateScore,
    UpdateScoreRow,
    UpdatesFormatError,
    UpdateUser,
    load_updates,
    score_prompt,
    session_messages,
    summarize,
)
from memory.eval.offline import EMBEDDERS, make_embedder
from memory.facade import Memory
from memory.settings import Settings
from storage import CardFilter, CardStore, Database

__all__ = [
    "ChainReport",
    "ProseChatModel",
    "UpdatesReport",
    "evaluate_updates",
    "prompt_text",
    "register_updates",
]

ChatChoice = Literal["none", "prose"]


def register_updates(benchmarks: Subcommands) -> None:
    """Add ``stratamem eval updates`` to the ``eval`` command's benchmarks."""
    updates = benchmarks.add_parser(
        "updates",
        help="current values of changed facts in the prompt, ahead of stale ones",
        description="Record each user's dated sessions into a fresh database and end them, then "
        "ask each question in a new session at the user's ask date and score the prompt "
        "prepare builds: is the current value in it, and before every stale value? Per "
        "language and kind of question.",
    )
    updates.add_argument("--data", type=Path, required=True, help="the knowledge-update JSON")
    updates.add_argument("--limit", type=whole_number(1), help="only the first N users")
    updates.add_argument(
        "--chat",
        choices=("none", "prose"),
        default="none",
        help="none: offline, rules only (default); prose: a chat model that never answers "
        "in JSON, so the rules take over after every call",
    )
    updates.add_argument(
        "--embedder",
        choices=EMBEDDERS,
        default="minilm",
        help="minilm (default) or minilm-int8 (its int8 weights): the cards and the questions "
        "embedded with it",
    )
    updates.add_argument(
        "--json",
        type=Path,
        dest="json_out",
        help="also write the numbers here, with each question's outcome and scored prompt",
    )
    updates.add_argument(
        "--data-dir", type=Path, help="database folder (default: a temporary one, removed after)"
    )
    updates.set_defaults(handler=_run_updates)


class ProseChatModel:
    """A ``ChatModel`` that answers every request with one line of prose, never JSON.

    What a model that ignores both ``response_format`` and the prompt does: summaries fall back
    to plain text and card extraction to the rules.
    """

    REPLY = "Sure, I have noted what the user said and will keep it in mind."

    def __init__(self) -> None:
        self.calls = 0

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        model: str,
        temperature: float,
        max_tokens: int | None,
        timeout: float,
        response_format: ReplyFormat | None = None,
    ) -> Completion:
        """Count the call and answer in prose."""
        self.calls += 1
        sent = sum(len(str(message.get("content") or "").split()) for message in messages)
        return Completion(self.REPLY, sent, len(self.REPLY.split()), model)


@dataclass(slots=True)
class ChainReport:
    """The supersede chains of every user's cards after their sessions were stored."""

    facts: int = 0
    cycles: int = 0
    without_current: int = 0
    several_current: int = 0
    users_with_problems: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """The report as a JSON object."""
        return {
            "facts": self.facts,
            "cycles": self.cycles,
            "facts_without_current_card": self.without_current,
            "facts_with_several_current_cards": self.several_current,
            "users_with_problems": self.users_with_problems,
        }


@dataclass(frozen=True, slots=True)
class UpdatesReport:
    """What a run measured: rows per language and kind, the chains, the chat model used."""

    users: int
    chat: ChatChoice
    rows: list[UpdateScoreRow]
    chains: ChainReport
    #: Every question's score, with the user it was asked for.
    scores: list[tuple[str, UpdateScore]]

    def as_json(self) -> dict[str, Any]:
        """The report as a JSON object, with every question's outcome."""
        return {
            "users": self.users,
            "chat": self.chat,
            "rows": {row.name: row.as_json() for row in self.rows},
            "chains": self.chains.as_json(),
            "questions": [
                {
                    "user": user,
                    "q": s.question.text,
                    "kind": s.question.kind,
                    "lang": s.question.lang,
                    "current_in_prompt": s.current_in,
                    "current_first": s.current_first,
                    "stale_present": s.stale_present,
                    "prompt": s.prompt,
                }
                for user, s in self.scores
            ],
        }


def prompt_text(messages: Sequence[dict[str, Any]]) -> str:
    """The text of a prompt before its last user message: what memory added to the question."""
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=None)
    kept = messages if last_user is None else messages[:last_user]
    return "\n".join(_content(message) for message in kept)


def _content(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):  # content parts
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


def evaluate_updates(
    users: Sequence[UpdateUser],
    memory: Memory,
    cards: CardStore,
    *,
    chat: ChatChoice,
    progress: Progress,
) -> UpdatesReport:
    """Record and end every user's sessions, check their chains, then ask and score."""
    chains = ChainReport()
    scores: list[tuple[str, UpdateScore]] = []
    recording = progress.add_task("recording", total=len(users))
    asking = progress.add_task("asking", total=sum(len(u.questions) for u in users))
    for user in users:
        for session in user.sessions:
            memory.record(
                user_id=user.user, session_id=session.id, messages=session_messages(session)
            )
            memory.end_session(user_id=user.user, session_id=session.id)
        memory.run_worker(until_idle=True)
        _check_chains(user.user, cards, chains)
        progress.advance(recording)
        for number, question in enumerate(user.questions, start=1):
            context = memory.prepare(
                user_id=user.user,
                session_id=f"{user.user}-ask-{number}",
                input={"role": "user", "content": question.text, "timestamp": user.ask_date},
            )
            scores.append((user.user, score_prompt(question, prompt_text(context.messages))))
            progress.advance(asking)
    rows = summarize([score for _, score in scores])
    return UpdatesReport(len(users), chat, rows, chains, scores)


def _check_chains(user_id: str, cards: CardStore, report: ChainReport) -> None:
    stored = cards.list_cards(user_id, CardFilter(include_superseded=True))
    problems = chain_problems(
        ChainLink(c.id, c.subject, c.attribute, c.superseded_by, c.pinned) for c in stored
    )
    report.facts += problems.facts
    report.cycles += len(problems.cycles)
    report.without_current += len(problems.without_current)
    report.several_current += len(problems.several_current)
    if problems:
        report.users_with_problems.append(user_id)


def _run_updates(args: argparse.Namespace, out: Console) -> int:
    users = _load(args.data)[: args.limit]
    with (
        _memory(args.data_dir, args.chat, args.embedder) as (memory, cards),
        _progress(out) as progress,
    ):
        report = evaluate_updates(users, memory, cards, chat=args.chat, progress=progress)
    out.print(_table(report))
    chains = report.chains
    out.print(
        f"supersede chains: {chains.facts} facts, {chains.cycles} cycles, "
        f"{chains.without_current} without a current card, "
        f"{chains.several_current} with more than one",
        highlight=False,
    )
    out.print(f"embedder: {cards.model}", highlight=False)
    if args.json_out is not None:
        numbers = {"embedder": cards.model, **report.as_json()}
        args.json_out.write_text(
            json.dumps(numbers, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
    return EXIT_OK


def _load(path: Path) -> list[UpdateUser]:
    """Read the data, or a one-line ``CommandError`` (exit code 2)."""
    try:
        return load_updates(path)
    except OSError as error:
        raise CommandError(f"cannot read {path}: {error.strerror or error}") from error
    except UpdatesFormatError as error:
        raise CommandError(str(error)) from error


@contextmanager
def _memory(
    data_dir: Path | None, chat: ChatChoice, embedding: str
) -> Iterator[tuple[Memory, CardStore]]:
    """A ``Memory`` on the embedded database in ``data_dir`` (or a temporary folder).

    Offline whatever the environment says (no endpoint; with ``prose``, the prose model), in
    the background worker mode with no debounce, every other setting the default.
    """
    with ExitStack() as stack:
        if data_dir is None:
            data_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="stratamem-")))
        database: Database = stack.enter_context(Database.open(None, data_dir=data_dir))
        settings = Settings(
            data_dir=data_dir,
            llm_base_url=None,
            llm_api_key=None,
            summary={"mode": "background", "debounce_seconds": 0},
            cards={"embedder": embedding},
        )
        embedder = make_embedder(embedding)
        model: ChatModel | None = ProseChatModel() if chat == "prose" else None
        memory = stack.enter_context(Memory(database, settings, embedder=embedder, chat=model))
        cards = CardStore(database, model=embedder.name, dimension=embedder.dimension)
        yield memory, cards


@contextmanager
def _progress(out: Console) -> Iterator[Progress]:
    """A progress bar per phase (recording, asking), on the command's console."""
    with Progress(
        TextColumn("{task.description:<10}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=out,
        transient=False,
    ) as progress:
        yield progress


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _table(report: UpdatesReport) -> Table:
    """Per language and kind, per language, and all: questions and the three shares."""
    chat = "offline, rules only" if report.chat == "none" else "a chat model answering in prose"
    table = Table(
        title=f"Knowledge updates: {report.users} users, {chat}",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    table.add_column("questions")
    for name in ("n", "current in prompt", "current first", "stale present"):
        table.add_column(name, justify="right")
    for row in report.rows:
        table.add_row(
            row.name,
            str(row.questions),
            _share(row.current_in),
            _share(row.current_first),
            _share(row.stale_present),
            style="bold" if row.name == "all" else None,
        )
    return table

"""``stratamem eval locomo``'s run: ingest through the public API, recall at token budgets.

Each conversation is one user (``locomo-<sample_id>``) and each LoCoMo session one session:
its turns are recorded with ``Memory.record`` (the dialog id as the client id, the session's
time as the timestamp, the speaker as the message's name, an image's caption kept in the
text), then ``end_session``; the worker runs until idle, which archives every turn as a
``turn`` card and the rule-extracted cards.

Every question with evidence is then asked as a user would ask it: ``Memory.prepare`` in a
new session, once per token budget (``cards.max_tokens``) and once with ``cards.k`` alone, so
the memories scored are the ones the prompt carries, merged and gated as recall sends them.
Their sources come from the report (``RecalledCard.message_ids``, mapped to dialog ids
through ``Memory.history``). Turn-level baselines (BM25, MiniLM, both fused) are scored on the
same budgets (``memory.eval.equal_budgets``).
"""

from __future__ import annotations

import functools
import json
import pickle
import tempfile
from array import array
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.progress import Progress

from memory.context.parts import MEMORIES_HEADER
from memory.context.tokens import DEFAULT_MODEL, TiktokenCounter
from memory.eval.equal_budgets import (
    BudgetRow,
    BudgetScore,
    TurnBaselines,
    score_budgets,
    summarize_budgets,
    turn_results,
)
from memory.eval.locomo import Conversation, Recalled, Session
from memory.eval.offline import offline_memory
from memory.facade import Memory
from memory.longterm.recalled_memories import memory_tokens
from retrieval import DEFAULT_SEARCH, Embedder, SearchConfig, day_label
from retrieval.turns import captioned
from storage import Card, Database

__all__ = [
    "METHODS",
    "CachedEmbedder",
    "EvalReport",
    "MemoryBackend",
    "evaluate",
    "open_backend",
    "session_messages",
    "user_id_of",
]

#: The methods of the table, in order: the product's prompt, its search's cards as they are
#: (overlapping turn cards not merged), then the turn-level baselines.
METHODS = ("stratamem", "search cards", "BM25 turns", "MiniLM turns", "BM25+MiniLM turns")

#: ``cards.k`` when a token budget decides how much is recalled: more than any budget holds.
_UNBOUNDED_K = 200

#: Cards ``Memory.search`` is asked for (the "search cards" row): more than 2,048 tokens hold.
_SEARCHED = 60


def user_id_of(conversation: Conversation) -> str:
    """The user a conversation is ingested as."""
    return f"locomo-{conversation.sample_id}"


def session_messages(session: Session, *, user_speaker: str | None) -> list[dict[str, Any]]:
    """The messages ``record`` takes for one LoCoMo session.

    The conversation's first speaker is the user and the other the assistant (only the user's
    messages are read by the rule extractor, whose cards speak of "the user"); both keep their
    names, which their turn cards show. An image's caption stays in the text.
    """
    messages: list[dict[str, Any]] = []
    for turn in session.turns:
        text = captioned(turn.text, turn.caption)
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


class CachedEmbedder:
    """An embedder that remembers every vector it made, in a file kept across runs.

    MiniLM embeds about 90 short texts a second on two cores: a run over five conversations
    embeds the same 6,000 texts every time. The cache is keyed by the text and the model.
    """

    def __init__(self, embedder: Embedder, path: Path) -> None:
        """Wrap ``embedder``; load the cache at ``path`` if it exists."""
        self._embedder = embedder
        self._path = path
        self._vectors: dict[str, bytes] = {}
        if path.exists():
            self._vectors = pickle.loads(path.read_bytes())
        self._dirty = False

    @property
    def name(self) -> str:
        """The wrapped model's name."""
        return self._embedder.name

    @property
    def dimension(self) -> int:
        """The wrapped model's dimension."""
        return self._embedder.dimension

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """The texts' vectors, from the cache or the model (new ones cached)."""
        keys = [f"{self.name}\x00{text}" for text in texts]
        missing = [text for text, key in zip(texts, keys, strict=True) if key not in self._vectors]
        if missing:
            unique = list(dict.fromkeys(missing))
            for text, vector in zip(unique, self._embedder.embed(unique), strict=True):
                self._vectors[f"{self.name}\x00{text}"] = array("f", vector).tobytes()
            self._dirty = True
        return [array("f", self._vectors[key]).tolist() for key in keys]

    def save(self) -> None:
        """Write the cache (through a temporary file: a killed run leaves the old one)."""
        if self._dirty:
            scratch = self._path.with_suffix(".tmp")
            scratch.write_bytes(pickle.dumps(self._vectors))
            scratch.replace(self._path)
            self._dirty = False


class MemoryBackend:
    """Ingestion through one ``Memory``, recall through one ``Memory`` per budget."""

    def __init__(self, memory: Memory, recallers: Mapping[int | str, Memory]) -> None:
        """Ingest with ``memory``; recall with ``recallers[budget]`` (``"k"``: k memories)."""
        self._memory = memory
        self._recallers = recallers
        self._asked = 0

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

    def dialog_ids(self, conversation: Conversation) -> dict[int, str]:
        """Each stored message's id -> its dialog id, from the sessions' histories."""
        user_id = user_id_of(conversation)
        return {
            stored.id: stored.client_id
            for session in conversation.sessions
            for stored in self._memory.history(
                user_id=user_id, session_id=f"session_{session.number}"
            )
            if stored.client_id is not None
        }

    def search(self, user_id: str, question: str, k: int) -> list[Recalled]:
        """``Memory.search``'s cards for ``question`` as they are, best first (each card's text
        dated as a memory shows it, its sources the dialog ids it holds)."""
        return [
            Recalled(_dated(hit.card), tuple(hit.card.source_client_ids))
            for hit in self._memory.search(user_id=user_id, query=question, k=k)
        ]

    def recall(
        self, user_id: str, question: str, key: int | str, dialog_ids: Mapping[int, str]
    ) -> list[Recalled]:
        """The memories ``prepare`` puts in the prompt for ``question``, in order.

        Asked in a session of its own (the question is stored there, as any input is), with
        the recall settings of ``key``. Pins would come first; a LoCoMo user has none.
        """
        self._asked += 1
        context = self._recallers[key].prepare(
            user_id=user_id, session_id=f"question-{self._asked}", input=question
        )
        recall = context.report.recall
        if recall is None or not recall.cards:
            return []
        content = str(context.messages[0]["content"])
        lines = content.split("\n")
        if lines[0] != MEMORIES_HEADER or len(lines) - 1 != len(recall.cards):
            raise RuntimeError(f"the prompt's memories do not match the report: {lines[:2]}")
        return [
            Recalled(
                json.loads(line.removeprefix("- ")),
                tuple(dialog_ids[m] for m in card.message_ids if m in dialog_ids),
            )
            for line, card in zip(lines[1:], recall.cards, strict=True)
        ]


def _dated(card: Card) -> str:
    """A card's text as a memory shows it: turn cards carry their day, others get it."""
    if card.type == "turn":
        return card.text
    when = card.occurred_at or card.observed_at
    return f"{day_label(when.date())} {card.text}"


@contextmanager
def open_backend(
    data_dir: Path | None,
    embedder: Embedder,
    budgets: Sequence[int],
    k: int,
    recipe: SearchConfig = DEFAULT_SEARCH,
) -> Iterator[MemoryBackend]:
    """A backend on the embedded database in ``data_dir``, or in a temporary folder.

    Offline whatever the environment says (``memory.eval.offline``): no chat model, the
    background worker mode (run until idle after each conversation) and no debounce. Recall
    and search use ``recipe``.
    """
    with ExitStack() as stack:
        if data_dir is None:
            data_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="stratamem-")))
        database = stack.enter_context(Database.open(None, data_dir=data_dir))

        def memory(**cards: Any) -> Memory:
            return offline_memory(database, data_dir, embedder, recipe=recipe, **cards)

        recallers: dict[int | str, Memory] = {
            budget: memory(k=_UNBOUNDED_K, max_tokens=budget) for budget in budgets
        }
        recallers["k"] = memory(k=k)
        yield MemoryBackend(memory(), recallers)


@dataclass(frozen=True, slots=True)
class EvalReport:
    """What a run measured: per group of conversations, per method, rows per category."""

    k: int
    budgets: tuple[int, ...]
    conversations: int
    turns: int
    groups: dict[str, dict[str, list[BudgetRow]]]
    members: dict[str, list[str]] = field(default_factory=dict)
    malformed: int = 0
    missing: int = 0

    def as_json(self) -> dict[str, Any]:
        """The report as a JSON object."""
        return {
            "k": self.k,
            "budgets": list(self.budgets),
            "conversations": self.conversations,
            "turns": self.turns,
            "evidence_ids_malformed": self.malformed,
            "evidence_ids_missing": self.missing,
            "token_model": DEFAULT_MODEL,
            "groups": {
                group: {
                    "conversations": self.members[group],
                    "methods": {
                        method: {row.name: row.as_json() for row in rows}
                        for method, rows in methods.items()
                    },
                }
                for group, methods in self.groups.items()
            },
        }


def evaluate(
    conversations: Sequence[Conversation],
    backend: MemoryBackend,
    embedder: Embedder,
    *,
    k: int,
    budgets: Sequence[int],
    split: Sequence[str] = (),
    progress: Progress,
) -> EvalReport:
    """Ingest every conversation, then score every question with evidence, every method.

    ``split`` names the conversations the parameters were tuned on: they are reported as one
    group, the others as another, and all of them together.
    """
    count = functools.partial(memory_tokens, TiktokenCounter(DEFAULT_MODEL))
    turns = sum(len(c.turns) for c in conversations)
    ingesting = progress.add_task("ingesting", total=turns)
    for conversation in conversations:
        backend.ingest(conversation)
        progress.advance(ingesting, len(conversation.turns))
    searching = progress.add_task("asking", total=sum(len(c.questions) for c in conversations))
    scores: dict[str, dict[str, list[BudgetScore]]] = {}
    for conversation in conversations:
        user_id = user_id_of(conversation)
        dialog_ids = backend.dialog_ids(conversation)
        results = turn_results(conversation)
        baselines = TurnBaselines(results, embedder.embed([r.text for r in results]))
        vectors = embedder.embed([q.text for q in conversation.questions])
        mine = scores.setdefault(conversation.sample_id, {m: [] for m in METHODS})
        for question, vector in zip(conversation.questions, vectors, strict=True):
            ranked = {
                "BM25 turns": baselines.bm25(question.text),
                "MiniLM turns": baselines.dense(vector),
                "BM25+MiniLM turns": baselines.fused(question.text, vector),
            }
            ranked["search cards"] = backend.search(user_id, question.text, _SEARCHED)
            for method, order in ranked.items():
                by_budget = dict.fromkeys(budgets, order)
                mine[method].append(score_budgets(question, by_budget, order[:k], count))
            asked = {
                budget: backend.recall(user_id, question.text, budget, dialog_ids)
                for budget in budgets
            }
            at_k = backend.recall(user_id, question.text, "k", dialog_ids)
            mine["stratamem"].append(score_budgets(question, asked, at_k, count))
            progress.advance(searching)
    members = _groups([c.sample_id for c in conversations], split)
    return EvalReport(
        k=k,
        budgets=tuple(budgets),
        conversations=len(conversations),
        turns=turns,
        groups={
            group: {
                method: summarize_budgets([s for c in ids for s in scores[c][method]])
                for method in METHODS
            }
            for group, ids in members.items()
        },
        members=members,
        malformed=sum(c.malformed for c in conversations),
        missing=sum(c.missing for c in conversations),
    )


def _groups(samples: Sequence[str], split: Sequence[str]) -> dict[str, list[str]]:
    """All conversations; with a split, also the tuned ones and the held-out ones apart."""
    groups = {"all": list(samples)}
    tuned = [s for s in samples if s in split]
    held = [s for s in samples if s not in split]
    if split and tuned:
        groups["tuned on"] = tuned
    if split and held:
        groups["held out"] = held
    return groups

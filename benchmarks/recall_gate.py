"""What a recall score means: similarities of relevant and irrelevant cards, per embedder.

    python -m benchmarks.recall_gate [--embedder minilm|hashing] [--split conv-26,conv-30,conv-41]

Everything goes through the public API on the embedded Postgres. The LoCoMo development
conversations (only those of ``--split``: the ones the recipe is tuned on) and the
knowledge-update development users are recorded and archived as ``stratamem eval`` does; then
every question is searched (``Memory.search``, 30 cards) and each card found is labelled:

- LoCoMo: *relevant* when it holds an evidence turn of the question; *other* when it does
  not; *elsewhere* for every card found when the question is asked of another
  conversation's user (nothing relevant is stored there: the case a gate exists for).
- knowledge updates: *relevant* when its text holds the current or an earlier value the
  question asks about; *other* when it holds none (chit-chat, the user's other questions,
  the assistant's stock replies).

For each label the table shows the cosine similarity's percentiles, then, for the gate
"cosine >= t, or at least half of the query's terms in the card", the share of each label
that passes: the default per embedder is where relevant cards pass and most others do not.
MiniLM's vectors are cached under /tmp (``--cache``), never in the repository.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from statistics import quantiles
from typing import Any

from memory import Memory, Settings
from memory.cli.eval_locomo import CachedEmbedder, MemoryBackend, user_id_of
from memory.eval.locomo import load_locomo
from retrieval import Embedder, HashingEmbedder, OnnxEmbedder, analyze
from storage import Database

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
THRESHOLDS = (0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4)
SHARE = 0.5


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embedder", choices=("minilm", "hashing"), default="minilm")
    parser.add_argument("--locomo", type=Path, default=DATA / "locomo-dev.json")
    parser.add_argument("--updates", type=Path, default=DATA / "knowledge-update-dev.json")
    parser.add_argument("--split", default="conv-26,conv-30,conv-41")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/stratamem-eval-embeddings.pkl"))
    args = parser.parse_args(argv)
    if not args.locomo.exists() or not args.updates.exists():
        print(f"skipped: no data in {args.locomo.parent} (see shared/data/README.md)")
        return 0
    base: Embedder = OnnxEmbedder() if args.embedder == "minilm" else HashingEmbedder()
    embedder = CachedEmbedder(base, args.cache) if args.embedder == "minilm" else base
    labelled: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="stratamem-gate-") as folder:
        database = Database.open(None, data_dir=Path(folder))
        try:
            memory = Memory(database, _settings(Path(folder)), embedder=embedder)
            _locomo(memory, args.locomo, set(args.split.split(",")), labelled)
            _updates(memory, args.updates, labelled)
        finally:
            if isinstance(embedder, CachedEmbedder):
                embedder.save()
            database.close()
    _print(args.embedder, labelled)
    return 0


def _settings(folder: Path) -> Settings:
    return Settings(
        data_dir=folder,
        llm_base_url=None,
        llm_api_key=None,
        summary={"mode": "background", "debounce_seconds": 0},
    )


def _found(memory: Memory, user_id: str, query: str) -> list[tuple[Any, float, float]]:
    """The cards found for ``query``: card, cosine, share of the query's terms it holds."""
    wanted = set(analyze(query))
    return [
        (hit.card, hit.similarity, len(wanted & set(analyze(hit.card.text))) / len(wanted))
        for hit in memory.search(user_id=user_id, query=query, k=30)
        if wanted
    ]


def _locomo(memory: Memory, path: Path, split: set[str], out: dict[str, list[Any]]) -> None:
    conversations = [c for c in load_locomo(path) if c.sample_id in split]
    backend = MemoryBackend(memory, {})
    for conversation in conversations:
        backend.ingest(conversation)
    for index, conversation in enumerate(conversations):
        other = conversations[(index + 1) % len(conversations)]
        for question in conversation.questions:
            for card, cosine, share in _found(memory, user_id_of(conversation), question.text):
                held = set(card.source_client_ids) & set(question.evidence)
                out.setdefault("LoCoMo relevant" if held else "LoCoMo other", []).append(
                    (cosine, share)
                )
            for _, cosine, share in _found(memory, user_id_of(other), question.text):
                out.setdefault("LoCoMo elsewhere", []).append((cosine, share))


def _updates(memory: Memory, path: Path, out: dict[str, list[Any]]) -> None:
    users = json.loads(path.read_text(encoding="utf-8"))
    for user in users:
        for session in user["sessions"]:
            start = datetime.fromisoformat(session["date"]).replace(tzinfo=UTC)
            messages = [
                {**message, "timestamp": start + timedelta(minutes=minute)}
                for minute, message in enumerate(session["messages"])
            ]
            memory.record(user_id=user["user"], session_id=session["id"], messages=messages)
            memory.end_session(user_id=user["user"], session_id=session["id"])
    memory.run_worker(until_idle=True)
    for user in users:
        for question in user["questions"]:
            values = [question["current"], *question.get("stale", [])]
            for card, cosine, share in _found(memory, user["user"], question["q"]):
                relevant = any(value in card.text for value in values)
                label = f"updates ({question['lang']}) {'relevant' if relevant else 'other'}"
                out.setdefault(label, []).append((cosine, share))


def _print(embedder: str, labelled: dict[str, list[tuple[float, float]]]) -> None:
    print(f"embedder {embedder}: cosine percentiles of the cards found (30 per question)")
    print(f"{'cards':<26} {'n':>6} " + " ".join(f"{f'p{p}':>5}" for p in (5, 10, 25, 50, 75, 90)))
    for label, values in sorted(labelled.items()):
        cuts = quantiles([cosine for cosine, _ in values], n=20, method="inclusive")
        picked = [cuts[0], cuts[1], cuts[4], cuts[9], cuts[14], cuts[17]]
        print(f"{label:<26} {len(values):>6} " + " ".join(f"{c:5.2f}" for c in picked))
    print(f"\nshare passing the gate: cosine >= t, or >= {SHARE:.0%} of the query's terms")
    print(f"{'cards':<26} " + " ".join(f"{f't={t:.2f}':>7}" for t in THRESHOLDS))
    for label, values in sorted(labelled.items()):
        passing = [
            sum(1 for cosine, share in values if cosine >= t or share >= SHARE) / len(values)
            for t in THRESHOLDS
        ]
        print(f"{label:<26} " + " ".join(f"{p:7.3f}" for p in passing))


if __name__ == "__main__":
    sys.exit(main())

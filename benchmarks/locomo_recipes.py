"""LoCoMo recall and answer in text at one token budget, for named search recipes and variants.

    python -m benchmarks.locomo_recipes [--split conv-26,conv-30,conv-41] [--budget 1024]
        [--data-dir /tmp/locomo-db] [--recipe NAME] [--set '{"close_cut_from": 10}'] ...

What ``stratamem eval locomo`` measures for ``stratamem`` at one budget, made quick enough to
compare recipes: only the conversations of ``--split`` (the ones recipes are tuned on), one
budget, no baselines, and the ingested database kept in ``--data-dir`` across runs (a second
run only asks). Each ``--set`` is one variant: ``SearchConfig`` fields as JSON, applied to
``--recipe`` (``retrieval.RECIPES``; the default recipe by default) on recall's index
(``memory.eval.offline``, as ``stratamem eval locomo --recipe`` builds it). Every
question is asked through ``Memory.prepare`` in a new session, as the command asks it; rows:
evidence recall per category, answer in text (``memory.eval.answers``) and the lines sent.
MiniLM's vectors are cached under /tmp (``--cache``), never in the repository.
"""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Sequence
from pathlib import Path
from statistics import fmean
from typing import Any

from memory.cli.eval_locomo import CachedEmbedder, MemoryBackend, user_id_of
from memory.context.tokens import DEFAULT_MODEL, TiktokenCounter
from memory.eval.answers import answer_in_text, checkable_answer
from memory.eval.equal_budgets import take_budget
from memory.eval.locomo import CATEGORIES, load_locomo
from memory.eval.offline import offline_memory
from memory.longterm.recalled_memories import memory_tokens
from retrieval import DEFAULT_SEARCH, RECIPES, OnnxEmbedder
from storage import Database

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--locomo", type=Path, default=DATA / "locomo-dev.json")
    parser.add_argument("--split", default="conv-26,conv-30,conv-41")
    parser.add_argument("--budget", type=int, default=1024)
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/stratamem-locomo-recipes"))
    parser.add_argument("--cache", type=Path, default=Path("/tmp/stratamem-eval-embeddings.pkl"))
    parser.add_argument("--recipe", choices=sorted(RECIPES), default=DEFAULT_SEARCH.name)
    parser.add_argument("--set", action="append", default=[], dest="variants")
    args = parser.parse_args(argv)
    if not args.locomo.exists():
        print(f"skipped: no data in {args.locomo.parent} (see shared/data/README.md)")
        return 0
    split = args.split.split(",")
    conversations = [c for c in load_locomo(args.locomo) if c.sample_id in split]
    embedder = CachedEmbedder(OnnxEmbedder(), args.cache)
    count = functools.partial(memory_tokens, TiktokenCounter(DEFAULT_MODEL))
    # The database is the split's: another split must not find this one's users half there.
    data_dir = args.data_dir / "-".join(sorted(split))
    ingested = data_dir.exists()
    data_dir.mkdir(parents=True, exist_ok=True)
    with Database.open(None, data_dir=data_dir) as database:
        ingester = offline_memory(database, data_dir, embedder)
        if not ingested:
            backend = MemoryBackend(ingester, {})
            for conversation in conversations:
                backend.ingest(conversation)
            embedder.save()
        for variant in args.variants or ["{}"]:
            recipe = RECIPES[args.recipe].model_copy(update=json.loads(variant))
            recaller = offline_memory(
                database, data_dir, embedder, recipe=recipe, k=200, max_tokens=args.budget
            )
            backend = MemoryBackend(ingester, {args.budget: recaller})
            rows = [
                _asked(backend, conversation, question, args.budget, count)
                for conversation in conversations
                for question in conversation.questions
            ]
            _print(f"{recipe.name} {variant}", rows)
        embedder.save()
    return 0


def _asked(
    backend: MemoryBackend, conversation: Any, question: Any, budget: int, count: Any
) -> dict[str, Any]:
    dialog_ids = backend.dialog_ids(conversation)
    recalled = backend.recall(user_id_of(conversation), question.text, budget, dialog_ids)
    taken = take_budget(recalled, budget, count)
    evidence = set(question.evidence)
    found = sum(1 for e in evidence if any(e in r.sources for r in taken))
    answer = checkable_answer(question.answer)
    return {
        "category": question.category,
        "recall": found / len(evidence),
        "answered": None if answer is None else answer_in_text(answer, (r.text for r in taken)),
        "lines": sum(r.text.count("\n") + 1 for r in taken),
    }


def _print(label: str, rows: list[dict[str, Any]]) -> None:
    answered = [row["answered"] for row in rows if row["answered"] is not None]
    by_category = " ".join(
        f"{name} {fmean(r['recall'] for r in rows if r['category'] == category):.3f}"
        for category, name in CATEGORIES.items()
        if any(r["category"] == category for r in rows)
    )
    print(
        f"{label}: recall {fmean(r['recall'] for r in rows):.3f} ({by_category}); "
        f"answer in text {fmean(answered):.3f} ({sum(answered)} of {len(answered)}); "
        f"lines {fmean(r['lines'] for r in rows):.1f}",
        flush=True,
    )


if __name__ == "__main__":
    raise SystemExit(main())

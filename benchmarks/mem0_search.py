"""mem0's ``search`` latency, run in mem0's own virtual environment by ``benchmarks.prepare``.

    /tmp/stratamem-mem0/bin/python benchmarks/mem0_search.py --url URL --model PATH \
        --work FILE

mem0 (2.2.1) cannot be installed beside stratamem (its pins differ), so ``benchmarks/prepare.py``
makes a virtual environment for it (``--mem0-venv``) and runs this script there; it imports
nothing of stratamem. Offline, as stratamem runs: MiniLM through mem0's ``huggingface`` embedder
pointed at the packaged model's folder (``SentenceTransformer.encode``), its ``pgvector`` store
on the same embedded Postgres (an HNSW index, mem0's default), no LLM: every message is added
with ``infer=False`` (stored as it is, one memory per message). ``--work`` is a JSON file:
``{"sizes": {"100": [messages], ...}, "queries": [...], "turns": N}``. For each size, a user of
its own gets those messages (once: a collection already holding them is reused), then ``turns``
searches (``top_k`` 4, as stratamem's ``k``) are timed after 5 warm-up ones. Prints one JSON
line per size: ``{"size", "memories", "add_s", "p50", "p95"}`` (milliseconds).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def percentile(values: list[float], share: float) -> float:
    """The value below which ``share`` of ``values`` lie."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def open_memory(url: str, model: str, size: int, history: str) -> Any:
    """A mem0 ``Memory`` with its own pgvector collection for ``size``."""
    from mem0 import Memory

    return Memory.from_config(
        {
            "vector_store": {
                "provider": "pgvector",
                "config": {
                    "connection_string": url,
                    "collection_name": f"bench_mem0_{size}",
                    "embedding_model_dims": 384,
                },
            },
            "embedder": {
                "provider": "huggingface",
                "config": {"model": model, "embedding_dims": 384},
            },
            # Never called: every add is infer=False and search takes no LLM.
            "llm": {"provider": "openai", "config": {"model": "gpt-4o-mini", "api_key": "unused"}},
            "history_db_path": history,
        }
    )


def stored(memory: Any, user_id: str) -> int:
    """How many memories ``user_id`` has (mem0's ``get_all`` caps its answer, so count in SQL)."""
    store = memory.vector_store
    if store.collection_name not in store.list_cols():  # made by the first add
        return 0
    with store._get_cursor() as cursor:
        cursor.execute(
            f"SELECT count(*) FROM {store.collection_name} WHERE payload->>'user_id' = %s",
            (user_id,),
        )
        return int(cursor.fetchone()[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="libpq URL of the Postgres server")
    parser.add_argument("--model", required=True, help="the MiniLM model folder")
    parser.add_argument("--work", required=True, help="the JSON file of sizes and queries")
    args = parser.parse_args()
    os.environ.setdefault("MEM0_TELEMETRY", "False")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    work = json.loads(Path(args.work).read_text())
    queries: list[str] = work["queries"]
    turns: int = work["turns"]
    with tempfile.TemporaryDirectory() as folder:
        for size_text, messages in work["sizes"].items():
            size = int(size_text)
            user_id = f"bench-{size}"
            memory = open_memory(args.url, args.model, size, os.path.join(folder, "h.db"))
            started = time.perf_counter()
            if stored(memory, user_id) != size:
                memory.delete_all(user_id=user_id)
                # mem0 embeds each added message alone; on a busy machine torch's two threads
                # spin at every layer (seconds per message), one does not. Searches are timed
                # with torch's own thread count, as mem0 runs.
                threads = torch.get_num_threads()
                torch.set_num_threads(1)
                for start in range(0, len(messages), 100):
                    memory.add(messages[start : start + 100], user_id=user_id, infer=False)
                torch.set_num_threads(threads)
            added = time.perf_counter() - started
            filters = {"user_id": user_id}
            for query in queries[:5]:
                memory.search(query, filters=filters, top_k=4)
            timings = []
            for turn in range(turns):
                query = queries[turn % len(queries)]
                begun = time.perf_counter()
                memory.search(query, filters=filters, top_k=4)
                timings.append((time.perf_counter() - begun) * 1000)
            line = {
                "size": size,
                "memories": stored(memory, user_id),
                "add_s": round(added, 1),
                "p50": statistics.median(timings),
                "p95": percentile(timings, 0.95),
            }
            print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What the recent-message cache really holds, against what it counts (``RecentMessages``).

    python -m benchmarks.recent_memory [--sessions 400] [--max-mb 64]

Stores ``--sessions`` sessions of a realistic mix (short and long user and assistant texts,
Chinese text, tool calls with JSON arguments and their results, metadata and client ids, now
and then an image as a data URL) on an embedded Postgres in a temporary folder, then loads
each session's window into one cache whose bound is ``--max-mb``. Python's allocations are
traced (tracemalloc) the whole time; what the cache holds is what dropping it frees: traced
memory with the windows cached, minus traced memory after every window was forgotten and the
garbage collected. Printed: that, what the cache counted (``cached_bytes``), their ratio, and
the held memory against the bound; and, from a first fill without tracing, how much the
process's resident memory grew (what is held, plus what the allocator keeps of what was freed
while windows were built and forgotten).
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any

from memory.context.tokens import TiktokenCounter
from memory.session.recent import RecentMessages
from storage import Database, MessageStore, NewMessage

_WORDS = (
    "deploy", "checkout", "latency", "retry", "timeout", "region", "cache", "invoice", "export",
    "report", "query", "index", "customer", "ticket", "rollout", "canary", "threshold",
    "metric", "alert", "dashboard", "service", "database",
)  # fmt: skip
_CHINESE = "我们明天上午十点在会议室讨论新版本的发布计划请提前准备好测试报告和回滚方案"


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words)).capitalize() + "."


def session_messages(
    rng: random.Random, turns: int, image_share: float = 0.03
) -> list[dict[str, Any]]:
    """One session's messages, OpenAI-format dicts with client ids and metadata; a user message
    is an image with a caption at ``image_share``."""
    messages: list[dict[str, Any]] = []
    for index in range(turns):
        kind = rng.random()
        if kind < 0.1:
            content: Any = _CHINESE[: rng.randint(10, len(_CHINESE))]
        elif kind < 0.1 + image_share:
            url = "data:image/png;base64," + "iVBORw0KGgo" * rng.randint(2_000, 9_000)
            content = [
                {"type": "text", "text": _text(rng, 8)},
                {"type": "image_url", "image_url": {"url": url}},
            ]
        else:
            content = _text(rng, rng.randint(4, 60))
        messages.append(
            {"role": "user", "content": content, "id": f"u{index}", "metadata": {"turn": index}}
        )
        if rng.random() < 0.35:
            calls = [
                {
                    "id": f"call_{index}_{n}",
                    "type": "function",
                    "function": {
                        "name": rng.choice(("search_logs", "get_deploy", "run_query")),
                        "arguments": f'{{"query": "{_text(rng, 6)}", "limit": {n + 10}}}',
                    },
                }
                for n in range(rng.choice((1, 1, 2, 3)))
            ]
            messages.append({"role": "assistant", "content": None, "tool_calls": calls})
            messages += [
                {
                    "role": "tool",
                    "tool_call_id": call["id"],
                    "content": '{"rows": ['
                    + ", ".join(f'"{_text(rng, 5)}"' for _ in range(rng.randint(3, 80)))
                    + "]}",
                }
                for call in calls
            ]
        messages.append(
            {"role": "assistant", "content": _text(rng, rng.randint(20, 250)), "id": f"a{index}"}
        )
    return messages


def stored(message: dict[str, Any], counter: TiktokenCounter) -> NewMessage:
    """A message as ``record`` would store it (its client id and metadata beside it)."""
    payload = {k: v for k, v in message.items() if k not in ("id", "metadata")}
    tokens = counter.count_text(str(payload.get("content") or "")) + 10
    return NewMessage(
        payload=payload,
        role=payload["role"],
        tokens=tokens,
        client_id=message.get("id"),
        metadata=message.get("metadata", {}),
    )


def fill(
    store: MessageStore,
    counter: TiktokenCounter,
    sessions: int,
    *,
    image_share: float = 0.03,
    seed: int = 5,
) -> None:
    """Store the sessions of user ``bench``: ``s0`` ... in random sizes."""
    rng = random.Random(seed)
    for index in range(sessions):
        messages = session_messages(rng, rng.randint(5, 40), image_share)
        store.append("bench", f"s{index}", [stored(m, counter) for m in messages])


def measure(
    store: MessageStore, counter: TiktokenCounter, sessions: int, max_bytes: int
) -> tuple[int, int]:
    """Load every session's window into a new cache: (bytes it holds, bytes it counted).

    Call with tracemalloc tracing, started before anything of the cache was allocated.
    """
    recent = RecentMessages(store, counter, max_bytes=max_bytes)
    for index in range(sessions):
        recent.load_with_summary("bench", f"s{index}", budget=100_000)
    gc.collect()
    with_cache = tracemalloc.get_traced_memory()[0]
    counted = recent.cached_bytes
    recent.forget("bench")
    gc.collect()
    return with_cache - tracemalloc.get_traced_memory()[0], counted


def resident_growth(
    store: MessageStore, counter: TiktokenCounter, sessions: int, max_bytes: int
) -> int:
    """How much this process's resident memory grew while a new cache filled (Linux; 0
    elsewhere): what is held, and what the allocator keeps of what was freed meanwhile."""
    statm = Path("/proc/self/statm")
    if not statm.exists():
        return 0

    def resident() -> int:
        return int(statm.read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    gc.collect()
    before = resident()
    recent = RecentMessages(store, counter, max_bytes=max_bytes)
    for index in range(sessions):
        recent.load_with_summary("bench", f"s{index}", budget=100_000)
    gc.collect()
    grown = resident() - before
    recent.forget("bench")
    return grown


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=400)
    parser.add_argument("--max-mb", type=float, default=64.0)
    parser.add_argument("--image-share", type=float, default=0.03)
    args = parser.parse_args()
    counter = TiktokenCounter()
    bound = int(args.max_mb * 1_000_000)
    with (
        tempfile.TemporaryDirectory(prefix="stratamem-recent-") as folder,
        Database.open(None, data_dir=Path(folder)) as database,
    ):
        store = MessageStore(database)
        fill(store, counter, args.sessions, image_share=args.image_share)
        resident_growth(store, counter, 3, bound)  # warm the counter's and driver's caches
        grown = resident_growth(store, counter, args.sessions, bound)
        tracemalloc.start()
        held, counted = measure(store, counter, args.sessions, bound)
        tracemalloc.stop()
    print(
        f"{args.sessions} sessions ({args.image_share:.0%} images), bound "
        f"{bound / 1e6:.1f} MB: the cache counted {counted / 1e6:.2f} MB and held "
        f"{held / 1e6:.2f} MB ({held / counted:.2f}x its count, {held / bound:.2f}x the "
        f"bound); untraced, the process's resident memory grew {grown / 1e6:.1f} MB while "
        "it filled"
    )


if __name__ == "__main__":
    main()

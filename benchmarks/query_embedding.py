"""MiniLM's speed and vectors on each runtime: torch (the reference), ONNX Runtime, int8.

    python -m benchmarks.query_embedding [--runs 200] [--batches 5]

In one process, alternating call by call so every runtime sees the same machine: one short
query at a time (p50/p95 ms), a batch of 64 turn-sized texts (s per batch), each runtime's
largest Euclidean distance to torch's vectors and its smallest cosine to the fp32 ONNX file's
over English, Chinese and past-the-window texts. Runtimes: torch through the model's modules
(``SentenceTransformerEmbedder``), the same through ``SentenceTransformer.encode``, the exported
ONNX file (``OnnxEmbedder``) with ONNX Runtime's own thread count (sleeping between operators,
the default), spinning, and with 1 and 2 threads, and ``cards.embedder = "minilm-int8"``
(``OnnxEmbedder(int8=True)``: the file quantized by ``retrieval.onnx_int8``, own threads).
Beside them, the same export before ``retrieval.onnx_export`` fuses it (eager attention, not
fused), and its int8 quantization ("unfused": built in a temporary folder, own threads): the
fusion's gain.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from benchmarks.machine import CpuSteal, machine_state
from retrieval import OnnxEmbedder, SentenceTransformerEmbedder, onnx_export, onnx_int8
from retrieval.onnx_export import vector_distance
from retrieval.onnx_minilm import OnnxSession
from retrieval.sentence_transformer import load_model, packaged_model_path

QUERIES = [
    "Which city did I say I was moving to?",
    "What is my daughter's name?",
    "When is the report due?",
    "我现在住在哪里？",  # noqa: RUF001
]
PROBES = [
    *QUERIES,
    "我搬到柏林了，我的狗叫小白。下个月五号交报告。",  # noqa: RUF001
    "The deploy of the checkout service changed the retry policy and timeouts. " * 30,
]


def turn_texts(count: int) -> list[str]:
    """Turn-card-sized texts (a message with its neighbours, 60-120 words)."""
    return [
        f"[2025-03-{1 + i % 28:02d}] user: deploy {i} of checkout changed the retry policy; "
        + "assistant: the timeouts moved from 3 to 5 seconds and the circuit breaker opened. "
        * (2 + i % 3)
        for i in range(count)
    ]


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """The cosine of two unit vectors."""
    return sum(x * y for x, y in zip(a, b, strict=True))


def percentile(values: list[float], share: float) -> float:
    """The value below which ``share`` of ``values`` lie."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def unfused(folder: Path) -> dict[str, Callable[[Sequence[str]], list[list[float]]]]:
    """The export before its fusion, fp32 and int8, built in ``folder``."""
    model = packaged_model_path()
    fp32, int8 = folder / "unfused.onnx", folder / "unfused-int8.onnx"
    onnx_export._export(model, fp32)
    onnx_int8._quantize(fp32, int8)
    sessions = {
        name: OnnxSession(path, model, threads=None)
        for name, path in (("onnx unfused", fp32), ("int8 unfused", int8))
    }
    return {
        name: lambda texts, session=session: session.embed(texts, batch_size=64)
        for name, session in sessions.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="single queries per runtime")
    parser.add_argument("--batches", type=int, default=5, help="batches of 64 per runtime")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        measure(args, unfused(Path(folder)))


def measure(
    args: argparse.Namespace, before_fusion: dict[str, Callable[[Sequence[str]], list[list[float]]]]
) -> None:
    """Time every runtime, alternating call by call, and print the table."""
    torch_modules = SentenceTransformerEmbedder()
    model = load_model(packaged_model_path())
    onnx = OnnxEmbedder()
    runtimes: dict[str, Callable[[Sequence[str]], list[list[float]]]] = {
        "torch (modules)": torch_modules.embed,
        "torch encode()": lambda texts: model.encode(
            list(texts), normalize_embeddings=True
        ).tolist(),
        "onnx (own threads)": onnx.embed,
        "onnx spinning": OnnxEmbedder(spinning=True).embed,
        "onnx 1 thread": OnnxEmbedder(threads=1).embed,
        "onnx 2 threads": OnnxEmbedder(threads=2).embed,
        "minilm-int8": OnnxEmbedder(int8=True).embed,
        **before_fusion,
    }
    reference = torch_modules.embed(PROBES)
    fp32 = onnx.embed(PROBES)
    distances = {
        name: max(map(vector_distance, embed(PROBES), reference))
        for name, embed in runtimes.items()
    }
    cosines = {name: min(map(cosine, embed(PROBES), fp32)) for name, embed in runtimes.items()}
    for embed in runtimes.values():  # warm up
        for query in QUERIES:
            embed([query])
    print(f"before: {machine_state()}")
    steal = CpuSteal()
    single: dict[str, list[float]] = {name: [] for name in runtimes}
    for run in range(args.runs):
        for name, embed in runtimes.items():
            started = time.perf_counter()
            embed([QUERIES[run % len(QUERIES)]])
            single[name].append((time.perf_counter() - started) * 1000)
    batch: dict[str, list[float]] = {name: [] for name in runtimes}
    texts = turn_texts(64)
    for _ in range(args.batches):
        for name, embed in runtimes.items():
            started = time.perf_counter()
            embed(texts)
            batch[name].append(time.perf_counter() - started)
    print(f"after: {machine_state(steal)}")
    print(
        f"{'runtime':<20} {'query p50':>10} {'p95 ms':>8} {'batch 64 s':>11} {'vs torch':>9}"
        f" {'cos fp32':>9}"
    )
    for name in runtimes:
        print(
            f"{name:<20} {statistics.median(single[name]):>10.2f}"
            f" {percentile(single[name], 0.95):>8.2f} {statistics.median(batch[name]):>11.3f}"
            f" {distances[name]:>9.1e} {cosines[name]:>9.4f}"
        )
    print("vs torch: the largest Euclidean distance to torch's unit vectors over the probes")
    print("cos fp32: the smallest cosine to the fp32 ONNX file's vectors over the probes")


if __name__ == "__main__":
    main()

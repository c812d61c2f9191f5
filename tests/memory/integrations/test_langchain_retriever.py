"""``StratamemRetriever`` passes LangChain's own standard tests (``RetrieversIntegrationTests``
from ``langchain-tests``), and returns the user's cards with their metadata, no one else's, and
nothing once the user is forgotten. On the real embedded Postgres."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any, ClassVar

import pytest
from databases import own_database
from langchain_core.retrievers import BaseRetriever
from langchain_tests.integration_tests import RetrieversIntegrationTests

from memory import Memory, Settings
from memory.integrations.langchain import StratamemRetriever
from retrieval import MINILM_NAME, HashingEmbedder
from storage import Database, InvalidInputError

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "langchain_retriever.py"
FACTS = [
    "We use Postgres 16 for the billing database.",
    "The staging database runs Postgres 15 on Tuesdays.",
    "Our analytics database is ClickHouse.",
    "The database backups run nightly at 02:00.",
    "I prefer green tea in the morning.",
]


def remembering(database: Database, user_id: str) -> Memory:
    """A memory holding ``FACTS`` as the user's cards (pins: stored as given, no extraction)."""
    memory = Memory(
        database, Settings(summary={"mode": "inline"}), embedder=HashingEmbedder(name=MINILM_NAME)
    )
    for fact in FACTS:
        memory.pin(user_id=user_id, text=fact)
    return memory


class TestStratamemRetrieverStandard(RetrieversIntegrationTests):
    """LangChain's standard retriever tests, unchanged."""

    params: ClassVar[dict[str, Any]] = {}

    @pytest.fixture(autouse=True)
    def _memories(self, database: Database, user_id: str) -> None:
        type(self).params = {"memory": remembering(database, user_id), "user_id": user_id}

    @property
    def retriever_constructor(self) -> type[BaseRetriever]:
        return StratamemRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return self.params

    @property
    def retriever_query_example(self) -> str:
        return "Which database do we use?"


def test_documents_carry_the_card_and_only_the_users(database: Database, user_id: str) -> None:
    memory = remembering(database, user_id)
    remembering(database, f"other-{uuid.uuid4()}")
    retriever = StratamemRetriever(memory=memory, user_id=user_id, k=2)

    documents = retriever.invoke("billing database Postgres")

    assert documents[0].page_content == FACTS[0]
    assert documents[0].id == str(documents[0].metadata["card_id"])
    card = memory.card(user_id=user_id, card_id=documents[0].metadata["card_id"])
    assert card.text == FACTS[0] and documents[0].metadata["pinned"] is True
    assert documents[0].metadata["valid_to"] is None and 0 < documents[0].metadata["score"] <= 1
    assert len(documents) == 2
    assert len(retriever.invoke("database", k=5)) == 5  # FACTS are this user's only cards

    memory.forget(user_id=user_id)
    assert retriever.invoke("billing database Postgres") == []


def test_an_unknown_or_unusable_argument_is_a_clear_error(database: Database, user_id: str) -> None:
    retriever = StratamemRetriever(memory=remembering(database, user_id), user_id=user_id)

    with pytest.raises(TypeError, match="no argument 'top_k'"):
        retriever.invoke("database", top_k=3)
    with pytest.raises(InvalidInputError, match="k must be"):
        retriever.invoke("database", k=-1)


@pytest.mark.slow
def test_the_example_runs_offline(database: Database) -> None:
    user = f"example-{uuid.uuid4()}"
    with own_database(database, "lcexample") as own:
        environment = {
            name: value
            for name, value in os.environ.items()
            if not name.startswith(("STRATAMEM_", "OPENAI_"))
        }
        environment |= {"STRATAMEM_DATABASE_URL": own.url, "STRATAMEM_CARDS__EMBEDDER": "hashing"}
        done = subprocess.run(
            [sys.executable, str(EXAMPLE), "--user", user, "--forget", "billing database?"],
            capture_output=True,
            text=True,
            env=environment,
            cwd=REPO,
            timeout=300,
            check=False,
        )

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("system: Answer from these memories")
    assert "Postgres 16 for the billing database" in lines[1]
    assert "human: billing database?" in lines
    assert lines[-1].startswith("Forgot 4 messages")

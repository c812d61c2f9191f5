"""A real LangGraph agent (``examples/langgraph_store.py``'s graph, a scripted chat model) writes
memories through ``StratamemStore`` with a tool and reads them back in a new thread; forgetting
the user leaves it nothing to recall. And the example itself runs as a script."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from databases import own_database
from langchain_core.messages import AIMessage
from sqlalchemy import text

from memory import Memory, Settings
from memory.integrations.langgraph import StratamemStore
from retrieval import MINILM_NAME, HashingEmbedder
from storage import Database

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "langgraph_store.py"


@pytest.fixture(scope="module")
def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("langgraph_store_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the model's annotations there
    spec.loader.exec_module(module)
    return module


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "args": arguments, "id": f"call-{uuid.uuid4().hex[:8]}"}


def test_an_agent_remembers_across_threads_through_the_store(
    example: ModuleType, database: Database, user_id: str
) -> None:
    memory = Memory(
        database, Settings(summary={"mode": "inline"}), embedder=HashingEmbedder(name=MINILM_NAME)
    )
    model = example.ScriptedModel(
        replies=[
            AIMessage(
                "",
                tool_calls=[
                    call("remember", text="The user is allergic to peanuts."),
                    call("remember", text="The user plays the cello."),
                ],
            ),
            AIMessage("Noted both."),
            AIMessage("No peanuts, then."),
            AIMessage("I know nothing about you."),
        ],
        prompts=[],
    )
    agent = example.build_agent(model, StratamemStore(memory, user_position=1))

    def ask(thread: str, said: str) -> None:
        config = {"configurable": {"user_id": user_id, "thread_id": thread}}
        agent.invoke({"messages": [{"role": "user", "content": said}]}, config)

    ask("one", "I am allergic to peanuts and I play the cello.")
    with database.engine.connect() as connection:
        stored = connection.scalar(
            text("SELECT count(*) FROM store_items WHERE user_id = :u"), {"u": user_id}
        )
    assert stored == 2

    ask("two", "Can I eat this satay with peanut sauce?")
    recalled = str(model.prompts[2][1].content)  # the new thread's prompt, after its user turn
    assert recalled.splitlines()[1] == "- The user is allergic to peanuts."
    assert "cello" in recalled

    memory.forget(user_id=user_id)
    ask("three", "What do you know about me?")
    assert model.prompts[3][1].content == "You remember nothing."


@pytest.mark.slow
def test_the_example_runs_offline(database: Database) -> None:
    user = f"example-{uuid.uuid4()}"
    with own_database(database, "lgexample") as own:
        environment = {
            name: value
            for name, value in os.environ.items()
            if not name.startswith(("STRATAMEM_", "OPENAI_"))
        }
        environment |= {"STRATAMEM_DATABASE_URL": own.url, "STRATAMEM_CARDS__EMBEDDER": "hashing"}
        done = subprocess.run(
            [sys.executable, str(EXAMPLE), "--user", user, "--forget"],
            capture_output=True,
            text=True,
            env=environment,
            cwd=REPO,
            timeout=300,
            check=False,
        )

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "[second thread] What you remember about the user:" in lines
    assert "- The user lives in Lisbon." in lines
    assert lines[-1].endswith("1 store item.")

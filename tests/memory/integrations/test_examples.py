"""The integration examples in ``examples/`` run as written, each as its own process, on a
database of its own (the model-free embedder, so no model loads)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from databases import own_database

from memory import Memory, Settings
from storage import Database

REPO = Path(__file__).resolve().parents[3]


def run_example(name: str, database_url: str, *arguments: str) -> str:
    env = {key: value for key, value in os.environ.items() if not key.startswith("STRATAMEM_")}
    env |= {
        "PYTHONPATH": str(REPO),
        "STRATAMEM_DATABASE_URL": database_url,
        "STRATAMEM_CARDS__EMBEDDER": "hashing",
        "OPENAI_AGENTS_DISABLE_TRACING": "1",
    }
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / name), *arguments],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.slow
def test_the_agents_sdk_example_stores_the_run_and_sends_the_pin(
    database: Database, user_id: str
) -> None:
    with own_database(database, "agents_example") as own:
        said = run_example("openai_agents_session.py", own.url, "--user", user_id).splitlines()
        memory = Memory(own, Settings(cards={"embedder": "hashing"}))
        stored = memory.history(user_id=user_id, session_id="orders")

    assert said[0] == "Order A7 shipped yesterday and arrives Friday at the office."
    report = json.loads(said[1].removeprefix("sent: "))
    assert report["recall"]["cards"][0]["pinned"] is True
    assert said[2] == "items: ['message', 'function_call', 'function_call_output', 'message']"
    roles = [message.payload["role"] for message in stored]
    assert roles == ["user", "assistant", "tool", "assistant"]


@pytest.mark.slow
def test_the_mcp_example_finds_what_it_remembered(database: Database, user_id: str) -> None:
    with own_database(database, "mcp_example") as own:
        said = run_example("mcp_memory.py", own.url, "--user", user_id).splitlines()
        memory = Memory(own, Settings(cards={"embedder": "hashing"}))
        left = memory.search(user_id=user_id, query="cat")

    assert said[0] == "tools: remember, search, pin, unpin, list_pins, forget_memory"
    assert said[2] == "found: The user's cat is called Miso."
    assert left == []  # the example forgot it again


@pytest.mark.slow
def test_the_pydantic_ai_example_remembers_the_first_run(database: Database, user_id: str) -> None:
    with own_database(database, "pydantic_ai_example") as own:
        said = run_example("pydantic_ai_history.py", own.url, "--user", user_id).splitlines()

    assert said[0] == 'first run: {"track":"order a: shipped yesterday"}'
    assert said[1] == "second run was sent: 5 messages"  # the first run, then the new prompt
    assert said[2].startswith("memories sent: ") and said[2] != "memories sent: 0 tokens"
    roles = ["user", "assistant", "tool", "assistant", "user", "assistant"]
    assert said[3] == f"stored: {roles}"

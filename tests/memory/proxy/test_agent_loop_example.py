"""``examples/agent_loop.py`` runs offline against the fake upstream and stores the whole loop."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from proxy_harness import *  # noqa: F403 - the fixtures
from upstream_fake import Calls, FakeUpstream, Text

from memory import Memory

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_the_agent_loop_example_runs_a_parallel_tool_call_and_stores_it(
    upstream: tuple[FakeUpstream, str], database_url: str, user_id: str
) -> None:
    fake, url = upstream
    calls = (("c1", "get_weather", '{"city": "Paris"}'), ("c2", "get_weather", '{"city": "Oslo"}'))
    fake.script(Calls(calls), Text("Paris is warmer: 21°C against 9°C."))
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "OPENAI_BASE_URL": url,
        "OPENAI_API_KEY": "sk-fake",
        "STRATAMEM_DATABASE_URL": database_url,
        "STRATAMEM_CARDS__ENABLED": "false",
    }

    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "agent_loop.py"), "--user", user_id],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "Paris is warmer: 21°C against 9°C.",
        "session 'agent-loop': 5 messages stored",
    ]
    second = fake.bodies[1]
    assert [m["role"] for m in second["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
    ]
    assert [m["content"] for m in second["messages"][-2:]] == ["Paris: 21°C", "Oslo: 9°C"]
    assert second["tools"][0]["function"]["name"] == "get_weather"
    with Memory.open(database_url, cards={"enabled": False}) as mem:
        history = mem.history(user_id=user_id, session_id="agent-loop")
    assert json.loads(history[1].payload["tool_calls"][1]["function"]["arguments"]) == {
        "city": "Oslo"
    }

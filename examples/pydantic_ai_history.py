"""A pydantic-ai agent whose history stratamem keeps: ``StratamemHistory``.

The capability stores every message of the run in stratamem's Postgres and sends the model the
window (whole units: a tool call with its return), the summary and the recalled memories, so the
next run remembers without being handed ``message_history``.

    python examples/pydantic_ai_history.py --user u1

pydantic-ai's ``TestModel`` answers (it calls every tool, then reports what they returned), so
this runs offline; give the agent a real model (``"openai:gpt-4.1-mini"``) for a real one. The
database comes from the usual settings (``STRATAMEM_DATABASE_URL``, else the embedded Postgres).
"""

from __future__ import annotations

import argparse

from pydantic_ai import Agent
from pydantic_ai.models.test import TestModel

from memory import Memory
from memory.integrations.pydantic_ai import StratamemHistory


def main(user_id: str, session_id: str) -> None:
    with Memory.open() as mem:
        mem.pin(user_id=user_id, text="Deliveries go to the Berlin office.")
        history = StratamemHistory(mem, user_id=user_id, session_id=session_id)
        agent = Agent(TestModel(), system_prompt="Be brief.", capabilities=[history])

        @agent.tool_plain
        def track(order: str) -> str:
            """Where an order is."""
            return f"order {order}: shipped yesterday"

        first = agent.run_sync("Where is my order?")
        print("first run:", first.output)
        second = agent.run_sync("And when does it arrive?")  # no message_history needed
        print("second run was sent:", len(second.all_messages()) - 1, "messages")
        assert history.last_report is not None
        print("memories sent:", history.last_report.tokens.memories, "tokens")
        stored = mem.history(user_id=user_id, session_id=session_id)
        print("stored:", [message.payload["role"] for message in stored])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--user", required=True)
    parser.add_argument("--session", default="orders")
    arguments = parser.parse_args()
    main(arguments.user, arguments.session)

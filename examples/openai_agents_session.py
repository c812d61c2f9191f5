"""An OpenAI Agents SDK agent whose session is stratamem, and whose model input stratamem builds.

``StratamemSession`` stores the run's items (the user's input, the model's reasoning and tool
calls, the tool results, the answer) in stratamem's Postgres; ``call_model_input_filter`` sends
the model the summary, the recalled memories (the pin first) and the window, within the cap.

    python examples/openai_agents_session.py --user u1

A scripted model (the SDK's own test model) answers, so this runs offline; give the agent
``model="gpt-4.1-mini"`` (and set ``OPENAI_API_KEY``) to talk to a real one. The database comes
from the usual settings (``STRATAMEM_DATABASE_URL``, else the embedded Postgres).
"""

from __future__ import annotations

import argparse
import asyncio

from agents import Agent, RunConfig, Runner, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from memory import Memory
from memory.integrations.openai_agents import StratamemSession


@function_tool
def track(order: str) -> str:
    """Where an order is."""
    return f"order {order}: shipped yesterday, arrives Friday"


def scripted_model() -> ScriptedModel:
    """The model's two turns: call ``track``, then answer from its result."""
    return ScriptedModel(
        [
            [function_call("track", {"order": "A7"}, call_id="call_1")],
            [assistant_message("Order A7 shipped yesterday and arrives Friday at the office.")],
        ]
    )


async def main(user_id: str, session_id: str) -> None:
    with Memory.open() as mem:
        mem.pin(user_id=user_id, text="Deliveries go to the Berlin office.")
        session = StratamemSession(session_id, memory=mem, user_id=user_id)
        agent = Agent(
            name="shop",
            instructions="You are a shop assistant. Use the tools; answer in one sentence.",
            model=scripted_model(),
            tools=[track],
        )
        config = RunConfig(call_model_input_filter=session.call_model_input_filter)

        result = await Runner.run(agent, "Where is order A7?", session=session, run_config=config)

        print(result.final_output)
        assert session.last_report is not None
        print("sent:", session.last_report.to_json())
        print("items:", [item.get("type", "message") for item in await session.get_items()])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--user", required=True)
    parser.add_argument("--session", default="orders")
    arguments = parser.parse_args()
    asyncio.run(main(arguments.user, arguments.session))

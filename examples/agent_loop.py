"""An agent's tool loop with stratamem before every model call: the agent-loop hook.

The loop keeps its own list of messages, as any ``openai`` tool loop does; before each call,
``context_for`` stores what is new in it and returns the context to send instead (system, the
summary of what left the window, recalled memories, the recent window); after each call,
``record_reply`` stores what the model returned, tool calls included.

    export OPENAI_API_KEY=...            # and OPENAI_BASE_URL for any OpenAI-compatible server
    python examples/agent_loop.py "Is it warmer in Paris or in Oslo?" --user u1 --session trip

The database and the model come from the usual settings (``STRATAMEM_DATABASE_URL``, else the
embedded Postgres; ``STRATAMEM_MODEL``, gpt-4o-mini by default).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from openai import OpenAI
from openai.types.chat import ChatCompletionMessage, ChatCompletionToolParam

from memory import Memory
from memory.hook import context_for, record_reply

SYSTEM = "You are a travel assistant. Use the tools for facts; answer in one sentence."

TOOLS: list[ChatCompletionToolParam] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Today's temperature in a city, in degrees Celsius.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]

#: The tool's data: a fixed table, so the example needs no other service.
TEMPERATURES = {"paris": 21, "oslo": 9, "tokyo": 17}


def get_weather(city: str) -> str:
    """The tool itself."""
    degrees = TEMPERATURES.get(city.lower())
    return f"{city}: {degrees}°C" if degrees is not None else f"{city}: no data"


def run_tool_calls(reply: ChatCompletionMessage) -> list[dict[str, Any]]:
    """One tool message per call of the reply (parallel calls included)."""
    results = []
    for call in reply.tool_calls or ():
        if call.type != "function" or call.function.name != "get_weather":
            content = f"unknown tool {call.type}"
        else:
            arguments = json.loads(call.function.arguments or "{}")
            content = get_weather(str(arguments.get("city", "")))
        results.append({"role": "tool", "tool_call_id": call.id, "content": content})
    return results


def answer(
    client: OpenAI,
    mem: Memory,
    messages: list[Any],
    *,
    user_id: str,
    session_id: str,
    max_steps: int = 8,
) -> str:
    """Run the tool loop until the model answers without calling a tool."""
    for _ in range(max_steps):
        context = context_for(mem, messages, user_id=user_id, session_id=session_id)
        response = client.chat.completions.create(
            model=mem.settings.model, messages=context.messages, tools=TOOLS
        )
        reply = response.choices[0].message
        record_reply(mem, reply, user_id=user_id, session_id=session_id, context=context)
        messages.append(reply)
        if not reply.tool_calls:
            return reply.content or ""
        messages += run_tool_calls(reply)
    return "(stopped after too many tool calls)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("question", nargs="?", default="Is it warmer in Paris or in Oslo?")
    parser.add_argument("--user", default="example-user")
    parser.add_argument("--session", default="agent-loop")
    args = parser.parse_args(argv)
    client = OpenAI()  # OPENAI_API_KEY and OPENAI_BASE_URL from the environment
    with Memory.open() as mem:
        messages: list[Any] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": args.question},
        ]
        print(answer(client, mem, messages, user_id=args.user, session_id=args.session))
        stored = mem.history(user_id=args.user, session_id=args.session)
        print(f"session {args.session!r}: {len(stored)} messages stored")
    return 0


if __name__ == "__main__":
    sys.exit(main())

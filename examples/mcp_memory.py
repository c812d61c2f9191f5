"""An MCP client talking to ``stratamem mcp``: a fact remembered through one tool is found
through another, as an MCP host (Claude Desktop, an IDE, an agent) would use them.

    python examples/mcp_memory.py --user u1

It starts ``stratamem mcp --user u1`` over stdio, as a host's configuration would::

    {"mcpServers": {"memory": {"command": "stratamem", "args": ["mcp", "--user", "u1"]}}}

The database comes from the usual settings (``STRATAMEM_DATABASE_URL``, else the embedded
Postgres), passed on to the server through the environment.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


async def main(user_id: str) -> None:
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memory.cli", "mcp", "--user", user_id],
        env=dict(os.environ),
    )
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = (await session.list_tools()).tools
        print("tools:", ", ".join(tool.name for tool in tools))
        kept = await session.call_tool("remember", {"text": "The user's cat is called Miso."})
        print("remembered:", kept.structured_content)
        found = await session.call_tool("search", {"query": "what is the cat's name", "k": 1})
        print("found:", found.structured_content["result"][0]["text"])
        await session.call_tool("forget_memory", {"card_id": kept.structured_content["id"]})


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--user", required=True)
    asyncio.run(main(parser.parse_args().user))

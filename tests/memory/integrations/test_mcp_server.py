"""``stratamem mcp`` with the ``mcp`` Python client: over stdio (a real subprocess bound to
``--user``) and over streamable HTTP (each request's stratamem key decides its user)."""

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from databases import own_database
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from memory import Memory, Settings
from memory.proxy.keys import KeyRing
from storage import Database
from storage.proxy_keys import ProxyKeyStore

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def mcp_database(database: Database) -> Iterator[Database]:
    """A database of this module's: its cards are the model-free embedder's."""
    with own_database(database, "mcp") as own:
        yield own


def environment(database: Database) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATAMEM_")}
    return env | {
        "PYTHONPATH": str(REPO),
        "STRATAMEM_DATABASE_URL": database.url,
        "STRATAMEM_CARDS__EMBEDDER": "hashing",
    }


def answer(result: Any) -> Any:
    """A tool call's structured answer (a list comes wrapped as ``{"result": [...]}``)."""
    assert not result.is_error, result.content
    data = result.structured_content
    return data["result"] if isinstance(data, dict) and set(data) == {"result"} else data


async def remember_then_search(session: ClientSession) -> dict[str, Any]:
    """Every tool once; what each answered."""
    await session.initialize()
    said: dict[str, Any] = {"tools": {t.name: t for t in (await session.list_tools()).tools}}
    said["remember"] = answer(
        await session.call_tool("remember", {"text": "I am allergic to penicillin."})
    )
    said["search"] = answer(await session.call_tool("search", {"query": "penicillin allergy"}))
    said["pin"] = answer(await session.call_tool("pin", {"text": "Answer in British English."}))
    said["list_pins"] = answer(await session.call_tool("list_pins", {}))
    said["unpin"] = answer(await session.call_tool("unpin", {"card_id": said["pin"]["id"]}))
    card_id = said["remember"]["id"]
    said["forget_memory"] = answer(await session.call_tool("forget_memory", {"card_id": card_id}))
    said["search_after"] = answer(await session.call_tool("search", {"query": "penicillin"}))
    said["missing"] = await session.call_tool("unpin", {"card_id": card_id})
    said["bad"] = await session.call_tool("search", {"query": "x", "k": 0})
    return said


def check_every_tool(said: dict[str, Any]) -> None:
    schema = said["tools"]["remember"].input_schema
    assert schema["required"] == ["text"] and schema["properties"]["text"]["type"] == "string"
    assert "description" in schema["properties"]["text"]
    assert set(said["tools"]) == {
        "remember", "search", "pin", "unpin", "list_pins", "forget_memory"
    }  # fmt: skip
    assert said["remember"]["text"] == "I am allergic to penicillin."
    assert said["remember"]["pinned"] is False
    assert said["search"][0]["id"] == said["remember"]["id"]  # found through the other tool
    assert [pin["text"] for pin in said["list_pins"]] == ["Answer in British English."]
    assert said["unpin"]["pinned"] is False
    assert said["forget_memory"] == {"forgotten": said["remember"]["id"], "cards": 1}
    assert said["remember"]["id"] not in [hit["id"] for hit in said["search_after"]]
    assert said["missing"].is_error and "has no card" in said["missing"].content[0].text
    assert said["bad"].is_error  # k must be at least 1: the schema says so


@pytest.mark.slow
def test_over_stdio_a_remembered_fact_is_found_by_search(
    mcp_database: Database, user_id: str
) -> None:
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memory.cli", "mcp", "--user", user_id],
        env=environment(mcp_database),
    )

    async def talk() -> dict[str, Any]:
        async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
            return await remember_then_search(session)

    check_every_tool(asyncio.run(talk()))
    memory = Memory(mcp_database, Settings(cards={"embedder": "hashing"}))
    [kept] = memory.pins(user_id=user_id) or [None]
    assert kept is None  # unpinned
    assert memory.forget(user_id=user_id).cards == 1  # the unpinned pin: forget removes it


@pytest.fixture
def mcp_http(mcp_database: Database) -> Iterator[str]:
    """``stratamem mcp --http --port 0`` as its own process; its URL."""
    with subprocess.Popen(  # leaving it closes its pipes
        [sys.executable, "-m", "memory.cli", "mcp", "--http", "--port", "0"],
        env=environment(mcp_database),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        try:
            assert process.stdout is not None
            first = process.stdout.readline()
            assert first.startswith("stratamem mcp on http://127.0.0.1:"), process.stderr
            assert first.rstrip().endswith("(keys required)")
            yield first.split()[3]
        finally:
            process.terminate()
            process.wait(timeout=30)


def over_http(url: str, headers: dict[str, str], work: Any) -> Any:
    async def talk() -> Any:
        async with (
            httpx2.AsyncClient(headers=headers, timeout=60) as client,
            streamable_http_client(url, http_client=client) as (read, write),
            ClientSession(read, write) as session,
        ):
            return await work(session)

    return asyncio.run(talk())


@pytest.mark.slow
def test_over_http_a_user_key_binds_the_user(
    mcp_database: Database, mcp_http: str, user_id: str
) -> None:
    keys = KeyRing(ProxyKeyStore(mcp_database))
    key, _ = keys.create(user_id=user_id)
    other_key, _ = keys.create(user_id=f"{user_id}-other")

    check_every_tool(over_http(mcp_http, {"Authorization": f"Bearer {key}"}, remember_then_search))

    async def remember(session: ClientSession) -> Any:
        await session.initialize()
        return answer(await session.call_tool("remember", {"text": "My locker is 42."}))

    async def search(session: ClientSession) -> Any:
        await session.initialize()
        return answer(await session.call_tool("search", {"query": "locker"}))

    mine = over_http(mcp_http, {"Authorization": f"Bearer {key}"}, remember)
    found = over_http(mcp_http, {"Authorization": f"Bearer {key}"}, search)
    assert found[0]["id"] == mine["id"]
    assert over_http(mcp_http, {"Authorization": f"Bearer {other_key}"}, search) == []
    memory = Memory(mcp_database, Settings(cards={"embedder": "hashing"}))
    assert memory.card(user_id=user_id, card_id=mine["id"]).text == "My locker is 42."


@pytest.mark.slow
def test_over_http_a_request_without_a_valid_key_or_naming_another_user_is_refused(
    mcp_database: Database, mcp_http: str, user_id: str
) -> None:
    keys = KeyRing(ProxyKeyStore(mcp_database))
    key, _ = keys.create(user_id=user_id)
    admin, _ = keys.create(user_id=None)
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    accept = {"Accept": "application/json, text/event-stream"}

    def post(**headers: str) -> httpx.Response:
        return httpx.post(mcp_http, json=ping, headers=accept | headers, timeout=60)

    assert post().status_code == 401
    assert post(Authorization="Bearer sm_" + "x" * 43).status_code == 401
    naming_another = {"Authorization": f"Bearer {key}", "X-Stratamem-User": "someone"}
    assert post(**naming_another).status_code == 403
    assert post(Authorization=f"Bearer {admin}").status_code == 400  # an admin names the user
    assert post(Authorization=f"Bearer {key}").status_code == 200

    async def remember(session: ClientSession) -> Any:
        await session.initialize()
        return answer(await session.call_tool("remember", {"text": "Named by the admin."}))

    headers = {"Authorization": f"Bearer {admin}", "X-Stratamem-User": user_id}
    kept = over_http(mcp_http, headers, remember)
    memory = Memory(mcp_database, Settings(cards={"embedder": "hashing"}))
    assert memory.card(user_id=user_id, card_id=kept["id"]).text == "Named by the admin."


@pytest.mark.slow
def test_without_keys_it_warns_and_believes_the_named_user(
    mcp_database: Database, user_id: str
) -> None:
    with subprocess.Popen(  # leaving it closes its pipes
        [sys.executable, "-m", "memory.cli", "mcp", "--http", "--port", "0", "--no-auth"],
        env=environment(mcp_database),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        try:
            assert process.stdout is not None and process.stderr is not None
            first = process.stdout.readline()
            assert first.rstrip().endswith("(NO AUTH)")
            assert "WARNING: --no-auth" in process.stderr.readline()

            async def remember(session: ClientSession) -> Any:
                await session.initialize()
                return answer(await session.call_tool("remember", {"text": "No key needed."}))

            kept = over_http(first.split()[3], {"X-Stratamem-User": user_id}, remember)
        finally:
            process.terminate()
            process.wait(timeout=30)
    memory = Memory(mcp_database, Settings(cards={"embedder": "hashing"}))
    assert memory.card(user_id=user_id, card_id=kept["id"]).text == "No key needed."


@pytest.mark.slow
def test_the_command_wants_a_user_or_http() -> None:
    for arguments in ([], ["--user", "u1", "--http"]):
        done = subprocess.run(
            [sys.executable, "-m", "memory.cli", "mcp", *arguments],
            env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 2
        assert "give --user (stdio) or --http" in done.stderr

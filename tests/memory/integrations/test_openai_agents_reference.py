"""``StratamemSession`` answers as the Agents SDK's ``SQLiteSession`` on the same random
sequences of calls: adds of Responses-API items (calls answered, left open, results without a
call), pops, reads with every kind of limit, and clears."""

import asyncio
import uuid
from typing import Any

import pytest
from agents import SQLiteSession
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory import Memory, Settings
from memory.integrations.openai_agents import StratamemSession
from retrieval import MINILM_NAME, HashingEmbedder
from storage import Database

# Text without lone surrogates (neither store keeps one); NULs and other controls included.
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
CALL_IDS = st.sampled_from(["c1", "c2", "c3"])
IDS = st.text("abcdef0123", min_size=1, max_size=6)

ITEMS = st.one_of(
    st.builds(lambda text: {"role": "user", "content": text}, TEXT),
    st.builds(
        lambda text: {"role": "user", "content": [{"type": "input_text", "text": text}]}, TEXT
    ),
    st.builds(lambda text: {"role": "developer", "content": text}, TEXT),
    st.builds(
        lambda item_id, text: {
            "type": "message",
            "role": "assistant",
            "id": f"msg_{item_id}",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        },
        IDS,
        TEXT,
    ),
    st.builds(
        lambda item_id, text: {
            "type": "reasoning",
            "id": f"rs_{item_id}",
            "summary": [{"type": "summary_text", "text": text}],
            "encrypted_content": text,
        },
        IDS,
        TEXT,
    ),
    st.builds(
        lambda call_id, args: {
            "type": "function_call",
            "call_id": call_id,
            "name": "tool",
            "arguments": args,
        },
        CALL_IDS,
        TEXT,
    ),
    st.builds(
        lambda call_id, output: {
            "type": "function_call_output",
            "call_id": call_id,
            "output": output,
        },
        CALL_IDS,
        TEXT,
    ),
    st.builds(
        lambda item_id, query: {
            "type": "web_search_call",
            "id": f"ws_{item_id}",
            "status": "completed",
            "action": {"type": "search", "query": query},
        },
        IDS,
        TEXT,
    ),
)

OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.lists(ITEMS, max_size=5)),
        st.tuples(st.just("pop"), st.none()),
        st.tuples(st.just("get"), st.sampled_from([None, -1, 0, 1, 2, 3, 7])),
        st.tuples(st.just("clear"), st.none()),
    ),
    max_size=14,
)


async def play(session: Any, operations: list[tuple[str, Any]]) -> list[Any]:
    answers: list[Any] = []
    for name, argument in operations:
        if name == "add":
            answers.append(await session.add_items(argument))
        elif name == "pop":
            answers.append(await session.pop_item())
        elif name == "get":
            answers.append(await session.get_items(argument))
        else:
            answers.append(await session.clear_session())
    answers.append(await session.get_items())
    return answers


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(operations=OPERATIONS)
@pytest.mark.slow
def test_same_answers_as_sqlite_session(
    database: Database, operations: list[tuple[str, Any]]
) -> None:
    memory = Memory(database, Settings(), embedder=HashingEmbedder(name=MINILM_NAME))
    user_id, session_id = f"user-{uuid.uuid4()}", "agents"
    ours = StratamemSession(session_id, memory=memory, user_id=user_id)
    reference = SQLiteSession(session_id)

    assert asyncio.run(play(ours, operations)) == asyncio.run(play(reference, operations))
    memory.forget(user_id=user_id)

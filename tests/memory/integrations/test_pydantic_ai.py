"""``StratamemHistory`` in real pydantic-ai agent runs with tool calls: pydantic-ai's
``TestModel`` and ``FunctionModel`` as the model, stratamem's Postgres as the memory."""

import json
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelResponse,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from memory import Memory, Settings
from memory.integrations.pydantic_ai import INJECTED, StratamemHistory
from retrieval import MINILM_NAME, HashingEmbedder
from storage import Database

EMBEDDER = HashingEmbedder(name=MINILM_NAME)


@pytest.fixture
def memory(database: Database) -> Memory:
    return Memory(database, Settings(), embedder=EMBEDDER)


class Shop:
    """A scripted model: a new question calls ``track``; a tool return is answered. It keeps
    every history it was sent."""

    def __init__(self) -> None:
        self.sent: list[list[ModelMessage]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.sent.append(messages)
        last = messages[-1].parts
        if any(part.part_kind == "tool-return" for part in last):
            return ModelResponse(parts=[TextPart("It shipped yesterday.")])
        order = str(last[-1].content).split()[-1].rstrip("?")  # type: ignore[union-attr]
        call = ToolCallPart("track", {"order": order}, tool_call_id=f"call-{len(self.sent)}")
        return ModelResponse(parts=[TextPart("Let me look."), call])


def shop_agent(history: StratamemHistory, model: Any) -> Agent[None, str]:
    agent = Agent(model, system_prompt="Be brief.", capabilities=[history])

    @agent.tool_plain
    def track(order: str) -> str:
        """Where an order is."""
        return f"order {order} shipped yesterday"

    return agent


def kinds(messages: list[ModelMessage]) -> list[list[str]]:
    return [[part.part_kind for part in message.parts] for message in messages]


def test_a_run_with_a_tool_call_is_stored_and_the_next_run_remembers_it(
    memory: Memory, user_id: str, session_id: str
) -> None:
    model = Shop()
    history = StratamemHistory(memory, user_id=user_id, session_id=session_id)
    agent = shop_agent(history, FunctionModel(model))

    first = agent.run_sync("Where is order A7?")
    second = agent.run_sync("And order B2?")  # no message_history: stratamem has it

    assert first.output == second.output == "It shipped yesterday."
    stored = [m.payload for m in memory.history(user_id=user_id, session_id=session_id)]
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "assistant"] * 2
    assert stored[1]["tool_calls"][0]["function"]["name"] == "track"
    assert stored[2]["content"] == "order A7 shipped yesterday"
    # The second run's first request: the first run from stratamem, the call with its return.
    sent = model.sent[2]
    assert kinds(sent) == [
        ["system-prompt", "user-prompt"], ["text", "tool-call"], ["tool-return"], ["text"],
        ["user-prompt"],
    ]  # fmt: skip
    assert sent[0].parts[0].content == "Be brief."
    assert sent[2].parts[0].tool_call_id == sent[1].parts[1].tool_call_id == "call-1"  # type: ignore[union-attr]
    # What the model was sent is what pydantic-ai had, round-tripped whole through storage.
    assert ModelMessagesTypeAdapter.dump_python(
        sent[1:4], mode="json"
    ) == ModelMessagesTypeAdapter.dump_python(first.all_messages()[1:4], mode="json")
    assert all(m.metadata == {"stratamem": "stored"} for m in first.all_messages())
    assert history.last_report is not None and history.last_report.recall is not None


def test_a_test_model_run_calls_the_tool_and_the_next_run_is_sent_both(
    memory: Memory, user_id: str, session_id: str
) -> None:
    history = StratamemHistory(memory, user_id=user_id, session_id=session_id)
    model = TestModel()  # calls every tool once in a new conversation, then answers
    agent = shop_agent(history, model)

    first = agent.run_sync("Where is my order?")
    second = agent.run_sync("Thanks!")

    assert json.loads(first.output) == {"track": "order a shipped yesterday"}
    # TestModel answers from the tool returns it was sent: the first run's, from stratamem.
    assert second.output == first.output
    stored = [m.payload["role"] for m in memory.history(user_id=user_id, session_id=session_id)]
    assert stored == ["user", "assistant", "tool", "assistant", "user", "assistant"]
    assert kinds(second.all_messages()) == [
        ["system-prompt", "user-prompt"], ["tool-call"], ["tool-return"], ["text"],
        ["user-prompt"], ["text"],
    ]  # fmt: skip


def test_a_long_conversation_is_trimmed_by_units_with_summary_and_pin(
    database: Database, user_id: str, session_id: str
) -> None:
    memory = Memory(
        database,
        Settings(context_window=2_000, max_output=200, summary={"mode": "inline"}),
        embedder=EMBEDDER,
    )
    for turn in range(80):
        said = [
            {"role": "user", "content": f"Turn {turn}: my locker number is {turn}."},
            {"role": "assistant", "content": f"Noted locker {turn}."},
        ]
        memory.record(user_id=user_id, session_id=session_id, messages=said)
    memory.pin(user_id=user_id, text="The user's name is Ada.")
    history = StratamemHistory(memory, user_id=user_id, session_id=session_id)
    model = Shop()
    agent = shop_agent(history, FunctionModel(model))

    result = agent.run_sync("Where is order A7?")

    assert result.output == "It shipped yesterday."
    messages = model.sent[-1]
    head = messages[0].parts
    injected = [part for part in head if getattr(part, "dynamic_ref", None) == INJECTED]
    assert any("The user's name is Ada." in part.content for part in injected)  # type: ignore[union-attr]
    assert any(part.content.startswith("Summary of") for part in injected)  # type: ignore[union-attr]
    prompts = [p.content for m in messages for p in m.parts if p.part_kind == "user-prompt"]
    assert "Turn 0: my locker number is 0." not in prompts  # folded: not in the window
    assert prompts[-1] == "Where is order A7?"
    # The tool call and its return stay together, in the window and in storage.
    calls = [p for m in messages for p in m.parts if p.part_kind == "tool-call"]
    returns = [p for m in messages for p in m.parts if p.part_kind == "tool-return"]
    assert [c.tool_call_id for c in calls] == [r.tool_call_id for r in returns] != []
    report = history.last_report
    assert report is not None and report.summary is not None
    assert report.tokens.total <= report.budget
    assert len(messages) < 160


def test_forget_removes_what_the_history_stored(
    memory: Memory, user_id: str, session_id: str
) -> None:
    history = StratamemHistory(memory, user_id=user_id, session_id=session_id)
    shop_agent(history, FunctionModel(Shop())).run_sync("Where is order A7?")

    gone = memory.forget(user_id=user_id)

    assert gone.messages == 4
    assert memory.history(user_id=user_id, session_id=session_id) == []


def test_a_request_going_on_past_a_call_without_return_closes_it_after_its_returns() -> None:
    from memory.integrations.pydantic_ai import _plan

    request = {
        "kind": "request",
        "parts": [
            {"part_kind": "tool-return", "tool_name": "t", "content": "done", "tool_call_id": "c1"},
            {"part_kind": "user-prompt", "content": "next question"},
        ],
    }

    planned = _plan([request], {"c1": "t", "c2": "u"})

    assert [(m["role"], m.get("tool_call_id")) for m in planned] == [
        ("tool", "c1"), ("tool", "c2"), ("user", None)
    ]  # fmt: skip
    assert planned[1]["content"].startswith("interrupted: no result")

"""``StratamemSession`` with the real Agents SDK: runs with the SDK's own scripted model, the
model input its filter builds from stratamem's layers, erasure, concurrency and bad input."""

import asyncio
import json
import threading
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, SQLiteSession, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call
from openai.types.responses import ResponseReasoningItem
from openai.types.responses.response_reasoning_item import Summary

from memory import ConfigurationError, Memory, Settings
from memory.integrations.openai_agents import StratamemSession
from memory.integrations.responses_items import CLOSED
from retrieval import MINILM_NAME, HashingEmbedder
from storage import Database, InvalidInputError

#: The shared database's cards are MiniLM's (by name): the model-free fake stands in for it.
EMBEDDER = HashingEmbedder(name=MINILM_NAME)


@pytest.fixture
def memory(database: Database) -> Memory:
    return Memory(database, Settings(), embedder=EMBEDDER)


@function_tool
def track(order: str) -> str:
    """Where an order is."""
    return f"order {order} shipped yesterday"


def reasoning(item_id: str, text: str) -> ResponseReasoningItem:
    return ResponseReasoningItem(
        id=item_id,
        type="reasoning",
        summary=[Summary(text=text, type="summary_text")],
        encrypted_content=f"encrypted {text}",
    )


def scripted_turns() -> ScriptedModel:
    """A model that thinks, calls ``track``, answers; then answers the next input."""
    return ScriptedModel(
        [
            [
                reasoning("rs_1", "look it up"),
                function_call("track", {"order": "A7"}, call_id="c1"),
            ],
            [assistant_message("It shipped yesterday.", item_id="msg_1")],
            [assistant_message("You're welcome.", item_id="msg_2")],
        ]
    )


def run(agent: Agent[Any], text: str, session: Any, **config: Any) -> str:
    result = asyncio.run(Runner.run(agent, text, session=session, run_config=RunConfig(**config)))
    return str(result.final_output)


def test_a_run_with_a_tool_call_stores_the_same_items_as_sqlite_session(
    memory: Memory, user_id: str, session_id: str
) -> None:
    ours = StratamemSession(session_id, memory=memory, user_id=user_id)
    reference = SQLiteSession(session_id)
    for session in (ours, reference):
        agent = Agent(name="shop", instructions="Be brief.", model=scripted_turns(), tools=[track])
        assert run(agent, "Where is order A7?", session) == "It shipped yesterday."
        assert run(agent, "Thanks!", session) == "You're welcome."

    items = asyncio.run(ours.get_items())
    assert items == asyncio.run(reference.get_items())
    assert [item.get("type", "message") for item in items] == [
        "message", "reasoning", "function_call", "function_call_output",
        "message", "message", "message",
    ]  # fmt: skip
    assert items[1]["encrypted_content"] == "encrypted look it up"  # stored whole
    # stratamem holds the conversation: the reasoning inside the message of its call, the
    # call and its result one unit.
    stored = [m.payload for m in memory.history(user_id=user_id, session_id=session_id)]
    assert [m["role"] for m in stored] == [
        "user", "assistant", "tool", "assistant", "user", "assistant"
    ]  # fmt: skip
    assert stored[1]["tool_calls"][0]["id"] == "c1" and stored[2]["tool_call_id"] == "c1"
    assert stored[2]["content"] == "order A7 shipped yesterday"


def test_the_filter_builds_the_input_from_window_summary_memories_and_pins(
    database: Database, user_id: str, session_id: str
) -> None:
    """A long history on a small window: the model gets the pin and the summary as system
    items, then only the newest items, the tool call and its result together."""
    memory = Memory(
        database,
        Settings(
            context_window=2_000,
            max_output=200,
            summary={"mode": "inline"},
        ),
        embedder=EMBEDDER,
    )
    session = StratamemSession(session_id, memory=memory, user_id=user_id)
    history: list[Any] = []
    for turn in range(80):
        said = {"type": "output_text", "text": f"Noted locker {turn}.", "annotations": []}
        history.append({"role": "user", "content": f"Turn {turn}: my locker number is {turn}."})
        history.append(
            {
                "type": "message",
                "role": "assistant",
                "id": f"old_{turn}",
                "status": "completed",
                "content": [said],
            }
        )
    asyncio.run(session.add_items(history))
    memory.pin(user_id=user_id, text="The user's name is Ada.")
    model = scripted_turns()
    agent = Agent(name="shop", instructions="Be brief.", model=model, tools=[track])

    answer = run(
        agent,
        "Where is order A7?",
        session,
        call_model_input_filter=session.call_model_input_filter,
    )

    assert answer == "It shipped yesterday."
    first, second = model.calls
    assert first.system_instructions == "Be brief."
    head = [item for item in second.input if item.get("role") == "system"]
    assert any("The user's name is Ada." in item["content"] for item in head)  # the pin
    [summary] = [item["content"] for item in head if item["content"].startswith("Summary of")]
    assert "Turn 30: my locker number is 30." in summary
    sent = json.dumps(second.input)
    assert "old_0" not in sent  # folded into the summary, not sent again
    # The current turn as stored (the session's newest item is the reply to this call).
    assert second.input[-4:] == asyncio.run(session.get_items(limit=5))[:4]
    assert [i.get("type") for i in second.input[-3:]] == [
        "reasoning", "function_call", "function_call_output"
    ]  # fmt: skip
    report = session.last_report
    assert report is not None and report.summary is not None
    assert report.tokens.total <= report.budget
    assert len(second.input) < len(asyncio.run(session.get_items()))


def test_the_filter_sends_a_cut_tool_result_and_never_a_popped_item(
    database: Database, user_id: str, session_id: str
) -> None:
    memory = Memory(
        database, Settings(context_window=2_000, max_output=200, cards={"enabled": False})
    )
    session = StratamemSession(session_id, memory=memory, user_id=user_id)
    asyncio.run(session.add_items([{"role": "user", "content": "a question I take back"}]))
    assert asyncio.run(session.pop_item()) == {"role": "user", "content": "a question I take back"}
    huge = " ".join(f"line{n}" for n in range(3_000))
    model = ScriptedModel(
        [
            [function_call("track", {"order": "B2"}, call_id="c9")],
            [assistant_message("Done.", item_id="msg_9")],
        ]
    )

    @function_tool
    def track(order: str) -> str:
        """Where an order is."""
        return huge

    agent = Agent(name="shop", instructions="Be brief.", model=model, tools=[track])
    run(agent, "Track B2", session, call_model_input_filter=session.call_model_input_filter)

    second = model.calls[1].input
    assert "take back" not in json.dumps(second)
    [output] = [item for item in second if item.get("type") == "function_call_output"]
    assert "cut by stratamem" in output["output"] and len(output["output"]) < len(huge)
    stored = asyncio.run(session.get_items())
    assert stored[-2]["output"] == huge  # the session keeps the whole result


def test_a_streamed_run_gets_the_same_input_as_a_plain_one(
    memory: Memory, user_id: str, session_id: str
) -> None:
    plain = StratamemSession(session_id, memory=memory, user_id=user_id)
    streamed = StratamemSession(f"{session_id}-streamed", memory=memory, user_id=user_id)
    models = [scripted_turns(), scripted_turns()]
    for session, model in zip((plain, streamed), models, strict=True):
        agent = Agent(name="shop", instructions="Be brief.", model=model, tools=[track])
        config = RunConfig(call_model_input_filter=session.call_model_input_filter)
        if session is plain:
            asyncio.run(Runner.run(agent, "Where is order A7?", session=session, run_config=config))
            continue

        async def stream(agent: Agent[Any] = agent, config: RunConfig = config) -> None:
            run = Runner.run_streamed(
                agent, "Where is order A7?", session=streamed, run_config=config
            )
            async for _ in run.stream_events():
                pass

        asyncio.run(stream())

    assert [call.input for call in models[0].calls] == [call.input for call in models[1].calls]
    assert asyncio.run(plain.get_items()) == asyncio.run(streamed.get_items())


def test_without_a_session_the_filter_stores_what_the_run_sends(
    memory: Memory, user_id: str, session_id: str
) -> None:
    session = StratamemSession(session_id, memory=memory, user_id=user_id)
    agent = Agent(name="shop", model=scripted_turns(), tools=[track])
    config = RunConfig(call_model_input_filter=session.call_model_input_filter)

    result = asyncio.run(Runner.run(agent, "Where is A7?", run_config=config))

    assert result.final_output == "It shipped yesterday."
    # What the model was sent is stored; the answer comes with the next run's input.
    stored = asyncio.run(session.get_items())
    assert [item.get("type", "message") for item in stored] == [
        "message", "reasoning", "function_call", "function_call_output"
    ]  # fmt: skip


def test_a_batch_going_on_past_an_open_call_closes_it_for_the_model(
    memory: Memory, user_id: str, session_id: str
) -> None:
    session = StratamemSession(session_id, memory=memory, user_id=user_id)
    call = {"type": "function_call", "call_id": "c5", "name": "track", "arguments": "{}"}
    asyncio.run(session.add_items([{"role": "user", "content": "track it"}, call]))
    assert [c.call_id for c in memory.open_calls(user_id=user_id, session_id=session_id)] == ["c5"]
    asyncio.run(session.add_items([{"role": "user", "content": "never mind"}]))

    assert memory.open_calls(user_id=user_id, session_id=session_id) == []
    assert asyncio.run(session.get_items()) == [
        {"role": "user", "content": "track it"}, call, {"role": "user", "content": "never mind"}
    ]  # fmt: skip
    model = ScriptedModel([[assistant_message("OK.")]])
    agent = Agent(name="shop", model=model)
    run(agent, "and now?", session, call_model_input_filter=session.call_model_input_filter)
    sent = model.calls[0].input
    closing = {"type": "function_call_output", "call_id": "c5", "output": CLOSED}
    assert sent.index(closing) == sent.index(call) + 1  # the API would refuse an open call


def test_forget_removes_the_items_the_session_stored(
    memory: Memory, user_id: str, session_id: str
) -> None:
    session = StratamemSession(session_id, memory=memory, user_id=user_id)
    agent = Agent(name="shop", instructions="Be brief.", model=scripted_turns(), tools=[track])
    run(agent, "Where is order A7?", session)
    asyncio.run(session.pop_item())

    gone = memory.forget(user_id=user_id)

    assert gone.messages == 4 and gone.agent_item_pops == 1  # user, call, result, reply
    assert asyncio.run(session.get_items()) == []
    assert (
        asyncio.run(StratamemSession(session_id, memory=memory, user_id=user_id).pop_item()) is None
    )


def test_clear_session_erases_only_that_session(
    memory: Memory, user_id: str, session_id: str
) -> None:
    session = StratamemSession(session_id, memory=memory, user_id=user_id)
    other = StratamemSession("other", memory=memory, user_id=user_id)
    for each in (session, other):
        asyncio.run(each.add_items([{"role": "user", "content": "hi"}]))

    asyncio.run(session.clear_session())

    assert asyncio.run(session.get_items()) == []
    assert memory.history(user_id=user_id, session_id=session_id) == []
    assert asyncio.run(other.get_items()) == [{"role": "user", "content": "hi"}]


def test_an_item_that_is_not_a_dict_is_refused_and_nothing_is_stored(
    memory: Memory, user_id: str, session_id: str
) -> None:
    session = StratamemSession(session_id, memory=memory, user_id=user_id)
    asyncio.run(session.add_items([{"role": "user", "content": "kept"}]))
    with pytest.raises(InvalidInputError, match="item 1 is not a dict"):
        asyncio.run(session.add_items([{"role": "user", "content": "x"}, "not an item"]))  # type: ignore[list-item]
    with pytest.raises(ValueError, match="JSON"):
        asyncio.run(session.add_items([{"role": "user", "content": "y", "score": float("nan")}]))
    assert asyncio.run(session.get_items()) == [{"role": "user", "content": "kept"}]


def test_concurrent_batches_from_tasks_and_threads_are_stored_whole_and_once(
    memory: Memory, user_id: str, session_id: str
) -> None:
    session = StratamemSession(session_id, memory=memory, user_id=user_id)

    def batch(writer: str) -> list[Any]:
        return [{"role": "user", "content": f"{writer} item {n}"} for n in range(3)]

    async def from_tasks(prefix: str) -> None:
        await asyncio.gather(*(session.add_items(batch(f"{prefix}{n}")) for n in range(6)))

    threads = [threading.Thread(target=asyncio.run, args=(from_tasks(f"t{n}-"),)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    contents = [item["content"] for item in asyncio.run(session.get_items())]
    assert len(contents) == 54 and len(set(contents)) == 54
    for start in range(0, 54, 3):  # no batch interleaved with another
        writer = contents[start].split(" item ")[0]
        assert contents[start : start + 3] == [i["content"] for i in batch(writer)]


def test_concurrent_pops_never_return_one_item_twice(
    memory: Memory, user_id: str, session_id: str
) -> None:
    session = StratamemSession(session_id, memory=memory, user_id=user_id)
    items = [{"role": "user", "content": f"item {n}"} for n in range(12)]
    asyncio.run(session.add_items(items))

    async def pop_all() -> list[Any]:
        return await asyncio.gather(*(session.pop_item() for _ in range(14)))

    popped = asyncio.run(pop_all())

    assert popped.count(None) == 2
    assert sorted(p["content"] for p in popped if p) == sorted(i["content"] for i in items)
    assert asyncio.run(session.get_items()) == []


def test_a_window_holding_another_writers_system_message_is_refused_and_nothing_is_lost(
    memory: Memory, user_id: str, session_id: str
) -> None:
    session = StratamemSession(session_id, memory=memory, user_id=user_id)
    asyncio.run(session.add_items([{"role": "user", "content": "hello"}]))
    memory.record(
        user_id=user_id,
        session_id=session_id,
        messages=[{"role": "system", "content": "stored by someone else"}],
    )
    agent = Agent(name="shop", instructions="Be brief.", model=scripted_turns(), tools=[track])

    with pytest.raises(ConfigurationError, match="messages its adapter did not store"):
        run(agent, "Where is A7?", session, call_model_input_filter=session.call_model_input_filter)

    items = asyncio.run(session.get_items())
    assert items == [
        {"role": "user", "content": "hello"},
        {"role": "user", "content": "Where is A7?"},
    ]

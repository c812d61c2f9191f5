"""A LangGraph agent whose long-term memory is stratamem: ``StratamemStore`` as the graph's store.

The graph: ``recall`` searches the user's memories for the new message (stratamem's hybrid
search) and puts them before the conversation; ``agent`` is the chat model, which may call the
``remember`` tool; ``tools`` runs it, and it writes into the store under
``("memories", user_id)``. Memories outlive the thread: a new thread of the same user recalls
them, and ``Memory.forget(user_id=...)`` (or ``stratamem forget --user ...``) deletes them.

    python examples/langgraph_store.py --user u1

It runs offline: the chat model is a scripted one (``ScriptedModel``); put any LangChain chat
model with tool calling in its place (``ChatOpenAI(...)``, ...). The database comes from the
usual settings (``STRATAMEM_DATABASE_URL``, else the embedded Postgres).
"""

from __future__ import annotations

import argparse
import uuid
from collections.abc import Sequence
from typing import Annotated, Any

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import InjectedStore, ToolNode, tools_condition
from langgraph.store.base import BaseStore
from pydantic import Field

from memory import Memory
from memory.integrations.langgraph import StratamemStore


class ScriptedModel(BaseChatModel):
    """A chat model that answers from a script, and keeps every prompt it was sent."""

    replies: list[AIMessage]
    prompts: list[list[BaseMessage]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(
        self, tools: Sequence[Any], **kwargs: Any
    ) -> Runnable[LanguageModelInput, AIMessage]:
        return self  # the script already knows the tools

    def _generate(
        self, messages: list[BaseMessage], stop: list[str] | None = None, **kwargs: Any
    ) -> ChatResult:
        self.prompts.append(list(messages))
        return ChatResult(generations=[ChatGeneration(message=self.replies.pop(0))])


@tool
def remember(
    text: str, config: RunnableConfig, store: Annotated[BaseStore, InjectedStore()]
) -> str:
    """Remember a fact about the user for later conversations."""
    user_id = config["configurable"]["user_id"]
    store.put(("memories", user_id), str(uuid.uuid4()), {"text": text})
    return f"remembered: {text}"


def build_agent(model: BaseChatModel, store: BaseStore) -> CompiledStateGraph[Any]:
    """The graph: recall -> agent -> (tools -> agent)* -> end, with ``store`` as its store."""
    agent_model = model.bind_tools([remember])

    def recall(state: MessagesState, config: RunnableConfig, *, store: BaseStore) -> dict[str, Any]:
        user_id = config["configurable"]["user_id"]
        asked = str(state["messages"][-1].content)
        found = store.search(("memories", user_id), query=asked, limit=3)
        lines = "\n".join(f"- {hit.value['text']}" for hit in found)
        note = f"What you remember about the user:\n{lines}" if lines else "You remember nothing."
        return {"messages": [SystemMessage(note, id=f"memories-{uuid.uuid4()}")]}

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [agent_model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("recall", recall)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([remember]))
    graph.add_edge(START, "recall")
    graph.add_edge("recall", "agent")
    graph.add_conditional_edges("agent", tools_condition, ["tools", END])
    graph.add_edge("tools", "agent")
    return graph.compile(store=store)


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "args": arguments, "id": f"call-{uuid.uuid4().hex[:8]}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--user", default="langgraph-demo", help="whose memories")
    parser.add_argument("--forget", action="store_true", help="forget the user at the end")
    args = parser.parse_args()
    model = ScriptedModel(
        replies=[
            AIMessage("", tool_calls=[_call("remember", text="The user lives in Lisbon.")]),
            AIMessage("Noted: Lisbon."),
            AIMessage("The weather report will be for Lisbon."),
        ]
    )
    with Memory.open() as mem:
        agent = build_agent(model, StratamemStore(mem, user_position=1))
        for thread, said in (("first", "I moved to Lisbon last spring."),
                             ("second", "Which city is my weather report for?")):  # fmt: skip
            config: RunnableConfig = {"configurable": {"user_id": args.user, "thread_id": thread}}
            state = agent.invoke({"messages": [{"role": "user", "content": said}]}, config)
            print(f"[{thread} thread] user: {said}")
            print(f"[{thread} thread] {state['messages'][1].content}")
            print(f"[{thread} thread] assistant: {state['messages'][-1].content}")
        if args.forget:
            print(f"Forgot {mem.forget(user_id=args.user).describe()}.")


if __name__ == "__main__":
    main()

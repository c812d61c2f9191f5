"""pydantic-ai's history, kept and windowed by stratamem: ``StratamemHistory``.

A ``ProcessHistory`` capability (pydantic-ai's history processor) bound to a user and a
session. Before each model request it stores the run's new messages in the stratamem session,
then replaces the history with what ``Memory.prepare`` chose: the window of whole units (a
tool call never without its return), with the summary and the recalled memories (pins first)
as system prompt parts in front. After the run it stores the final response. So the
session remembers across runs, whether or not the application passes ``message_history``::

    agent = Agent(model, capabilities=[StratamemHistory(mem, user_id="u1", session_id="s1")])
    result = await agent.run("Where is my order?")

Each pydantic-ai message is stored as the chat messages stratamem windows (a request's tool
returns as tool messages, its prompt as a user message; a response as one assistant message),
each keeping its own parts whole in its metadata (``_KEY``), so the history sent is rebuilt
from storage exactly. A message once stored carries ``{"stratamem": ...}`` in its metadata,
which pydantic-ai never sends to a model.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import anyio
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
)
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import RunContext

from memory.context.report import ContextReport
from memory.errors import InvalidHistoryError
from memory.facade import Memory
from memory.integrations.responses_items import CLOSED
from memory.integrations.windows import context_window
from storage.agent_items import AgentItems, ItemMessage
from storage.inputs import check_id

__all__ = ["INJECTED", "StratamemHistory"]

#: The ``dynamic_ref`` of the system prompt parts stratamem puts in front (summary, memories).
INJECTED = "stratamem"
#: The key of a stored message's metadata (and of a pydantic-ai message's) this adapter uses.
_KEY = "pydantic_ai"
_MARK = "stratamem"
_RECORD_ATTEMPTS = 3


class StratamemHistory(ProcessHistory[Any]):
    """Stores a pydantic-ai conversation in stratamem and sends the model its context.

    Attributes:
        user_id: the user the conversation belongs to.
        session_id: the stratamem session it is stored in.
        last_report: the report of the last context sent.
    """

    def __init__(self, memory: Memory, *, user_id: str, session_id: str) -> None:
        """Bind the history to ``memory``, a user and a session.

        Raises:
            InvalidInputError: an id is not usable.
        """
        super().__init__(processor=self._process)
        self.user_id = check_id("user_id", user_id)
        self.session_id = check_id("session_id", session_id)
        self.last_report: ContextReport | None = None
        self._memory = memory
        self._items = AgentItems(memory.database)

    async def after_run(
        self, ctx: RunContext[Any], *, result: AgentRunResult[Any]
    ) -> AgentRunResult[Any]:
        """Store what the run added after its last request: its final response."""
        messages = result.all_messages()
        stored = await anyio.to_thread.run_sync(self._store, messages)
        for message, marked in zip(messages, stored, strict=True):
            # Marked where the application holds it: passed back as ``message_history``, it is
            # known as stored (pydantic-ai never sends a message's metadata to a model).
            message.metadata = marked.metadata
        return result

    def _process(self, messages: list[ModelMessage]) -> list[ModelMessage]:
        """Store what is new, then the history from stratamem (run on a worker thread)."""
        history = self._store([_without_injected(message) for message in messages])
        system = [
            part
            for message in history
            if message.kind == "request"
            for part in message.parts
            if part.part_kind == "system-prompt"
        ]
        prompt = "\n\n".join(part.content for part in system) or None
        context = self._memory.prepare(
            user_id=self.user_id, session_id=self.session_id, input=None, system=prompt
        )
        self.last_report = context.report
        split = context_window(self._items, self.user_id, self.session_id, context)
        injected = [
            {"part_kind": "system-prompt", "content": m["content"], "dynamic_ref": INJECTED}
            for m in split.head[1 if prompt else 0 :]
        ]
        head = [_dumped(part) for part in system] + injected
        rebuilt = _rebuilt(split.window, split.cut)
        if rebuilt and rebuilt[0]["kind"] == "request":
            rebuilt[0] = rebuilt[0] | {"parts": head + rebuilt[0]["parts"]}
        elif head:
            rebuilt.insert(0, {"kind": "request", "parts": head, "metadata": {_MARK: "head"}})
        return ModelMessagesTypeAdapter.validate_python(rebuilt)

    def _store(self, messages: Sequence[ModelMessage]) -> list[ModelMessage]:
        """Store the messages not stored yet; all of them, the new ones marked stored."""
        new = [index for index, message in enumerate(messages) if not _stored(message)]
        if not new:
            return list(messages)
        dumped = ModelMessagesTypeAdapter.dump_python([messages[i] for i in new], mode="json")
        for attempt in range(_RECORD_ATTEMPTS):
            calls = self._memory.open_calls(user_id=self.user_id, session_id=self.session_id)
            planned = _plan(dumped, {call.call_id: call.name for call in calls})
            try:
                self._memory.record(
                    user_id=self.user_id, session_id=self.session_id, messages=planned
                )
                break
            except InvalidHistoryError:
                if attempt == _RECORD_ATTEMPTS - 1:
                    raise
        marked = list(messages)
        for index in new:
            metadata = dict(marked[index].metadata or {}) | {_MARK: "stored"}
            marked[index] = replace(marked[index], metadata=metadata)
        return marked


def _plan(messages: list[dict[str, Any]], open_calls: dict[str, str]) -> list[dict[str, Any]]:
    """The chat messages that store pydantic-ai ``messages`` (dumped), given the open calls."""
    planned: list[dict[str, Any]] = []
    still_open = dict(open_calls)
    for message in messages:
        group = uuid.uuid4().hex
        envelope = {key: value for key, value in message.items() if key != "parts"}
        parts = [p for p in message["parts"] if p.get("part_kind") != "system-prompt"]
        if message["kind"] == "response":
            made = _response_message(parts)
            still_open |= {
                call["id"]: call["function"]["name"] for call in made.get("tool_calls", [])
            }
            chats = [(made, parts)]
        else:
            chats = _request_messages(parts, still_open)
        for chat, its_parts in chats:
            if chat["role"] == "tool":
                still_open.pop(chat["tool_call_id"], None)
            elif chat["role"] == "user" and still_open:
                # The conversation goes on past calls that got no result: closed for the model.
                planned.extend(_closing(call_id, name) for call_id, name in still_open.items())
                still_open = {}
            chat["metadata"] = {_KEY: {"group": group, "envelope": envelope, "parts": its_parts}}
            planned.append(chat)
    return planned


def _response_message(parts: list[dict[str, Any]]) -> dict[str, Any]:
    texts = [p["content"] for p in parts if p["part_kind"] == "text" and p.get("content")]
    calls = [
        {
            "id": p["tool_call_id"],
            "type": "function",
            "function": {"name": p["tool_name"], "arguments": _arguments(p.get("args"))},
        }
        for p in parts
        if p["part_kind"] == "tool-call"
    ]
    message: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) or None}
    if calls:
        message["tool_calls"] = calls
    elif message["content"] is None:
        message["content"] = " ".join(f"[{p['part_kind']}]" for p in parts) or "[empty]"
    return message


def _request_messages(
    parts: list[dict[str, Any]], open_calls: dict[str, str]
) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """One chat message per tool return (a tool message when its call is open) and per prompt;
    other parts go with the chat message after them (or the last one)."""
    chats: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    waiting: list[dict[str, Any]] = []
    for part in parts:
        kind = part["part_kind"]
        if kind == "tool-return" and part.get("tool_call_id") in open_calls:
            chat = {"role": "tool", "tool_call_id": part["tool_call_id"], "content": _text(part)}
        elif kind in ("user-prompt", "tool-return", "retry-feedback", "retry-prompt"):
            chat = {"role": "user", "content": _text(part)}
        else:
            waiting.append(part)
            continue
        chats.append((chat, [*waiting, part]))
        waiting = []
    if waiting:
        if chats:
            chats[-1][1].extend(waiting)
        else:
            kinds = " ".join(f"[{part['part_kind']}]" for part in waiting)
            chats.append(({"role": "user", "content": kinds}, waiting))
    return chats


def _closing(call_id: str, name: str) -> dict[str, Any]:
    return {
        "role": "tool",
        "tool_call_id": call_id,
        "content": CLOSED,
        "metadata": {_KEY: {"closed": {"tool_call_id": call_id, "tool_name": name}}},
    }


def _rebuilt(
    window: Sequence[tuple[ItemMessage, dict[str, Any]]], cut: frozenset[int]
) -> list[dict[str, Any]]:
    """The pydantic-ai messages (dumped) of a window's stored messages, each marked stored.

    Consecutive chat messages of one pydantic-ai message join again (only its kept parts: a
    tool return whose call left the window goes with it); a tool result the cap cut carries
    the cut text; a call closed for the model gets a tool return saying so.
    """
    rebuilt: list[dict[str, Any]] = []
    last_group: str | None = None
    for message, sent in window:
        held = message.metadata.get(_KEY, {})
        if "closed" in held:
            part = {"part_kind": "tool-return", "content": CLOSED, **held["closed"]}
            rebuilt.append({"kind": "request", "parts": [part], "metadata": {_MARK: "closed"}})
            last_group = None
            continue
        if "parts" not in held:  # stored by another writer: the message it stands for
            held = _from_chat(message.payload)
        parts = [dict(part) for part in held["parts"]]
        if message.seq in cut:
            for part in parts:
                if part.get("tool_call_id") == message.payload.get("tool_call_id"):
                    part["content"] = sent["content"]
        if last_group is not None and held.get("group") == last_group:
            rebuilt[-1]["parts"].extend(parts)
            continue
        envelope = dict(held.get("envelope", {}))
        envelope["metadata"] = dict(envelope.get("metadata") or {}) | {_MARK: "stored"}
        rebuilt.append(envelope | {"parts": parts})
        last_group = held.get("group")
    return rebuilt


def _from_chat(payload: dict[str, Any]) -> dict[str, Any]:
    """What a chat message stored without parts stands for, as this adapter's metadata."""
    role, content = payload.get("role"), payload.get("content")
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    if role == "tool":
        part = {"part_kind": "tool-return", "tool_name": "", "content": text}
        parts = [part | {"tool_call_id": payload.get("tool_call_id")}]
        return {"group": None, "envelope": {"kind": "request"}, "parts": parts}
    if role != "assistant":
        parts = [{"part_kind": "user-prompt", "content": text}]
        return {"group": None, "envelope": {"kind": "request"}, "parts": parts}
    parts = [{"part_kind": "text", "content": text}] if content else []
    for call in payload.get("tool_calls") or ():
        function = call.get("function", {})
        parts.append(
            {
                "part_kind": "tool-call",
                "tool_name": function.get("name", ""),
                "args": function.get("arguments", ""),
                "tool_call_id": call.get("id"),
            }
        )
    return {"group": None, "envelope": {"kind": "response"}, "parts": parts}


def _without_injected(message: ModelMessage) -> ModelMessage:
    """``message`` without the parts stratamem put in front of an earlier request."""
    if message.kind != "request":
        return message
    parts = [
        part
        for part in message.parts
        if not (part.part_kind == "system-prompt" and part.dynamic_ref == INJECTED)
    ]
    return message if len(parts) == len(message.parts) else replace(message, parts=parts)


def _stored(message: ModelMessage) -> bool:
    return bool(message.metadata) and _MARK in message.metadata  # type: ignore[operator]


def _dumped(part: Any) -> dict[str, Any]:
    [message] = ModelMessagesTypeAdapter.dump_python([ModelRequest(parts=[part])], mode="json")
    return dict(message["parts"][0])


def _text(part: dict[str, Any]) -> str:
    content = part.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            item if isinstance(item, str) else f"[{item.get('kind', 'content')}]"
            for item in content
        ]
        return "\n".join(texts)
    return json.dumps(content, ensure_ascii=False, sort_keys=True, default=str)


def _arguments(args: Any) -> str:
    if isinstance(args, str):
        return args
    return json.dumps(args if args is not None else {}, ensure_ascii=False, sort_keys=True)

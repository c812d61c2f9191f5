"""A session's open tool calls, and the "interrupted: no result" results that close them.

An agent that crashes between an assistant's ``tool_calls`` and their results would otherwise
leave its session stuck: no chat API accepts a user message while calls wait for results. A
new user input closes such calls with a stored tool result that says plainly that there was
none (as coding agents do when a user interrupts a tool), so the model knows, and so does
anyone reading the history (its metadata carries ``INTERRUPTED_METADATA``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from memory.context.messages import Message
from storage import NewMessage, StoredMessage

__all__ = [
    "INTERRUPTED_CONTENT",
    "INTERRUPTED_METADATA",
    "OpenCall",
    "interrupted_results",
    "is_interrupted",
    "open_calls",
    "open_tail",
]

#: The content of the tool result that closes a call which never got its result.
INTERRUPTED_CONTENT = (
    "interrupted: no result (the conversation went on before this tool call returned; "
    "its result was never recorded)"
)
#: The metadata of such a result: how code recognises it (metadata is never sent to the model).
INTERRUPTED_METADATA: dict[str, Any] = {"stratamem": {"interrupted": True}}


@dataclass(frozen=True, slots=True)
class OpenCall:
    """A tool call of the session still waiting for its result.

    Attributes:
        call_id: the call's ``id`` (the ``tool_call_id`` its result must carry).
        name: the function called.
        arguments: its JSON-encoded arguments.
        seq: the seq of the assistant message that made the call.
    """

    call_id: str
    name: str
    arguments: str
    seq: int


def open_tail(newest_first: Iterable[StoredMessage]) -> list[StoredMessage]:
    """The stored messages from the session's last non-tool message on, oldest first.

    Args:
        newest_first: the session's messages, newest first (read lazily: only the tail is).
    """
    tail: list[StoredMessage] = []
    for record in newest_first:
        tail.append(record)
        if record.role != "tool":
            break
    tail.reverse()
    return tail


def open_calls(tail: Sequence[StoredMessage]) -> list[OpenCall]:
    """The calls of the tail's assistant message that no tool message of the tail answers."""
    if not tail or tail[0].role != "assistant":
        return []
    owner = Message.from_openai(tail[0].payload)
    answered = {record.payload.get("tool_call_id") for record in tail[1:]}
    return [
        OpenCall(call.id, call.function.name, call.function.arguments, tail[0].seq)
        for call in owner.tool_calls or ()
        if call.id not in answered
    ]


def interrupted_results(
    calls: Sequence[OpenCall], count: Callable[[Message], int]
) -> list[NewMessage]:
    """The tool results to store to close ``calls``; ``count`` counts a message's tokens."""
    results: list[NewMessage] = []
    for call in calls:
        message = Message(role="tool", tool_call_id=call.call_id, content=INTERRUPTED_CONTENT)
        results.append(
            NewMessage(
                payload=message.to_openai(),
                role="tool",
                tokens=count(message),
                metadata=INTERRUPTED_METADATA,
            )
        )
    return results


def is_interrupted(record: StoredMessage) -> bool:
    """Whether a stored message is a result that closed an interrupted call."""
    return record.role == "tool" and record.metadata == INTERRUPTED_METADATA

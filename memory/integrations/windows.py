"""Which stored messages an assembled context's window holds, for adapters that send their own
items in their place (the Agents SDK's, pydantic-ai's)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memory.context.assembler import AssembledContext
from memory.errors import ConfigurationError
from storage.agent_items import AgentItems, ItemMessage

__all__ = ["ContextWindow", "context_window"]

_SYSTEM_ROLES = ("system", "developer")


@dataclass(frozen=True, slots=True)
class ContextWindow:
    """An assembled context split into its head and its window.

    Attributes:
        head: the leading system messages (the system prompt, the summary, the memories).
        window: each message of the window as stored, with the message as sent (a tool result
            the cap cut differs from the stored one).
        cut: the seqs of the window's tool results the cap cut.
    """

    head: tuple[dict[str, Any], ...]
    window: tuple[tuple[ItemMessage, dict[str, Any]], ...]
    cut: frozenset[int]


def context_window(
    items: AgentItems, user_id: str, session_id: str, context: AssembledContext
) -> ContextWindow:
    """The stored messages behind ``context``'s window.

    The window is a suffix of the session's messages (the cap drops the oldest units first and
    never the current turn), so it is the newest *k* messages up to the context's newest; the
    adapters store no system message, so every system message of the context is in its head.
    Each is checked against the context, one for one (role and call id).

    Raises:
        ConfigurationError: the session holds messages another writer stored (a system message
            in the window), or it changed while the context was assembled.
    """
    messages = context.messages
    sent = [m for m in messages if m["role"] not in _SYSTEM_ROLES]
    head = messages[: len(messages) - len(sent)]
    if any(m["role"] in _SYSTEM_ROLES for m in messages[len(head) :]):
        raise ConfigurationError(
            f"session {session_id!r} holds system messages another writer stored"
        )
    newest = context.report.newest
    cut = frozenset(result.index for result in context.report.cut_tool_results)
    if not sent or newest is None:
        return ContextWindow(tuple(head), (), cut)
    stored = items.messages(user_id, session_id, newest.seq - len(sent) + 1, newest.seq)
    if len(stored) != len(sent) or stored[-1].id != newest.id or not _aligned(stored, sent):
        raise ConfigurationError(
            f"session {session_id!r} holds messages its adapter did not store, or changed while "
            "its context was assembled"
        )
    return ContextWindow(tuple(head), tuple(zip(stored, sent, strict=True)), cut)


def _aligned(stored: Sequence[ItemMessage], sent: Sequence[Mapping[str, Any]]) -> bool:
    return all(
        message.payload.get("role") == each.get("role")
        and message.payload.get("tool_call_id") == each.get("tool_call_id")
        for message, each in zip(stored, sent, strict=True)
    )

"""What the proxy tests share besides fixtures: the fixtures' types, and small readers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai

from memory import Memory

#: ``make_proxy(mem=None, **config) -> "/v1" URL`` (the fixture in conftest.py).
MakeProxy = Callable[..., str]
#: ``make_client(url, api_key=..., **headers) -> openai.OpenAI`` (the fixture in conftest.py).
MakeClient = Callable[..., openai.OpenAI]


def who(user_id: str, session_id: str) -> dict[str, str]:
    """The headers that name a request's user and session."""
    return {"X-Stratamem-User": user_id, "X-Stratamem-Session": session_id}


def stored(memory: Memory, user_id: str, session_id: str) -> list[dict[str, Any]]:
    """The session's stored messages as OpenAI dicts."""
    return [m.payload for m in memory.history(user_id=user_id, session_id=session_id)]


def contents(memory: Memory, user_id: str, session_id: str) -> list[Any]:
    """The ``content`` of each stored message."""
    return [message.get("content") for message in stored(memory, user_id, session_id)]

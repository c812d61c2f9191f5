"""What the inspector page's tests share: the demo's conversation played through a real
``Memory`` (hashing embedder, offline), the page served by uvicorn on loopback, admin and user
keys of the shared database.

A test module takes these with ``from ui_harness import *`` (a ``conftest.py`` here would take
the module name ``conftest`` from the root one).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from served import Served

from memory import Memory, Settings
from memory.cli.demo_script import SYSTEM, ScriptSession, demo_script, questions_session
from memory.proxy.keys import KeyRing
from memory.ui import create_app
from retrieval import MINILM_NAME, HashingEmbedder
from storage import Database
from storage.proxy_keys import ProxyKeyStore

__all__ = [
    "SCRIPT",
    "Played",
    "Served",
    "admin_key",
    "demo_memory",
    "play",
    "played",
    "serve",
    "ui_database",
    "user_key",
]

#: A stored message that must be shown as text, never run.
SCRIPT = '<script>window.pwned = 1; document.title = "pwned"</script><b>bold?</b>'
#: Ops turns per demo session: enough for a summary, drops and archived cards.
DEMO_TURNS = 8


@dataclass(frozen=True)
class Played:
    """The demo played for one user: who, and the session where the stored ``<script>`` is."""

    user_id: str
    sessions: tuple[str, ...]
    script_session: str


def demo_memory(database: Database, **settings: Any) -> Memory:
    """A ``Memory`` as the demo opens it (a small window, inline summaries), offline, with the
    hashing embedder under MiniLM's name (the page's own ``Memory`` takes the same)."""
    options: dict[str, Any] = {
        "context_window": 4_096,
        "max_output": 512,
        "summary": {"mode": "inline"},
        "cards": {"embedder": "hashing"},
        "llm_api_key": None,
        "llm_base_url": None,
    } | settings
    return Memory(database, Settings(**options), embedder=HashingEmbedder(name=MINILM_NAME))


def play(mem: Memory, user_id: str, sessions: list[ScriptSession]) -> None:
    """Play sessions as ``stratamem demo`` does: pin, prepare each input, record the replies,
    end the session."""
    for session in sessions:
        if session.pin:
            mem.pin(user_id=user_id, text=session.pin, session_id=session.id)
        for n, turn in enumerate(session.turns):
            moment = session.start + timedelta(minutes=2 * n)
            mem.prepare(
                user_id=user_id,
                session_id=session.id,
                input={
                    "role": "user",
                    "content": turn.input,
                    "id": f"{session.id}-{n}u",
                    "timestamp": moment.isoformat(),
                    "metadata": {"turn": n},
                },
                system=SYSTEM,
            )
            mem.record(
                user_id=user_id,
                session_id=session.id,
                messages=[
                    reply | {"timestamp": (moment + timedelta(seconds=i + 1)).isoformat()}
                    for i, reply in enumerate(turn.replies)
                ],
            )
        mem.end_session(user_id=user_id, session_id=session.id)


@pytest.fixture(scope="module")
def ui_database(database_url: str) -> Iterator[Database]:
    """This module's own handle on the shared database."""
    with Database.open(database_url) as opened:
        yield opened


@pytest.fixture(scope="module")
def admin_key(ui_database: Database) -> str:
    """An admin key of the shared database."""
    key, _ = KeyRing(ProxyKeyStore(ui_database)).create(user_id=None, label="ui tests")
    return key


@pytest.fixture(scope="module")
def user_key(ui_database: Database) -> str:
    """A key bound to one user: it opens no page."""
    key, _ = KeyRing(ProxyKeyStore(ui_database)).create(user_id="someone", label="ui tests")
    return key


@pytest.fixture(scope="module")
def played(ui_database: Database) -> Played:
    """The demo's three sessions and its questions, played for a user of this module, then a
    session whose user said a ``<script>``."""
    user_id = f"demo-{uuid.uuid4().hex[:8]}"
    mem = demo_memory(ui_database)
    sessions = [*demo_script(DEMO_TURNS), questions_session()]
    play(mem, user_id, sessions)
    mem.prepare(
        user_id=user_id,
        session_id="xss",
        input={"role": "user", "content": SCRIPT, "metadata": {"note": SCRIPT}},
    )
    mem.kept_reports(user_id=user_id, session_id="xss", limit=1)  # writes the queued ones
    return Played(user_id, tuple(session.id for session in sessions), "xss")


def serve(mem: Memory, **options: Any) -> Served:
    """The page over ``mem``, served (enter it)."""
    return Served(create_app(mem, **options))

"""A child process for the rolling-summary SIGKILL tests; ``python summary_child.py MODE ...``.

The child opens ``Memory`` on the parent's database with the summariser pointed at the parent's
fake OpenAI server, starts a consolidation and is killed by the parent somewhere inside it. It
tells the parent where it is over stdout (or the fake server does), never through sleeps.
"""

import signal
import sys
from collections.abc import Callable
from typing import Any

from child_process import say
from sqlalchemy import event

from memory import Memory, Settings
from memory.summary.summarizer import SummaryEvent
from storage import Database

#: The settings both the parent and the child use, so they fold the same messages.
SETTINGS: dict[str, Any] = {
    "model": "gpt-4o-mini",
    "context_window": 2_000,
    "max_output": 200,
    "summary": {"model": "summariser-1", "backoff_seconds": 0.0, "debounce_seconds": 0.0},
    "llm_api_key": "test",
    # These tests pin the summary's place in the prompt: recalled memories (the folded
    # messages' turn cards) would sit between it and the window. Recall is tested on its own.
    "cards": {"enabled": False},
}


def settings(base_url: str, **overrides: Any) -> Settings:
    """The test settings with the summariser at ``base_url``.

    ``summary_<name>`` overrides set ``<name>`` of the summary group.
    """
    summary = dict(SETTINGS["summary"])
    for name in [name for name in overrides if name.startswith("summary_")]:
        summary[name.removeprefix("summary_")] = overrides.pop(name)
    return Settings(**{**SETTINGS, "llm_base_url": base_url, "summary": summary, **overrides})


def consolidate(url: str, base_url: str, user_id: str, session_id: str) -> None:
    """Consolidate the session inline; the parent kills us while the summary request hangs."""
    memory = Memory(Database.open(url, pool_size=2), settings(base_url))
    memory.consolidate(user_id=user_id, session_id=session_id)
    say("consolidated")  # never reached


def die_before_commit(url: str, base_url: str, user_id: str, session_id: str) -> None:
    """Consolidate the session, blocking just before the new summary is committed."""
    database = Database.open(url, pool_size=2)

    def block(connection: object) -> None:
        # The summary's UPDATE has been sent and not committed: the parent kills us here.
        say("committing")
        signal.pause()

    def on_event(summary_event: SummaryEvent) -> None:
        # The model has answered; the next commit is the one that stores the summary.
        if summary_event.kind == "success":
            event.listen(database.engine, "commit", block)

    memory = Memory(database, settings(base_url), on_summary_event=on_event)
    memory.consolidate(user_id=user_id, session_id=session_id)
    say("consolidated")  # never reached


def work(url: str, base_url: str, user_id: str, session_id: str) -> None:
    """Run the background worker; the parent kills us while it holds the session's job."""
    memory = Memory(Database.open(url, pool_size=2), settings(base_url))
    memory.run_worker(until_idle=True)
    say("idle")  # never reached


MODES: dict[str, Callable[..., None]] = {
    "consolidate": consolidate,
    "die-before-commit": die_before_commit,
    "work": work,
}

if __name__ == "__main__":
    MODES[sys.argv[1]](*sys.argv[2:])

"""A child ending a session inline: ``archive_child.py URL BASE_URL USER SESSION``.

The parent holds its second extraction request at the fake server and kills it with SIGKILL,
so the child dies with part of the session's cards stored and the archive mark not moved.
"""

import sys

from child_process import say

from memory import Memory, Settings
from memory.llm import OpenAIChatModel
from retrieval import MINILM_NAME, HashingEmbedder
from storage import Database

#: The settings of the parent's ``Memory`` too (inline, no waits between attempts).
SETTINGS = {"summary": {"mode": "inline", "debounce_seconds": 0, "backoff_seconds": 0}}


def main(url: str, base_url: str, user_id: str, session_id: str) -> None:
    """Archive the session; never returns when the parent kills it during extraction."""
    with Database.open(url, pool_size=2) as database:
        memory = Memory(
            database,
            Settings(**SETTINGS),
            chat=OpenAIChatModel(base_url=base_url, api_key="test"),
            embedder=HashingEmbedder(name=MINILM_NAME),
        )
        memory.end_session(user_id=user_id, session_id=session_id)
        say("archived")


if __name__ == "__main__":
    main(*sys.argv[1:])

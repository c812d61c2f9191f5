"""A child folding a session inline: ``fold_child.py URL BASE_URL USER SESSION``.

The parent holds a lock on the session's summary row, so the child stores the fold's cards,
then waits in the statement that stores the summary; the parent kills it there with SIGKILL:
a crash between the card write and the summary write.
"""

import sys

from child_process import say

from memory import Memory, Settings
from memory.llm import OpenAIChatModel
from retrieval import MINILM_NAME, HashingEmbedder
from storage import Database

#: The settings of the parent's folding ``Memory`` too: a small window, so a fold is due.
SETTINGS = {
    "context_window": 1_500,
    "max_output": 300,
    "summary": {"mode": "inline", "debounce_seconds": 0, "backoff_seconds": 0},
}


def main(url: str, base_url: str, user_id: str, session_id: str) -> None:
    """Fold the session; never returns when the parent kills it in the summary write."""
    with Database.open(url, pool_size=2) as database:
        memory = Memory(
            database,
            Settings(**SETTINGS),
            chat=OpenAIChatModel(base_url=base_url, api_key="test"),
            embedder=HashingEmbedder(name=MINILM_NAME),
        )
        memory.consolidate(user_id=user_id, session_id=session_id)
        say("folded")


if __name__ == "__main__":
    main(*sys.argv[1:])

"""The database goes away and comes back: clear errors meanwhile, then it resumes, nothing lost."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import stop_embedded

from memory import Memory
from storage import Database, DatabaseUnavailableError


def test_a_restarted_database_is_reconnected_and_keeps_every_message(
    fresh_data_dir: Path,
) -> None:
    folder = (fresh_data_dir / "pg").resolve()
    with Memory.open(data_dir=fresh_data_dir, summary={"mode": "inline"}) as mem:
        for turn in range(3):
            mem.prepare(user_id="u", session_id="s", input=f"question {turn}")
            mem.record(
                user_id="u", session_id="s", messages=[{"role": "assistant", "content": "ok"}]
            )

        stop_embedded(folder)
        with pytest.raises(DatabaseUnavailableError):
            mem.prepare(user_id="u", session_id="s", input="while it is down")
        with pytest.raises(DatabaseUnavailableError):
            mem.history(user_id="u", session_id="s")

        Database.open(data_dir=fresh_data_dir).close()  # the server comes back
        context = mem.prepare(user_id="u", session_id="s", input="after the restart")

        history = [m.payload["content"] for m in mem.history(user_id="u", session_id="s")]
        assert history == [
            "question 0",
            "ok",
            "question 1",
            "ok",
            "question 2",
            "ok",
            "after the restart",
        ]
        assert context.messages[-1]["content"] == "after the restart"

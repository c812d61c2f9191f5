"""``stratamem demo`` and ``stratamem worker``, run through ``main`` on real databases."""

from __future__ import annotations

from pathlib import Path

import pytest

from memory import Memory, Settings
from memory.cli import main
from storage import Database


def test_the_demo_runs_offline_on_an_embedded_database(
    fresh_data_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "must-not-be-used")  # the demo is offline regardless

    assert main(["demo", "--turns", "12", "--data-dir", str(fresh_data_dir)]) == 0

    out = capsys.readouterr().out
    assert "raw" in out  # the summary took over what left the window, as a raw archive
    assert "36 messages stored" in out
    assert "(none deleted)" in out


def test_the_worker_runs_queued_consolidations_until_idle(
    database_url: str,
    user_id: str,
    session_id: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = {"context_window": 1_500, "max_output": 300, "summary__debounce_seconds": 0}
    for name, value in settings.items():
        monkeypatch.setenv(f"STRATAMEM_{name.upper()}", str(value))
    monkeypatch.setenv("STRATAMEM_DATABASE_URL", database_url)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with Database.open(database_url) as database:
        mem = Memory(database, Settings())  # the same environment as the worker's
        for turn in range(40):
            mem.prepare(user_id=user_id, session_id=session_id, input=f"question {turn} " * 8)
        assert mem.summary(user_id=user_id, session_id=session_id) is None

        assert main(["worker", "--until-idle"]) == 0

        summary = mem.summary(user_id=user_id, session_id=session_id)
        assert summary is not None and summary.kind == "raw"
        assert summary.covered == summary.boundary_seq > 0

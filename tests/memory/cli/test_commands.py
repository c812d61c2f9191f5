"""``stratamem demo`` and ``stratamem worker``, run through ``main`` on real databases."""

from __future__ import annotations

import logging
import os
import re
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
    # The window and the history budget the table's "tokens" column is measured against.
    assert "window 2,048 tokens, history budget 1,728" in " ".join(out.split())
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text(encoding="utf-8")
    assert "2,048-token" in readme and "history budget of 1,728 tokens" in " ".join(readme.split())


def test_a_worker_with_other_settings_does_the_fold_the_app_would_have_done(
    database_url: str,
    user_id: str,
    session_id: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The worker sees only the database URL: its own window would be gpt-4o-mini's 128,000
    # tokens, under which nothing here is due. The job's parameters say what the app meant.
    for name in list(os.environ):
        if name.startswith("STRATAMEM_") or name.startswith("OPENAI_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("STRATAMEM_DATABASE_URL", database_url)
    with Database.open(database_url) as database:
        app = Settings(context_window=4_096, summary={"debounce_seconds": 0})
        mem = Memory(database, app)
        trigger = mem._parts.fold_policy.trigger_tokens
        for turn in range(200):
            context = mem.prepare(
                user_id=user_id, session_id=session_id, input=f"question {turn} " * 8
            )
            if context.report.tokens.window + context.report.tokens.input > trigger:
                break  # a job is queued; the window still fits, so nothing was archived yet
        assert mem.summary(user_id=user_id, session_id=session_id) is None
        caplog.set_level(logging.INFO, logger="memory.jobs")

        assert main(["worker", "--until-idle"]) == 0

        summary = mem.summary(user_id=user_id, session_id=session_id)
        assert summary is not None and summary.kind == "raw"
        assert summary.covered == summary.boundary_seq > 0
        # It folded to the app's target, not to the worker's.
        kept = mem.history(user_id=user_id, session_id=session_id)[summary.boundary_seq :]
        assert sum(m.tokens for m in kept) <= trigger
    # One line for the run (other tests' queued jobs may run too: the database is shared).
    [line] = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert re.fullmatch(
        r"stratamem worker: ran \d+ job\(s\) on \d+ session\(s\): \d+ message\(s\) folded, "
        r"\d+ llm and \d+ raw summaries, \d+ archive\(s\) upgraded, 0 failed, [\d.]+ s",
        line,
    )
    [logged] = [r.getMessage() for r in caplog.records if session_id in r.getMessage()]
    assert re.fullmatch(
        rf"job \d+, session {session_id}: {summary.covered} message\(s\) folded, "
        r"summary raw, [\d.]+ s",
        logged,
    )

"""``stratamem demo`` and ``stratamem worker``, run through ``main`` on real databases."""

from __future__ import annotations

import logging
import os
import re
import subprocess
from pathlib import Path

import pytest
from sqlalchemy import text

from memory import Memory, Settings
from memory.cli import main
from memory.cli.demo import sparkline
from memory.cli.demo_script import demo_script
from storage import Database
from storage.engine import stop_embedded


@pytest.mark.slow
def test_the_demo_shows_every_layer_offline_on_an_embedded_database(
    fresh_data_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "must-not-be-used")  # the demo is offline regardless

    assert main(["demo", "--turns", "12", "--data-dir", str(fresh_data_dir)]) == 0

    out = " ".join(capsys.readouterr().out.split())
    assert "offline: no LLM" in out
    assert f"STRATAMEM_DATA_DIR={fresh_data_dir.resolve()} " in out.split("See it in a browser:")[1]
    assert re.search(r"See it in a browser: .*keys create --admin --label ui, then .* ui and", out)
    assert "window 4,096 tokens, history budget 3,503" in out
    assert "each request stays under the 4,096-token window" in out
    # Recalled in a new session: an English fact, a Chinese turn, and the pin first.
    assert "The team uses PostgreSQL 16 for the orders database" in out
    assert "Grafana" in out.split("我上次说的监控工具是什么")[1]
    assert "pin fact" in out, out
    assert "pinned: Never restart the payments database" in out
    assert "summary of session s3: raw, covers messages 1-" in out  # what left the window
    # The changed fact: the new city is recalled, the old one shown as superseded.
    assert "User lives in Lisbon, having moved there in September 2026" in out
    assert "superseded: User lives in Berlin (valid until 03 October 2026" in out
    assert f"rm -rf {fresh_data_dir}" in out
    readme = " ".join((Path(__file__).resolve().parents[3] / "README.md").read_text().split())
    assert "4,096-token window" in readme and "history budget of 3,503 tokens" in readme


@pytest.mark.slow
def test_following_the_demos_removal_hint_removes_what_it_made_in_its_data_dir(
    fresh_data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--turns", "0", "--data-dir", str(fresh_data_dir)]) == 0
    out = capsys.readouterr().out
    [user] = re.findall(r"\(user (demo-[0-9a-f]{8})\)", out)
    [hint] = re.findall(r"Remove it with (.+? forget --user \S+ --yes),", out)
    assert hint.startswith(f"STRATAMEM_DATA_DIR={fresh_data_dir} ")
    assert rows_of(fresh_data_dir, user) > 0
    # The hint runs in a shell of its own, with none of this process's settings, and a home
    # folder of its own: a hint that ignored --data-dir would act on an empty default folder.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STRATAMEM_", "OPENAI_"))}
    env |= {"HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "share")}
    try:
        run = subprocess.run(
            ["bash", "-c", hint], env=env, capture_output=True, text=True, check=False
        )
    finally:
        if (tmp_path / "share" / "stratamem" / "pg").exists():
            stop_embedded((tmp_path / "share" / "stratamem" / "pg").resolve())

    assert run.returncode == 0, run.stderr
    assert f"Forgot everything of user {user!r}" in run.stdout
    assert rows_of(fresh_data_dir, user) == 0


def rows_of(data_dir: Path, user_id: str) -> int:
    """How many messages and cards of ``user_id`` the embedded database in ``data_dir`` holds."""
    with Database.open(None, data_dir=data_dir) as database, database.transaction() as session:
        counted = session.execute(
            text(
                "SELECT (SELECT count(*) FROM messages WHERE user_id = :u)"
                " + (SELECT count(*) FROM cards WHERE user_id = :u)"
            ),
            {"u": user_id},
        ).scalar_one()
    return int(counted)


def test_a_sparkline_scales_to_the_top_and_never_hides_a_small_value() -> None:
    assert sparkline([0, 50, 100], width=10, top=100) == " ▄█"
    assert sparkline([1, 2], width=10, top=1_000) == "▁▁"  # small, not nothing
    assert sparkline(list(range(100)), width=10, top=99) == sparkline(
        [9, 19, 29, 39, 49, 59, 69, 79, 89, 99], width=10, top=99
    )
    assert sparkline([], width=10, top=1) == ""


def test_the_demo_script_is_long_bilingual_and_uses_tools() -> None:
    sessions = demo_script(70)
    turns = [turn for session in sessions for turn in session.turns]
    assert len(turns) >= 200
    assert any(session.language == "zh" for session in sessions)
    assert sum(session.pin is not None for session in sessions) == 1
    calls = [len(m["tool_calls"]) for t in turns for m in t.replies if m.get("tool_calls")]
    assert 2 in calls  # parallel tool calls too
    with pytest.raises(ValueError, match="negative"):
        demo_script(-1)


@pytest.mark.slow
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
        caplog.set_level(logging.INFO, logger="memory.jobs.consolidation")

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

"""How the suite itself runs: CI's hypothesis profile, and the ``slow`` marker of the quick loop."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import hypothesis
from sqlalchemy import text

from storage import Database

ROOT = Path(__file__).resolve().parents[1]


def test_ci_runs_property_tests_derandomized_and_without_a_deadline() -> None:
    ci = hypothesis.settings.get_profile("ci")
    assert ci.deadline is None
    assert ci.derandomize


def test_the_ci_profile_is_the_one_loaded_when_ci_is_set() -> None:
    # A process of its own: the profile is chosen once, when tests/conftest.py is imported.
    script = (
        "import hypothesis, pytest\n"
        "class Report:\n"
        "    def pytest_sessionfinish(self, session):\n"
        "        d = hypothesis.settings.default\n"
        "        print('PROFILE', d.deadline, d.derandomize)\n"
        "pytest.main(['-q', '--collect-only', '-p', 'no:cacheprovider', "
        "'tests/test_design_doc.py'], plugins=[Report()])\n"
    )
    env = {"PATH": "/usr/bin:/bin", "CI": "true"}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert "PROFILE None True" in done.stdout, done.stdout + done.stderr


def test_the_slow_marker_is_registered_and_documented() -> None:
    markers = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"][
        "pytest"
    ]["ini_options"]["markers"]
    assert any(marker.startswith("slow:") for marker in markers)
    assert 'pytest -m "not slow"' in (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_runs_shared_server_does_not_wait_for_the_disk(database: Database) -> None:
    with database.engine.connect() as connection:
        assert connection.execute(text("SHOW fsync")).scalar_one() == "off"
        # Commits still wait for their WAL to be written: only the disk flush is left out.
        assert connection.execute(text("SHOW synchronous_commit")).scalar_one() == "on"

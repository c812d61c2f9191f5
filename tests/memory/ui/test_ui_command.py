"""``stratamem ui`` as a process: on the embedded default with no setup (a fresh data folder,
no database URL), on 127.0.0.1, asking for an admin key made by ``stratamem keys``; stops on
SIGTERM. Its log names requests by path, never their query."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from memory.cli.app import build_parser
from memory.cli.ui import DEFAULT_UI_PORT

REPO = Path(__file__).resolve().parents[3]


def test_the_defaults_are_loopback_and_keys_required() -> None:
    args = build_parser().parse_args(["ui"])

    assert (args.host, args.port, args.no_auth) == ("127.0.0.1", DEFAULT_UI_PORT, False)


def run_command(env: dict[str, str], *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memory.cli", *arguments],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


@pytest.mark.slow
def test_ui_opens_on_the_embedded_default_and_takes_an_admin_key_from_keys(
    fresh_data_dir: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STRATAMEM_", "OPENAI_"))}
    env |= {"PYTHONPATH": str(REPO), "STRATAMEM_DATA_DIR": str(fresh_data_dir)}
    process = subprocess.Popen(
        [sys.executable, "-m", "memory.cli", "ui", "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline().split()
        assert first[:3] == ["stratamem", "ui", "on"], first
        url = first[3]
        anonymous = httpx.get(url, params={"q": "secret words"})
        made = run_command(env, "keys", "create", "--admin", "--label", "ui")
        key = made.stdout.strip().splitlines()[-1]
        with httpx.Client(headers={"Authorization": f"Bearer {key}"}) as admin:
            home = admin.get(url, params={"q": "secret words"})
        process.send_signal(signal.SIGTERM)
        _, errors = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()

    assert url.startswith("http://127.0.0.1:") and first[4:] == ["(admin", "key", "required)"]
    assert anonymous.status_code == 303 and anonymous.headers["location"].startswith("/login")
    assert made.returncode == 0, made.stderr
    assert home.status_code == 200 and "Users whose id contains" in home.text
    assert process.returncode == 0
    assert "No admin key yet: make one with `stratamem keys create --admin" in errors
    assert "GET / 200" in errors and "GET / 303" in errors
    assert "secret" not in errors  # a search's words never reach the log

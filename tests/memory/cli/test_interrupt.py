"""Ctrl-C ends a ``stratamem`` command with one line and exit code 130, never a traceback."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_streaming import StreamingFakeOpenAI

from memory.cli.base import EXIT_INTERRUPTED

ROOT = Path(__file__).resolve().parents[3]
#: Generous: the machine may be busy; the prompt ends the wait as soon as it is shown.
DEADLINE_S = 120.0


@pytest.fixture
def fake() -> Iterator[StreamingFakeOpenAI]:
    with StreamingFakeOpenAI() as server:
        yield server


def read_until(process: subprocess.Popen[bytes], wanted: bytes) -> bytes:
    """What the child wrote on stdout up to and including ``wanted`` (which ends no line)."""
    assert process.stdout is not None
    seen = b""
    give_up = time.monotonic() + DEADLINE_S
    while wanted not in seen:
        assert time.monotonic() < give_up, f"gave up waiting for {wanted!r}: {seen!r}"
        ready, _, _ = select.select([process.stdout], [], [], 1.0)
        if ready:
            chunk = os.read(process.stdout.fileno(), 4096)
            assert chunk, f"the child exited with {process.wait()} first: {seen!r}"
            seen += chunk
    return seen


@pytest.mark.slow
def test_ctrl_c_at_the_chat_prompt_is_one_line_and_exit_code_130(
    fake: StreamingFakeOpenAI, fresh_data_dir: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STRATAMEM_", "OPENAI_"))}
    env |= {
        "STRATAMEM_DATA_DIR": str(fresh_data_dir),
        "STRATAMEM_CARDS__K": "0",  # nothing to search: MiniLM is not loaded
        "OPENAI_BASE_URL": fake.base_url,
        "PYTHONUNBUFFERED": "1",
    }
    # stdin is a pipe that stays open: the chat waits on it for the user's next line.
    process = subprocess.Popen(
        [sys.executable, "-m", "memory.cli", "chat", "--user", "ana"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=ROOT,
    )
    try:
        read_until(process, b"you> ")

        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=DEADLINE_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()

    assert err.decode() == "stratamem: interrupted\n"
    assert process.returncode == EXIT_INTERRUPTED == 130

"""The README's facade example runs as written (on an embedded database of its own)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.mark.slow
def test_the_facade_example_runs_twice_on_one_data_folder(fresh_data_dir: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    example = next(block for block in blocks if "Memory.open()" in block)
    env = {key: value for key, value in os.environ.items() if not key.startswith("STRATAMEM_")}
    env["STRATAMEM_DATA_DIR"] = str(fresh_data_dir)

    runs = [
        subprocess.run(
            [sys.executable, "-c", example], env=env, capture_output=True, text=True, check=False
        )
        for _ in range(2)
    ]

    assert [run.returncode for run in runs] == [0, 0], [run.stderr for run in runs]
    # The input, the tool call and its result; then the second input (the batch is a replay).
    assert [run.stdout.splitlines()[-1] for run in runs] == ["3", "4"]


@pytest.mark.slow
def test_the_long_term_memory_example_recalls_across_sessions(fresh_data_dir: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    example = next(block for block in blocks if "end_session" in block)
    env = {key: value for key, value in os.environ.items() if not key.startswith("STRATAMEM_")}
    env["STRATAMEM_DATA_DIR"] = str(fresh_data_dir)

    run = subprocess.run(
        [sys.executable, "-c", example], env=env, capture_output=True, text=True, check=False
    )

    assert run.returncode == 0, run.stderr
    memories = run.stdout.split("\n- ")
    assert "Answer in British English." in memories[1]  # the pin, first
    assert "Postgres 16" in run.stdout.split("[(")[0]  # recalled from the other session
    assert "[6 May 2024] User: We use Postgres 16 for billing." in run.stdout
    assert run.stdout.rstrip().endswith("[]")  # no client ids were given

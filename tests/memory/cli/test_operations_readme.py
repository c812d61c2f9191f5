"""The Operations section of docs/operations.md matches the commands as built."""

from __future__ import annotations

import re
from pathlib import Path

from memory.cli import build_parser
from memory.cli.chat import HELP
from memory.jobs.worker import SHUTDOWN_GRACE_SECONDS

OPERATIONS = Path(__file__).resolve().parents[3] / "docs" / "operations.md"


def operations() -> str:
    text = OPERATIONS.read_text(encoding="utf-8")
    return text.split("## Operations", 1)[1].split("\n## ", 1)[0]


def test_every_command_it_shows_exists_with_the_options_it_uses() -> None:
    parser = build_parser()
    for line in re.findall(r"^stratamem (.+?)\s+#", operations(), re.M):
        parser.parse_args(line.split())  # exits (failing the test) on an unknown option


def test_the_chat_commands_and_the_worker_grace_are_the_ones_built() -> None:
    section = " ".join(operations().split())
    for command in re.findall(r"^(/\w+)", HELP, re.M):
        assert f"`{command}" in section, command
    assert f"{SHUTDOWN_GRACE_SECONDS:g} s after the signal" in section

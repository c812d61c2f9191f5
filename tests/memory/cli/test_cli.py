"""The ``stratamem`` command line, run in process and once as a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memory.cli import build_parser, main
from memory.cli.inspect import load_transcript, match_trimmed
from memory.context.tokens import count_tokens
from memory.context.trim import trim_history

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "transcript.json"


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    # Rich sizes its tables to the terminal; a fixed width keeps the output comparable.
    monkeypatch.setenv("COLUMNS", "120")


def write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "transcript.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def rows(output: str) -> dict[str, list[str]]:
    """The table rows of ``inspect`` output, keyed by their message span."""
    table: dict[str, list[str]] = {}
    for line in output.splitlines():
        cells = line.split()
        if cells and cells[0].replace("-", "").isdigit() and len(cells) > 4:
            table[cells[0]] = cells
    return table


def example_messages() -> list[dict[str, Any]]:
    data: dict[str, list[dict[str, Any]]] = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    return data["messages"]


def test_inspect_shows_units_tokens_and_what_a_trim_keeps(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["inspect", str(EXAMPLE), "--budget", "1200"]) == 0
    out = capsys.readouterr().out
    messages = example_messages()
    total = count_tokens(messages)
    assert f"21 messages in 17 units, {total:,} tokens (gpt-4o-mini)" in out
    table = rows(out)
    assert list(table) == [
        "0", "1", "2", "3", "4-5", "6", "7", "8-10", "11", "12", "13", "14", "15", "16", "17",
        "18", "19-20",
    ]  # fmt: skip
    assert table["0"][1:3] == ["system", "system"]
    assert table["4-5"][1:5] == ["window", "assistant", "+", "1"]
    assert table["1"][4] == "dropped"
    assert (table["8-10"][6], table["8-10"][8]) == ("2,393", "cut")  # o200k_base counts
    assert table["18"][1] == "turn"
    assert table["19-20"][6] == table["19-20"][7] == "85"  # the current turn is sent whole
    trimmed = trim_history(messages, 1200)
    sent = count_tokens(trimmed)
    assert f"Trim to 1,200 tokens sends {sent:,}: kept 13 of 17 units" in out
    assert "(1 with cut tool results), dropped 4 units (5 messages, 279 tokens)." in out


def test_inspect_keeps_everything_when_the_budget_is_large(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["inspect", str(EXAMPLE), "--budget", "100000"]) == 0
    out = capsys.readouterr().out
    assert "dropped" not in rows(out)["1"]
    assert "kept 17 of 17 units (0 with cut tool results), dropped 0 units" in out


def test_inspect_reads_a_plain_list_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, [{"role": "user", "content": "hello there"}])
    assert main(["inspect", str(path), "--budget", "50", "--model", "gpt-3.5-turbo"]) == 0
    out = capsys.readouterr().out
    assert "1 message in 1 unit" in out
    assert "(gpt-3.5-turbo)" in out
    assert rows(out)["0"][1:3] == ["turn", "user"]


def test_inspect_lists_structural_problems_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(
        tmp_path,
        {"messages": [{"role": "tool", "tool_call_id": "x", "content": "orphan"}, {"role": "bot"}]},
    )
    assert main(["inspect", str(path), "--budget", "100"]) == 1
    out = capsys.readouterr().out
    assert "2 structural problem(s)" in out
    assert "message 0: a tool message cannot come first" in out
    assert "message 1: not a chat message" in out


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("{not json", "is not valid JSON"),
        ('{"items": []}', "holds neither a list of messages nor an object with one"),
        ('"just text"', "holds neither a list of messages nor an object with one"),
    ],
)
def test_unreadable_transcripts_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, expected: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    assert main(["inspect", str(path), "--budget", "100"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("stratamem: error: ")
    assert expected in captured.err
    assert "Traceback" not in captured.err


def test_a_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(tmp_path / "nope.json"), "--budget", "100"]) == 2
    err = capsys.readouterr().err
    assert "cannot read" in err
    assert "No such file or directory" in err


def test_an_overflow_exits_1_naming_the_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(EXAMPLE), "--budget", "100"]) == 1
    err = capsys.readouterr().err
    assert "stratamem: error: the mandatory context needs" in err
    assert "but the budget is 100" in err


@pytest.mark.parametrize("budget", ["-5", "lots"])
def test_a_bad_budget_is_a_usage_error(budget: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["inspect", str(EXAMPLE), "--budget", budget])
    assert caught.value.code == 2
    assert "argument --budget" in capsys.readouterr().err


def test_a_subcommand_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main([])
    assert caught.value.code == 2
    assert "COMMAND" in capsys.readouterr().err


def test_subcommands_are_registered_in_the_parser() -> None:
    parser = build_parser()
    args = parser.parse_args(["inspect", "t.json", "--budget", "10"])
    assert (args.command, args.budget, args.model) == ("inspect", 10, "gpt-4o-mini")
    assert callable(args.handler)


def test_load_transcript_accepts_both_shapes(tmp_path: Path) -> None:
    message = {"role": "user", "content": "hi"}
    assert load_transcript(write(tmp_path, [message])) == [message]
    assert load_transcript(write(tmp_path, {"messages": [message]})) == [message]


def test_match_trimmed_pairs_duplicates_with_the_newest_message() -> None:
    messages = [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "same"},
        {"role": "assistant", "content": "old"},
        {"role": "user", "content": "same"},
    ]
    trimmed = [messages[0], messages[3]]
    assert match_trimmed(messages, trimmed) == [messages[0], None, None, messages[3]]


def test_match_trimmed_recognises_a_cut_tool_result() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c", "content": "long " * 50},
    ]
    cut = {"role": "tool", "tool_call_id": "c", "content": "long [cut]"}
    assert match_trimmed(messages, [*messages[:2], cut]) == [*messages[:2], cut]


@pytest.mark.slow
def test_the_module_runs_as_a_program() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "120"}
    completed = subprocess.run(
        [sys.executable, "-m", "memory.cli", "inspect", str(EXAMPLE), "--budget", "1200"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert "Trim to 1,200 tokens sends" in completed.stdout
    assert "Traceback" not in completed.stderr


def test_inspect_never_truncates_its_headers_once_indices_reach_three_digits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    for turn in range(60):
        calls = [
            {"id": f"{kind}{turn}", "type": "function", "function": {"name": "lookup"}}
            for kind in "cd"
        ]
        messages += [
            {"role": "user", "content": f"question {turn} about a long and winding road"},
            {"role": "assistant", "content": None, "tool_calls": calls},
            {"role": "tool", "tool_call_id": f"c{turn}", "content": "result text " * 1_000},
            {"role": "tool", "tool_call_id": f"d{turn}", "content": "short"},
        ]

    assert main(["inspect", str(write(tmp_path, messages)), "--budget", "5000"]) == 0

    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.split()[:1] == ["#"])
    assert header.split() == ["#", "part", "unit", "tokens", "sent", "preview"]
    assert "…" not in header
    last = rows("\n".join(lines))["238-240"]
    assert last[:5] == ["238-240", "turn", "assistant", "+", "2"]
    assert all(len(line) <= 80 for line in lines if line.split()[:1] in (["#"], ["238-240"]))

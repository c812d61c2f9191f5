"""``stratamem eval updates``: the scoring on hand-made prompts, then the command on tiny data."""

# Chinese text is written with its own full-width punctuation, on purpose.
# ruff: noqa: RUF001

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import memory.cli.eval_updates as updates_cli
from memory.cli import main
from memory.eval.knowledge_updates import (
    MESSAGE_GAP,
    UpdateQuestion,
    UpdateScore,
    UpdateSession,
    UpdatesFormatError,
    find_value,
    load_updates,
    parse_user,
    score_prompt,
    session_messages,
    summarize,
)
from retrieval import HashingEmbedder


def question(
    current: str, stale: tuple[str, ...] = (), kind: Any = "update", lang: str = "en"
) -> UpdateQuestion:
    return UpdateQuestion("q?", current, stale, kind, lang)


# --- scoring, no database -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value", "found"),
    [
        ("User's phone is Pixel 8.", "Pixel 8", 16),
        ("User's phone is pixel 8", "Pixel 8", 16),
        ("User's phone is Pixel 8a", "Pixel 8", None),
        ("User is veganish", "vegan", None),
        ("User is vegan", "vegan", 8),
        ("User is vegetarian", "vegan", None),
        ("用户家在天津", "天津", 4),
        ("用户家在天津市", "天津", 4),
        ("nothing here", "Lyon", None),
        ("anything", " ", None),
    ],
)
def test_a_value_is_found_as_a_whole_word(text: str, value: str, found: int | None) -> None:
    assert find_value(text, value) == found


def test_a_prompt_scores_current_present_first_and_stale_present() -> None:
    changed = question("Berlin", ("Lyon", "Cork"))

    assert score_prompt(changed, "Berlin ... Lyon") == UpdateScore(changed, True, True, True)
    assert score_prompt(changed, "Cork ... Berlin") == UpdateScore(changed, True, False, True)
    assert score_prompt(changed, "Berlin only") == UpdateScore(changed, True, True, False)
    assert score_prompt(changed, "Lyon only") == UpdateScore(changed, False, False, True)
    assert score_prompt(changed, "") == UpdateScore(changed, False, False, False)


def test_rows_per_language_and_kind_then_per_language_then_all() -> None:
    scores = [
        score_prompt(question("Berlin", ("Lyon",)), "Berlin, Lyon"),
        score_prompt(question("Berlin", ("Lyon",)), "Lyon, Berlin"),
        score_prompt(question("Lyon", kind="previous"), "nothing"),
        score_prompt(question("Rex", kind="stable"), "Rex"),
        score_prompt(question("西安", ("天津",), lang="zh"), "西安"),
        score_prompt(question("Kiwi", kind="stable", lang="de"), "Kiwi"),
    ]

    rows = {row.name: row for row in summarize(scores)}

    assert list(rows) == [
        "en update", "en previous", "en stable", "zh update", "de stable", "en", "zh", "de", "all",
    ]  # fmt: skip
    assert (rows["en update"].questions, rows["en update"].current_in) == (2, 1.0)
    assert (rows["en update"].current_first, rows["en update"].stale_present) == (0.5, 1.0)
    assert (rows["en previous"].current_in, rows["en previous"].current_first) == (0.0, None)
    assert rows["zh update"].as_json() == {
        "questions": 1,
        "current_in_prompt": 1.0,
        "current_first": 1.0,
        "stale_present": 0.0,
    }
    assert (rows["en"].questions, rows["en"].current_in) == (4, 0.75)
    assert (rows["all"].questions, rows["all"].current_first) == (6, pytest.approx(2 / 3))


def test_a_sessions_messages_are_a_minute_apart_from_its_date() -> None:
    start = datetime(2025, 2, 4, 9, 30, tzinfo=UTC)
    session = UpdateSession("s1", start, (("user", "hi"), ("assistant", "hello")))

    messages = session_messages(session)

    assert [m["timestamp"] for m in messages] == [start, start + MESSAGE_GAP]
    assert [(m["role"], m["content"]) for m in messages] == [("user", "hi"), ("assistant", "hello")]


@pytest.mark.parametrize(
    "raw",
    [
        {"user": "u"},
        {"user": "u", "ask_date": "later", "sessions": [], "questions": []},
        {"user": "u", "ask_date": "2025-05-15T09:30:00", "sessions": [], "questions": [{"q": 1}]},
        {
            "user": "u",
            "ask_date": "2025-05-15T09:30:00",
            "sessions": [],
            "questions": [{"q": "?", "current": "x", "kind": "maybe", "lang": "en"}],
        },
        ["not", "a", "user"],
    ],
)
def test_a_user_that_is_not_of_the_format_is_a_format_error_naming_it(raw: Any) -> None:
    with pytest.raises(UpdatesFormatError, match="user 3 is not a knowledge-update user"):
        parse_user(raw, 3)


@pytest.mark.parametrize("content", ["{not json", '{"user": "u"}'])
def test_files_that_are_not_updates_are_a_format_error(tmp_path: Path, content: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(UpdatesFormatError):
        load_updates(path)


def test_a_naive_ask_date_is_utc() -> None:
    user = parse_user(USERS[0])
    assert user.ask_date == datetime(2025, 3, 20, 9, 30, tzinfo=UTC)
    assert user.sessions[0].date.tzinfo is UTC


def test_the_prompt_text_leaves_out_the_question_itself() -> None:
    messages = [
        {"role": "system", "content": "memories: Berlin"},
        {"role": "user", "content": [{"type": "text", "text": "earlier Lyon"}]},
        {"role": "assistant", "content": None},
        {"role": "user", "content": "Do I still live in Lyon?"},
    ]
    assert updates_cli.prompt_text(messages) == "memories: Berlin\nearlier Lyon\n"
    assert updates_cli.prompt_text([]) == ""


# --- the command ----------------------------------------------------------------------------


def dated(day: str, *said: str) -> dict[str, Any]:
    messages: list[dict[str, str]] = []
    for text in ("How do I descale a kettle?", *said):
        messages += [{"role": "user", "content": text}, {"role": "assistant", "content": "Ok."}]
    return {"id": f"s-{day}", "date": f"2025-{day}T09:30:00", "messages": messages}


#: Two tiny users: a city and a phone that change, a dog said once; a Chinese city that changes.
USERS: list[dict[str, Any]] = [
    {
        "user": "tiny-en",
        "ask_date": "2025-03-20T09:30:00",
        "sessions": [
            dated("02-01", "My home is in Lyon.", "Our dog is named Rex."),
            dated("02-15", "My phone is a Pixel 8."),
            dated("03-01", "Big news, we moved to Berlin.", "Got a new phone, a Moto G84."),
        ],
        "questions": [
            {"q": "Where is my home now?", "current": "Berlin", "stale": ["Lyon"],
             "kind": "update", "lang": "en"},
            {"q": "Which city was my home before Berlin?", "current": "Lyon", "stale": [],
             "kind": "previous", "lang": "en"},
            {"q": "What phone do I use now?", "current": "Moto G84", "stale": ["Pixel 8"],
             "kind": "update", "lang": "en"},
            {"q": "What is our dog called?", "current": "Rex", "stale": [], "kind": "stable",
             "lang": "en"},
        ],
    },
    {
        "user": "tiny-zh",
        "ask_date": "2025-03-20T09:30:00",
        "sessions": [dated("02-01", "我家在天津。"), dated("03-01", "我们已经搬去西安了。")],
        "questions": [
            {"q": "我现在家在哪里？", "current": "西安", "stale": ["天津"], "kind": "update",
             "lang": "zh"},
        ],
    },
]  # fmt: skip


@pytest.fixture
def updates_file(tmp_path: Path) -> Path:
    path = tmp_path / "updates.json"
    path.write_text(json.dumps(USERS, ensure_ascii=False), encoding="utf-8")
    return path


@pytest.fixture
def hashing_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    # MiniLM takes longer to load than the whole run: the hashing fake keeps it short, named
    # after the choice it stands for.
    monkeypatch.setattr(updates_cli, "make_embedder", lambda choice: HashingEmbedder(name=choice))


@pytest.mark.usefixtures("hashing_embedder")
@pytest.mark.parametrize("chat", ["none", "prose"])
@pytest.mark.slow
def test_eval_updates_records_asks_and_reports_per_language_and_kind(
    updates_file: Path,
    fresh_data_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    chat: str,
) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    out_json = tmp_path / "report.json"
    args = ["eval", "updates", "--data", str(updates_file), "--data-dir", str(fresh_data_dir)]
    embedder = "minilm-int8" if chat == "prose" else "minilm"
    options = ["--chat", chat, "--embedder", embedder, "--json", str(out_json)]
    assert main([*args, *options]) == 0
    out = capsys.readouterr().out
    report = json.loads(out_json.read_text(encoding="utf-8"))

    assert (report["users"], report["chat"], report["embedder"]) == (2, chat, embedder)
    assert list(report["rows"]) == [
        "en update", "en previous", "en stable", "zh update", "en", "zh", "all",
    ]  # fmt: skip
    # Every current value reaches the prompt ahead of the stale ones; the old ones come along
    # for the question about the past.
    for name in ("en update", "zh update", "all"):
        assert report["rows"][name]["current_in_prompt"] == 1.0, report["questions"]
        assert report["rows"][name]["current_first"] == 1.0, report["questions"]
    assert report["rows"]["en previous"]["current_in_prompt"] == 1.0
    assert [q["user"] for q in report["questions"]] == ["tiny-en"] * 4 + ["tiny-zh"]
    # Each question's scored prompt is in the report, to read why a question failed.
    for question in report["questions"]:
        assert question["prompt"].startswith("Remembered context"), question
    # Three facts changed or were said: city, phone and the Chinese city; none broken.
    assert report["chains"] == {
        "facts": 3,
        "cycles": 0,
        "facts_without_current_card": 0,
        "facts_with_several_current_cards": 0,
        "users_with_problems": [],
    }
    assert "Knowledge updates: 2 users" in out
    row = next(line.split() for line in out.splitlines() if line.strip().startswith("en update"))
    assert row[2:5] == ["2", "1.000", "1.000"]
    assert "supersede chains: 3 facts, 0 cycles" in out


def test_a_missing_file_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", "updates", "--data", str(tmp_path / "nope.json")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("stratamem: error: cannot read")
    assert captured.err.strip().count("\n") == 0


def test_a_malformed_file_exits_2_naming_the_user(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([USERS[0], {"user": "x"}]), encoding="utf-8")
    assert main(["eval", "updates", "--data", str(path)]) == 2
    assert "user 1 is not a knowledge-update user" in capsys.readouterr().err

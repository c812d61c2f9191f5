"""Export and import: a user's whole memory as JSON Lines and back, on the real embedded Postgres.

A round trip (export, forget, import, export again) gives the same file apart from ids; NULs,
256-character ids and a 10,000-message session survive; a malformed line is an error naming it,
and nothing is imported; imported cards carry the ids of the imported messages.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from databases import own_database, user_rows

from memory import Memory, Settings
from memory.errors import ExportFormatError
from memory.integrations.langgraph import StratamemStore
from retrieval import MINILM_NAME, HashingEmbedder
from storage import CardStore, Database, InvalidInputError
from storage.errors import ImportConflictError

REPO = Path(__file__).resolve().parents[2]
#: Every table that holds a user's rows.
USER_TABLES = (
    "sessions",
    "messages",
    "session_summaries",
    "archive_marks",
    "cards",
    "card_terms",
    "card_stats",
    "store_items",
    "store_vectors",
    "store_terms",
)
#: A 256-character id of 4-byte characters, the longest an id may be.
HUGE = "🦜" * 256


@pytest.fixture
def memory(database: Database) -> Memory:
    settings = Settings(summary={"mode": "inline"}, context_window=1_500, max_output=300)
    return Memory(database, settings, embedder=HashingEmbedder(name=MINILM_NAME))


def rows_of(database: Database, user_id: str) -> dict[str, int]:
    """How many rows each table holds for the user (0 everywhere once forgotten)."""
    return user_rows(database, user_id, USER_TABLES)


def fill(memory: Memory, database: Database, user_id: str) -> None:
    """A user with all there is: tool calls, NULs, huge ids, a summary, archived cards, a pin,
    a superseded card, store items."""
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    memory.record(
        user_id=user_id,
        session_id=HUGE,
        messages=[
            {"role": "user", "content": "Find order 4471 \x00 please", "id": HUGE},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {
                "role": "tool",
                "tool_call_id": "c1",
                "content": "shipped \\u0000 yesterday",
                "metadata": {"raw": "a\x00b", "n": [1, 2.5, None]},
                "timestamp": "2024-05-06T09:00:00+02:00",
            },
            {"role": "assistant", "content": "It shipped yesterday."},
        ],
    )
    for turn in range(30):  # past the fold trigger of the small window: a summary
        memory.record(
            user_id=user_id,
            session_id="long",
            messages=[
                {"role": "user", "content": f"Turn {turn}: we use Postgres 16 for billing."},
                {"role": "assistant", "content": f"Noted for turn {turn}, Postgres 16."},
            ],
        )
    memory.end_session(user_id=user_id, session_id=HUGE)
    memory.end_session(user_id=user_id, session_id="long")
    old = memory.pin(user_id=user_id, text="The office is in Paris.")
    new = memory.pin(user_id=user_id, text="The office moved to Berlin.")
    CardStore(database, model=MINILM_NAME, dimension=384).supersede(user_id, old.id, new.id)
    store = StratamemStore(memory, user_id=user_id, index={"fields": ["text"]})
    store.put(("memories",), "drink", {"text": "green tea \x00", "n": 1})
    store.put(("memories", "deep"), HUGE, {"text": "plain"}, index=False)


def normalized(lines: list[str]) -> list[dict[str, Any]]:
    """The records without what differs between two exports of the same data: the time of the
    export, and card refs (ids), renumbered in file order."""
    records = [json.loads(line) for line in lines]
    refs = {r["ref"]: n for n, r in enumerate(r for r in records if r["record"] == "card")}
    for record in records:
        record.pop("exported_at", None)
        if record["record"] == "card":
            record["ref"] = refs[record["ref"]]
            if record["superseded_by"] is not None:
                record["superseded_by"] = refs[record["superseded_by"]]
    return records


def test_export_forget_import_export_gives_the_same_records(
    memory: Memory, database: Database, user_id: str
) -> None:
    fill(memory, database, user_id)
    before = rows_of(database, user_id)
    first = list(memory.export_user(user_id=user_id))
    kinds = [json.loads(line)["record"] for line in first]
    assert {"header", "session", "message", "summary", "card", "item"} <= set(kinds)

    memory.forget(user_id=user_id)
    done = memory.import_user(first)
    second = list(memory.export_user(user_id=user_id))

    assert normalized(second) == normalized(first)
    assert rows_of(database, user_id) == before
    assert (done.sessions, done.items, done.summaries) == (2, 2, 1)
    history = memory.history(user_id=user_id, session_id=HUGE)
    assert history[0].payload["content"] == "Find order 4471 \x00 please"
    assert history[0].client_id == HUGE and history[2].metadata["raw"] == "a\x00b"
    superseded = [json.loads(line) for line in second if '"superseded_by":' in line]
    assert any(card.get("superseded_by") is not None for card in superseded)
    found = StratamemStore(memory, user_id=user_id).search(("memories",), query="tea")
    assert found[0].value == {"text": "green tea \x00", "n": 1} and found[0].score is not None


def test_imported_cards_carry_the_ids_of_the_imported_messages(
    memory: Memory, database: Database, user_id: str
) -> None:
    fill(memory, database, user_id)
    lines = list(memory.export_user(user_id=user_id))
    other = "🦜" * 200 + user_id  # 241 characters of up to 4 bytes: an id near the limit

    memory.import_user(lines, user_id=other)

    by_id = {
        message.id: (session, message.seq)
        for session in (HUGE, "long")
        for message in memory.history(user_id=other, session_id=session)
    }
    cards = [json.loads(line) for line in lines if json.loads(line)["record"] == "card"]
    found = memory.search(user_id=other, query="Postgres billing order", k=100)
    archived = [hit for hit in found if not hit.card.pinned]  # pins come from no message
    assert len(archived) > 10
    for hit in archived:
        assert hit.card.source_message_ids
        assert {by_id[i] for i in hit.card.source_message_ids} == {
            tuple(source)
            for source in next(c for c in cards if c["text"] == hit.card.text)["sources"]
        }
    # The original user is untouched by an import into another.
    assert rows_of(database, user_id) == rows_of(database, other)


def test_an_import_into_a_user_with_data_is_refused_unless_merged(
    memory: Memory, database: Database, user_id: str
) -> None:
    memory.record(user_id=user_id, session_id="a", messages=[{"role": "user", "content": "one"}])
    lines = list(memory.export_user(user_id=user_id))
    before = rows_of(database, user_id)

    with pytest.raises(ImportConflictError, match="already has data"):
        memory.import_user(lines)
    with pytest.raises(ImportConflictError, match="already has a session 'a'"):
        memory.import_user(lines, merge=True)
    assert rows_of(database, user_id) == before

    memory.forget(user_id=user_id, session_id="a")
    memory.pin(user_id=user_id, text="Kept through the merge.")
    done = memory.import_user(lines, merge=True)

    assert done.messages == 1
    assert [p.text for p in memory.pins(user_id=user_id)] == ["Kept through the merge."]


@pytest.mark.parametrize(
    ("broken", "at", "said"),
    [
        (lambda lines: [*lines[:3], "{not json", *lines[3:]], 4, "line 4: "),
        (lambda lines: lines[1:], 1, "header"),
        (lambda lines: [*lines, '{"record": "card", "ref": 1}'], None, "type: Field required"),
        (
            lambda lines: [lines[0].replace('"version":1', '"version":2'), *lines[1:]],
            1,
            "version 2",
        ),
        (lambda lines: [*lines, '{"record": "nonsense"}'], None, "record"),
    ],
)
def test_a_malformed_line_is_named_and_nothing_is_imported(
    memory: Memory, database: Database, user_id: str, broken: Any, at: int | None, said: str
) -> None:
    fill(memory, database, user_id)
    lines = broken(list(memory.export_user(user_id=user_id)))
    target = f"{user_id}-copy"

    with pytest.raises(ExportFormatError, match=said) as raised:
        memory.import_user(lines, user_id=target)

    assert raised.value.line == (at if at is not None else len(lines))
    assert str(raised.value).startswith(f"line {raised.value.line}: ")
    assert rows_of(database, target) == dict.fromkeys(USER_TABLES, 0)


def test_a_card_naming_a_message_not_in_the_file_is_named(
    memory: Memory, database: Database, user_id: str
) -> None:
    fill(memory, database, user_id)
    lines = list(memory.export_user(user_id=user_id))
    at = next(
        n for n, line in enumerate(lines) if '"record":"card"' in line and '"sources":[[' in line
    )
    card = json.loads(lines[at])
    card["sources"] = [["long", 999]]
    lines[at] = json.dumps(card)

    with pytest.raises(ExportFormatError, match=rf"line {at + 1}: .*\['long', 999\]"):
        memory.import_user(lines, user_id=f"{user_id}-copy")


def test_a_failure_while_storing_rolls_back_everything(
    memory: Memory, database: Database, user_id: str
) -> None:
    """Well-formed lines the database refuses (two messages with one client id): the sessions
    stored before it in the same transaction go too."""
    fill(memory, database, user_id)
    lines = list(memory.export_user(user_id=user_id))
    messages = [
        n
        for n, line in enumerate(lines)
        if '"record":"message"' in line and '"session_id":"long"' in line
    ]
    first, last = json.loads(lines[messages[0]]), json.loads(lines[messages[-1]])
    first["id"] = last["id"] = "same-id"
    lines[messages[0]], lines[messages[-1]] = json.dumps(first), json.dumps(last)
    target = f"{user_id}-copy"

    with pytest.raises(InvalidInputError, match="uq_messages_session_client") as raised:
        memory.import_user(lines, user_id=target)

    assert "Traceback" not in str(raised.value)
    assert rows_of(database, target) == dict.fromkeys(USER_TABLES, 0)


@pytest.mark.slow
def test_a_session_of_10000_messages_goes_and_comes_back(
    memory: Memory, database: Database, user_id: str
) -> None:
    big = Memory(
        database,
        Settings(summary={"mode": "background"}, cards={"enabled": True, "embedder": "hashing"}),
        embedder=HashingEmbedder(name=MINILM_NAME),
    )
    batch = [
        {"role": "user" if n % 2 == 0 else "assistant", "content": f"message {n}", "id": f"m{n}"}
        for n in range(10_000)
    ]
    big.record(user_id=user_id, session_id="big", messages=batch)
    lines = list(big.export_user(user_id=user_id))
    assert len(lines) == 10_002  # the header, the session, the messages

    done = big.import_user(lines, user_id=f"{user_id}-copy")

    assert done.messages == 10_000
    copied = big.recent_history(user_id=f"{user_id}-copy", session_id="big", limit=2)
    assert [(m.seq, m.client_id, m.payload["content"]) for m in copied] == [
        (9_999, "m9998", "message 9998"),
        (10_000, "m9999", "message 9999"),
    ]


def cli(
    database_url: str, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    environment = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("STRATAMEM_", "OPENAI_"))
    }
    environment |= {"STRATAMEM_DATABASE_URL": database_url, "STRATAMEM_CARDS__EMBEDDER": "hashing"}
    return subprocess.run(
        [sys.executable, "-m", "memory.cli", *args],
        capture_output=True,
        text=True,
        env=environment,
        input=stdin,
        cwd=REPO,
        timeout=300,
        check=False,
    )


@pytest.fixture
def own(database: Database) -> Iterator[Database]:
    """A database of its own: the commands' embedder (hashing) is not the shared one's."""
    with own_database(database, "transfer") as other:
        yield other


@pytest.mark.slow
def test_the_commands_export_and_import(own: Database, user_id: str, tmp_path: Path) -> None:
    memory = Memory(own, Settings(summary={"mode": "inline"}), embedder=HashingEmbedder())
    memory.record(
        user_id=user_id,
        session_id="s",
        messages=[
            {"role": "user", "content": "I live in Lisbon."},
            {"role": "assistant", "content": "Ok."},
        ],
    )
    memory.end_session(user_id=user_id, session_id="s")
    memory.pin(user_id=user_id, text="Answer in Portuguese.")

    exported = cli(own.url, "export", "--user", user_id)
    assert exported.returncode == 0, exported.stderr
    file = tmp_path / "user.jsonl"
    file.write_text(exported.stdout, encoding="utf-8")
    forgot = cli(own.url, "forget", "--user", user_id, "--yes")
    assert forgot.returncode == 0, forgot.stderr
    imported = cli(own.url, "import", str(file))

    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.startswith(f"Imported into user '{user_id}': 1 session, 2 messages")
    again = cli(own.url, "export", "--user", user_id)
    assert normalized(again.stdout.splitlines()) == normalized(exported.stdout.splitlines())
    assert [p.text for p in memory.pins(user_id=user_id)] == ["Answer in Portuguese."]

    broken = exported.stdout.splitlines()
    broken[2] = broken[2][:-5]
    refused = cli(own.url, "import", "-", "--user", f"{user_id}-2", stdin="\n".join(broken))
    assert refused.returncode == 1
    assert refused.stderr.startswith("stratamem: error: line 3: ")
    twice = cli(own.url, "import", str(file))
    assert twice.returncode == 1 and "already has data" in twice.stderr


@pytest.mark.slow
def test_an_export_read_in_part_ends_quietly(own: Database, user_id: str) -> None:
    memory = Memory(own, Settings(summary={"mode": "background"}), embedder=HashingEmbedder())
    batch = [{"role": "user", "content": f"message {n} " + "x" * 200} for n in range(2_000)]
    memory.record(user_id=user_id, session_id="s", messages=batch)
    environment = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("STRATAMEM_", "OPENAI_"))
    }
    environment["STRATAMEM_DATABASE_URL"] = own.url

    done = subprocess.run(
        f"{sys.executable} -m memory.cli export --user {user_id} | head -n 1",
        shell=True,
        capture_output=True,
        text=True,
        env=environment,
        cwd=REPO,
        timeout=300,
        check=False,
    )

    assert json.loads(done.stdout)["record"] == "header"
    assert done.stderr == ""

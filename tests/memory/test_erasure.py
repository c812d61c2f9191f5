"""Forgotten means forgotten everywhere: in another process's cache, against a fold or a reply
that was under way, and whatever the settings of the process that forgets.

On the real embedded Postgres; the process that forgets is a real ``stratamem forget``; the
LLM of a racing fold is the fake server holding its answer until the erasure is done.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from databases import own_database, user_rows
from fake_openai import FakeOpenAI, Hang
from sqlalchemy import text

from memory import Memory, Settings
from memory.llm import OpenAIChatModel
from memory.longterm.items import ItemWrite
from retrieval import MINILM_NAME, HashingEmbedder
from storage import ArchiveMarks, Database, SessionErasedError

REPO = Path(__file__).resolve().parents[2]
#: A bound for waits on things that happen within a second; reached only when a test fails.
WAIT_S = 60.0
SECRET = "My card PIN is 4711 and my secret word is SWORDFISH."
#: Every table that holds a user's rows, and its column naming the user.
USER_TABLES = (
    "sessions",
    "messages",
    "session_summaries",
    "jobs",
    "archive_marks",
    "cards",
    "card_terms",
    "card_stats",
    "card_term_counts",
    "store_items",
    "store_vectors",
    "store_terms",
    "agent_item_pops",
    "request_reports",
    "summary_versions",
)


def wait_until(condition: Callable[[], bool], what: str) -> None:
    """Wait (on an event, not a clock assertion) until ``condition`` holds."""
    tick = threading.Event()
    for _ in range(int(WAIT_S / 0.02)):
        if condition():
            return
        tick.wait(0.02)
    raise AssertionError(f"timed out waiting until {what}")


def rows_of(database: Database, user_id: str) -> dict[str, int]:
    """How many rows each table holds for the user (0 everywhere once forgotten)."""
    return user_rows(database, user_id, USER_TABLES)


def forget_in_another_process(database_url: str, user_id: str, *extra: str) -> str:
    """``stratamem forget --user ... --yes`` as its own process; what it printed."""
    environment = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("STRATAMEM_", "OPENAI_"))
    }
    environment["STRATAMEM_DATABASE_URL"] = database_url
    done = subprocess.run(
        [sys.executable, "-m", "memory.cli", "forget", "--user", user_id, "--yes", *extra],
        capture_output=True,
        text=True,
        env=environment,
        cwd=REPO,
        timeout=WAIT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def sent_text(messages: list[dict[str, Any]]) -> str:
    return json.dumps(messages, ensure_ascii=False)


@pytest.fixture
def app(database: Database) -> Memory:
    """The application's ``Memory``: its own window cache, inline, cards by the hashing fake."""
    settings = Settings(summary={"mode": "inline"})
    return Memory(database, settings, embedder=HashingEmbedder(name=MINILM_NAME))


@pytest.mark.slow
def test_a_forget_in_another_process_reaches_a_warm_window_and_the_pins(
    app: Memory, database_url: str, user_id: str
) -> None:
    app.record(
        user_id=user_id,
        session_id="s",
        messages=[
            {"role": "user", "content": SECRET},
            {"role": "assistant", "content": "Noted."},
            {"role": "user", "content": "Remember it."},
            {"role": "assistant", "content": "I will."},
        ],
    )
    app.pin(user_id=user_id, text="The secret word is SWORDFISH.")
    warm = app.prepare(user_id=user_id, session_id="s", input="What is my PIN?")
    assert "4711" in sent_text(warm.messages) and "SWORDFISH" in sent_text(warm.messages)

    said = forget_in_another_process(database_url, user_id)

    assert "5 messages" in said and "1 session" in said
    context = app.prepare(user_id=user_id, session_id="s", input="hello, new conversation")
    sent = sent_text(context.messages)
    assert "4711" not in sent and "SWORDFISH" not in sent
    assert context.messages[-1] == {"role": "user", "content": "hello, new conversation"}
    assert [m.payload for m in app.history(user_id=user_id, session_id="s")] == [
        {"role": "user", "content": "hello, new conversation"}
    ]


@pytest.mark.slow
def test_a_session_started_again_past_the_cached_seqs_is_read_as_it_is_now(
    app: Memory, database_url: str, user_id: str
) -> None:
    app.record(
        user_id=user_id,
        session_id="s",
        messages=[{"role": "user", "content": SECRET}, {"role": "assistant", "content": "Ok."}],
    )
    app.prepare(user_id=user_id, session_id="s", input="Remember it.")  # seqs 1-3 cached

    forget_in_another_process(database_url, user_id, "--session", "s")
    other = Memory(app._database, app.settings, embedder=HashingEmbedder(name=MINILM_NAME))
    for turn in range(3):  # the new conversation reaches seq 6, past the cached 3
        other.record(
            user_id=user_id,
            session_id="s",
            messages=[
                {"role": "user", "content": f"new {turn}"},
                {"role": "assistant", "content": f"answer {turn}"},
            ],
        )

    context = app.prepare(user_id=user_id, session_id="s")

    assert [m["content"] for m in context.messages] == [
        f"{said} {turn}" for turn in range(3) for said in ("new", "answer")
    ]


def test_forget_deletes_every_table_of_the_user_with_long_term_memory_off(
    app: Memory, database: Database, user_id: str
) -> None:
    app.record(
        user_id=user_id,
        session_id="s",
        messages=[
            {"role": "user", "content": "My SSN is 078-05-1120."},
            {"role": "assistant", "content": "Noted."},
        ],
    )
    app.prepare(user_id=user_id, session_id="s")
    app.kept_reports(user_id=user_id, session_id="s")  # the report written, not queued
    app.end_session(user_id=user_id, session_id="s")
    app.pin(user_id=user_id, text="SSN 078-05-1120.")
    app.items.write(
        [ItemWrite(user_id, ("memories",), "ssn", {"ssn": "078-05-1120"}, {"$": "SSN"})]
    )
    before = rows_of(database, user_id)
    assert before["cards"] >= 2 and before["archive_marks"] == 1 and before["card_terms"] > 0
    assert before["store_items"] == before["store_vectors"] == before["store_terms"] == 1
    assert before["request_reports"] == 1
    without_cards = Memory(database, Settings(cards={"enabled": False}))

    gone = without_cards.forget(user_id=user_id)

    assert rows_of(database, user_id) == dict.fromkeys(USER_TABLES, 0)
    assert gone.cards == before["cards"] and gone.card_terms == before["card_terms"]
    # An item's vectors and terms go with it (not counted apart).
    assert gone.by_table() == {
        table: before[table]
        for table in USER_TABLES
        if table not in ("card_stats", "card_term_counts", "store_vectors", "store_terms")
    }


@pytest.mark.slow
def test_the_command_forgets_cards_of_an_embedder_it_does_not_have(
    database: Database, database_url: str, user_id: str
) -> None:
    """The command names MiniLM by default; the cards were made by another embedder. Erasure
    needs no embedder, so it neither loads nor checks one."""
    with own_database(database, "erase") as other:
        made = Memory(other, Settings(summary={"mode": "inline"}), embedder=HashingEmbedder())
        made.pin(user_id=user_id, text="I am allergic to penicillin.")

        said = forget_in_another_process(other.url, user_id)

        assert "1 card" in said
        assert rows_of(other, user_id)["cards"] == 0


def test_a_reply_to_a_context_of_an_erased_session_is_not_stored(app: Memory, user_id: str) -> None:
    context = app.prepare(user_id=user_id, session_id="s", input=SECRET)
    app.forget(user_id=user_id)
    app.prepare(user_id=user_id, session_id="s", input="hello again")  # the session restarts

    with pytest.raises(SessionErasedError):
        app.record(
            user_id=user_id,
            session_id="s",
            messages=[{"role": "assistant", "content": "Your PIN 4711 is safe."}],
            reply_to=context,
        )

    assert [m.payload["content"] for m in app.history(user_id=user_id, session_id="s")] == [
        "hello again"
    ]
    fresh = app.prepare(user_id=user_id, session_id="s")
    reply = {"role": "assistant", "content": "Hello!"}
    assert app.record(user_id=user_id, session_id="s", messages=[reply], reply_to=fresh)


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


SMALL = {"context_window": 1_500, "max_output": 300}


def chat_model(server: FakeOpenAI) -> OpenAIChatModel:
    return OpenAIChatModel(base_url=server.base_url, api_key="test")


def fill(mem: Memory, user_id: str, turns: int) -> None:
    for index in range(turns):
        mem.record(
            user_id=user_id,
            session_id="s",
            messages=[
                {"role": "user", "content": f"Fact {index}: {SECRET}"},
                {"role": "assistant", "content": f"Noted fact {index}."},
            ],
        )


def test_a_forget_while_a_worker_fold_waits_for_the_llm_leaves_nothing_of_the_user(
    database: Database, server: FakeOpenAI, user_id: str
) -> None:
    fold = json.dumps(
        {
            "summary": "The user's PIN is 4711 and the secret word SWORDFISH.",
            "cards": [{"type": "fact", "text": "PIN 4711", "source": [1]}],
        }
    )
    server.script(Hang(fold))
    with own_database(database, "erase_fold") as own:
        settings = Settings(summary={"debounce_seconds": 0, "retries": 1}, **SMALL)
        mem = Memory(own, settings, chat=chat_model(server), embedder=HashingEmbedder())
        fill(mem, user_id, 30)  # past the trigger: a fold is queued
        worker = threading.Thread(target=mem.run_worker, kwargs={"until_idle": True})
        worker.start()
        wait_until(lambda: len(server.requests) == 1, "the fold asked the model")

        mem.forget(user_id=user_id)
        server.release()
        worker.join(WAIT_S)

        assert not worker.is_alive()
        assert rows_of(own, user_id) == dict.fromkeys(USER_TABLES, 0)
        # The user writes again at once: the new session is theirs alone.
        context = mem.prepare(user_id=user_id, session_id="s", input="hello, new conversation")
        assert "4711" not in sent_text(context.messages)
        assert context.messages == [{"role": "user", "content": "hello, new conversation"}]
        assert mem.summary(user_id=user_id, session_id="s") is None


def test_a_forget_while_an_inline_fold_waits_is_refused_to_the_fold(
    database: Database, server: FakeOpenAI, user_id: str
) -> None:
    """The fold's three writes (cards, archive mark, summary) each check the session: the one
    running when the erasure lands fails, and the fold stores nothing after it."""
    server.script(Hang("The user's PIN is 4711."))
    settings = Settings(summary={"mode": "inline", "retries": 1}, cards={"enabled": False}, **SMALL)
    mem = Memory(database, settings, chat=chat_model(server))
    writer = Memory(
        database, Settings(context_window=100_000), embedder=HashingEmbedder(name=MINILM_NAME)
    )
    fill(writer, user_id, 30)
    failures: list[BaseException] = []

    def consolidate() -> None:
        try:
            mem.consolidate(user_id=user_id, session_id="s")
        except BaseException as error:
            failures.append(error)

    folding = threading.Thread(target=consolidate)
    folding.start()
    wait_until(lambda: len(server.requests) == 1, "the fold asked the model")
    mem.forget(user_id=user_id)
    writer.record(user_id=user_id, session_id="s", messages=[{"role": "user", "content": "hi"}])
    server.release()
    folding.join(WAIT_S)

    assert [type(error) for error in failures] == [SessionErasedError]
    assert mem.summary(user_id=user_id, session_id="s") is None
    assert ArchiveMarks(database).get(user_id, "s") == 0
    assert rows_of(database, user_id)["messages"] == 1


def purge_statements() -> list[str]:
    """The statements of the purge block in docs/security.md (section "Erasure")."""
    guide = (REPO / "docs" / "security.md").read_text(encoding="utf-8")
    block = re.search(r"```sql\n(.*?)```", guide.split("## Erasure", 1)[1], re.S)
    assert block is not None, "the Erasure section of docs/security.md shows no sql block"
    lines = [line.split("--")[0].strip() for line in block.group(1).splitlines()]
    return [statement for statement in " ".join(lines).split(";") if statement.strip()]


def files_holding(folder: Path, secret: bytes) -> list[str]:
    return [
        str(path.relative_to(folder))
        for path in folder.rglob("*")
        if path.is_file() and secret in path.read_bytes()
    ]


def test_the_documented_purge_leaves_no_trace_in_the_server_files(fresh_data_dir: Path) -> None:
    secret = f"QUOKKA{uuid.uuid4().hex[:8].upper()}"
    with Memory.open(
        data_dir=fresh_data_dir, summary={"mode": "inline"}, cards={"embedder": "hashing"}
    ) as mem:
        for index in range(20):
            mem.record(
                user_id="u",
                session_id="s",
                messages=[
                    {"role": "user", "content": f"My code is {secret} ({index})."},
                    {"role": "assistant", "content": "Noted."},
                ],
            )
        mem.end_session(user_id="u", session_id="s")
        admin = mem._database.engine.execution_options(isolation_level="AUTOCOMMIT")
        with admin.connect() as connection:
            connection.execute(text("CHECKPOINT"))
        folder = fresh_data_dir / "pg"
        assert files_holding(folder, secret.encode())  # the table files and the WAL
        mem.forget(user_id="u")
        assert files_holding(folder, secret.encode())  # deleted, not yet overwritten

        with admin.connect() as connection:
            for statement in purge_statements():
                connection.execute(text(statement))

        assert files_holding(folder, secret.encode()) == []


def test_every_table_of_a_users_data_is_erased_counted_and_purged(database: Database) -> None:
    # A table added later with a user_id column must join erasure's tests and the purge in
    # docs/security.md (its rows would otherwise stay in the files after VACUUM of the others).
    # A user's proxy keys are access, not memory: forget leaves them (keys revoke ends them).
    with database.engine.connect() as connection:
        with_users = set(
            connection.execute(
                text(
                    "SELECT c.table_name FROM information_schema.columns AS c"
                    " JOIN information_schema.tables AS t USING (table_schema, table_name)"
                    " WHERE c.table_schema = current_schema() AND c.column_name = 'user_id'"
                    " AND t.table_type = 'BASE TABLE'"
                )
            ).scalars()
        ) - {"proxy_keys"}
    [vacuum] = [s for s in purge_statements() if s.strip().upper().startswith("VACUUM FULL")]
    purged = {name.strip() for name in vacuum.strip()[len("VACUUM FULL") :].split(",")}

    assert set(USER_TABLES) == with_users
    assert purged == with_users

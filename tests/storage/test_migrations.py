"""Tests of the migrations (the schema's only source): idempotent, atomic per migration."""

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, create_engine, inspect, text
from sqlalchemy.exc import ProgrammingError

from storage import (
    EMBEDDING_DIM,
    MIGRATIONS,
    Database,
    JobQueue,
    MessageStore,
    Migration,
    NewMessage,
    SummaryStore,
    migrate,
)


@pytest.fixture
def scratch_engine(database: Database) -> Iterator[Engine]:
    """An engine on a new, empty database of the embedded server, dropped afterwards."""
    name = f"scratch_{uuid.uuid4().hex}"
    admin = create_engine(database.url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f"CREATE DATABASE {name}"))
    engine = create_engine(database.engine.url.set(database=name))
    yield engine
    engine.dispose()
    with admin.connect() as connection:
        connection.execute(text(f"DROP DATABASE {name}"))
    admin.dispose()


def versions(engine: Engine) -> list[int]:
    with engine.connect() as connection:
        return list(
            connection.execute(text("SELECT version FROM schema_migrations ORDER BY 1")).scalars()
        )


def test_versions_are_ordered_and_unique() -> None:
    numbers = [m.version for m in MIGRATIONS]
    assert numbers == sorted(set(numbers))


ALL_VERSIONS = [m.version for m in MIGRATIONS]


def test_migrate_applies_everything_once(scratch_engine: Engine) -> None:
    assert migrate(scratch_engine) == ALL_VERSIONS
    assert migrate(scratch_engine) == []
    assert versions(scratch_engine) == ALL_VERSIONS


def test_failed_migration_leaves_nothing_behind(scratch_engine: Engine) -> None:
    broken = Migration(
        max(ALL_VERSIONS) + 1,
        "broken",
        ("CREATE TABLE half_done (id int)", "SELECT * FROM missing"),
    )

    with pytest.raises(ProgrammingError):
        migrate(scratch_engine, (*MIGRATIONS, broken))

    assert versions(scratch_engine) == ALL_VERSIONS
    assert not inspect(scratch_engine).has_table("half_done")


def test_opened_database_is_migrated(database: Database) -> None:
    assert versions(database.engine) == [m.version for m in MIGRATIONS]


def test_embedding_index_is_hnsw_cosine(database: Database) -> None:
    with database.engine.connect() as connection:
        definition = connection.execute(
            text("SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_cards_embedding_hnsw'")
        ).scalar_one()
        dimension = connection.execute(
            text(
                "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                "WHERE attrelid = 'cards'::regclass AND attname = 'embedding'"
            )
        ).scalar_one()

    assert "USING hnsw (embedding vector_cosine_ops)" in definition
    assert dimension == f"vector({EMBEDDING_DIM})"


def test_migration_4_carries_existing_sessions_over_to_their_users(
    scratch_engine: Engine,
) -> None:
    migrate(scratch_engine, MIGRATIONS[:3])
    with scratch_engine.begin() as connection:
        for statement in (
            "INSERT INTO sessions (id, user_id, last_seq) VALUES ('s1', 'alice', 2)",
            "INSERT INTO sessions (id, user_id, last_seq) VALUES ('s2', 'bob', 1)",
            """
            INSERT INTO messages (session_id, seq, role, payload, tokens, client_id, metadata)
            VALUES ('s1', 1, 'user', '{"role": "user", "content": "a"}', 1, 'c1', '{"k": 1}'),
                   ('s1', 2, 'assistant', '{"role": "assistant", "content": "b"}', 1, NULL,
                    DEFAULT),
                   ('s2', 1, 'user', '{"role": "user", "content": "c"}', 1, NULL, DEFAULT)
            """,
            """
            INSERT INTO session_summaries (session_id, content, kind, boundary_seq, covered,
                                           version)
            VALUES ('s1', 'the summary', 'llm', 1, 1, 3)
            """,
            "INSERT INTO jobs (kind, user_id, session_id) VALUES ('consolidate', 'alice', 's1')",
            """
            INSERT INTO cards (user_id, session_id, text, type, content_hash, embedding)
            VALUES ('alice', 's1', 'a fact', 'fact', 'h', array_fill(0, ARRAY[384])::vector)
            """,
        ):
            connection.execute(text(statement))

    assert migrate(scratch_engine, MIGRATIONS[:4]) == [4]
    migrate(scratch_engine)  # and the later ones, which the stores below expect

    database = Database(scratch_engine)
    messages = MessageStore(database)
    alice = messages.history("alice", "s1")
    assert [(m.seq, m.payload["content"], m.metadata) for m in alice] == [
        (1, "a", {"k": 1}),
        (2, "b", {}),
    ]
    assert alice[0].client_id == "c1"
    assert messages.history("bob", "s1") == []
    assert [m.payload["content"] for m in messages.history("bob", "s2")] == ["c"]
    summary = SummaryStore(database).get("alice", "s1")
    assert summary is not None and (summary.content, summary.version) == ("the summary", 3)
    # The carried-over session goes on where it was, and bob can now have his own "s1".
    assert (
        messages.append("alice", "s1", [NewMessage(payload={}, role="user", tokens=0)])[0].seq == 3
    )
    assert messages.append("bob", "s1", [NewMessage(payload={}, role="user", tokens=0)])[0].seq == 1
    job = JobQueue(database).claim("w", kinds=["consolidate"])
    assert job is not None and (job.user_id, job.session_id) == ("alice", "s1")

"""Versioned schema migrations, applied in order under a Postgres advisory lock."""

from dataclasses import dataclass

from sqlalchemy import Engine, text

__all__ = ["EMBEDDING_DIM", "MIGRATIONS", "Migration", "migrate"]

#: Dimension of card embeddings (all-MiniLM-L6-v2). Changing it needs a new migration.
EMBEDDING_DIM = 384

# Any fixed 64-bit key works; it only has to be the same in every process ("stratamem" in ASCII,
# truncated to 8 bytes so it fits a signed bigint).
_ADVISORY_LOCK_KEY = 0x7374726174616D65


@dataclass(frozen=True)
class Migration:
    """One schema change: a version number, a name, and the SQL statements that apply it."""

    version: int
    name: str
    statements: tuple[str, ...]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "sessions, messages and summaries",
        (
            """
            CREATE TABLE sessions (
                id text PRIMARY KEY,
                user_id text NOT NULL,
                last_seq bigint NOT NULL DEFAULT 0,
                created_at timestamptz NOT NULL DEFAULT now()
            )
            """,
            "CREATE INDEX ix_sessions_user_id ON sessions (user_id)",
            """
            CREATE TABLE messages (
                id bigserial PRIMARY KEY,
                session_id text NOT NULL REFERENCES sessions (id),
                seq bigint NOT NULL,
                role text NOT NULL,
                payload jsonb NOT NULL,
                tokens integer NOT NULL,
                client_id text,
                metadata jsonb NOT NULL DEFAULT '{}'::jsonb,
                created_at timestamptz NOT NULL DEFAULT now(),
                CONSTRAINT uq_messages_session_seq UNIQUE (session_id, seq)
            )
            """,
            """
            CREATE UNIQUE INDEX uq_messages_session_client ON messages (session_id, client_id)
            WHERE client_id IS NOT NULL
            """,
            """
            CREATE TABLE session_summaries (
                session_id text PRIMARY KEY REFERENCES sessions (id),
                content text NOT NULL,
                kind text NOT NULL,
                boundary_seq bigint NOT NULL,
                covered integer NOT NULL,
                version integer NOT NULL,
                updated_at timestamptz NOT NULL DEFAULT now(),
                CONSTRAINT ck_session_summaries_kind CHECK (kind IN ('llm', 'raw'))
            )
            """,
        ),
    ),
    Migration(
        2,
        "cards",
        (
            f"""
            CREATE TABLE cards (
                id bigserial PRIMARY KEY,
                user_id text NOT NULL,
                session_id text REFERENCES sessions (id),
                text text NOT NULL,
                type text NOT NULL,
                topic text,
                tags text[] NOT NULL DEFAULT '{{}}',
                source_message_ids bigint[] NOT NULL DEFAULT '{{}}',
                valid boolean NOT NULL DEFAULT true,
                superseded_by bigint REFERENCES cards (id),
                pinned boolean NOT NULL DEFAULT false,
                content_hash text NOT NULL,
                embedding vector({EMBEDDING_DIM}) NOT NULL,
                created_at timestamptz NOT NULL DEFAULT now(),
                CONSTRAINT uq_cards_user_content_hash UNIQUE (user_id, content_hash)
            )
            """,
            "CREATE INDEX ix_cards_user_id ON cards (user_id)",
            """
            CREATE INDEX ix_cards_embedding_hnsw ON cards
            USING hnsw (embedding vector_cosine_ops)
            """,
        ),
    ),
    Migration(
        3,
        "jobs",
        (
            """
            CREATE TABLE jobs (
                id bigserial PRIMARY KEY,
                kind text NOT NULL,
                user_id text NOT NULL,
                session_id text NOT NULL,
                status text NOT NULL DEFAULT 'pending',
                run_after timestamptz NOT NULL DEFAULT now(),
                attempts integer NOT NULL DEFAULT 0,
                claimed_by text,
                lease_until timestamptz,
                last_error text,
                created_at timestamptz NOT NULL DEFAULT now(),
                updated_at timestamptz NOT NULL DEFAULT now(),
                CONSTRAINT ck_jobs_status
                    CHECK (status IN ('pending', 'running', 'done', 'failed'))
            )
            """,
            # At most one pending job per (kind, session): enqueueing again only moves it later.
            """
            CREATE UNIQUE INDEX uq_jobs_pending_kind_session ON jobs (kind, session_id)
            WHERE status = 'pending'
            """,
            "CREATE INDEX ix_jobs_status_run_after ON jobs (status, run_after)",
        ),
    ),
    # Versions 4 and 5 are reserved for changes made on other branches at the same time.
    Migration(
        6,
        "job parameters",
        (
            # What a job needs to do the same work whichever worker runs it (budgets, ratios,
            # models): written by the process that queues it, read by the one that runs it.
            "ALTER TABLE jobs ADD COLUMN params jsonb NOT NULL DEFAULT '{}'::jsonb",
        ),
    ),
)

_BOOTSTRAP = (
    "CREATE EXTENSION IF NOT EXISTS vector",
    """
    CREATE TABLE IF NOT EXISTS schema_migrations (
        version integer PRIMARY KEY,
        name text NOT NULL,
        applied_at timestamptz NOT NULL DEFAULT now()
    )
    """,
)


def migrate(engine: Engine, migrations: tuple[Migration, ...] = MIGRATIONS) -> list[int]:
    """Create the vector extension and apply every migration not yet recorded.

    Each migration runs in its own transaction that first takes a transaction-level advisory
    lock, so processes opening the same database at once apply each migration exactly once and
    a failed migration leaves no half-applied schema behind. Safe to call any number of times.

    Args:
        engine: The engine of the database to migrate.
        migrations: The migrations in version order; the default is the schema of this package.

    Returns:
        The versions applied by this call, in order (empty when the schema was up to date).
    """
    applied: list[int] = []
    with engine.begin() as connection:
        # CREATE ... IF NOT EXISTS is not safe against a concurrent creator: take the lock too.
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _ADVISORY_LOCK_KEY})
        for statement in _BOOTSTRAP:
            connection.execute(text(statement))
    for migration in migrations:
        with engine.begin() as connection:
            connection.execute(
                text("SELECT pg_advisory_xact_lock(:key)"), {"key": _ADVISORY_LOCK_KEY}
            )
            done = connection.execute(
                text("SELECT 1 FROM schema_migrations WHERE version = :version"),
                {"version": migration.version},
            ).first()
            if done is not None:
                continue
            for statement in migration.statements:
                connection.execute(text(statement))
            connection.execute(
                text("INSERT INTO schema_migrations (version, name) VALUES (:version, :name)"),
                {"version": migration.version, "name": migration.name},
            )
            applied.append(migration.version)
    return applied

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
    Migration(
        5,
        "cards for long-term memory: times, validity, sources, keyword terms, embedding model",
        (
            # The cards table of migration 2 was never used; its shape (a foreign key to the
            # sessions' primary key, no times) does not fit cards, so it is replaced.
            "DROP TABLE cards",
            f"""
            CREATE TABLE cards (
                id bigserial PRIMARY KEY,
                user_id text NOT NULL,
                type text NOT NULL,
                text text NOT NULL,
                topic text,
                tags text[] NOT NULL DEFAULT '{{}}',
                session_id text,
                source_message_ids bigint[] NOT NULL DEFAULT '{{}}',
                source_client_ids text[] NOT NULL DEFAULT '{{}}',
                observed_at timestamptz NOT NULL DEFAULT now(),
                occurred_at timestamptz,
                valid_from timestamptz NOT NULL DEFAULT now(),
                valid_to timestamptz,
                superseded_by bigint,
                pinned boolean NOT NULL DEFAULT false,
                content_hash text NOT NULL,
                embedding vector({EMBEDDING_DIM}) NOT NULL,
                keyword_length integer NOT NULL,
                created_at timestamptz NOT NULL DEFAULT now(),
                CONSTRAINT uq_cards_user_content_hash UNIQUE (user_id, content_hash),
                CONSTRAINT ck_cards_type CHECK (
                    type IN ('fact', 'preference', 'task', 'event', 'profile', 'turn')
                )
            )
            """,
            "CREATE INDEX ix_cards_user_session ON cards (user_id, session_id)",
            "CREATE INDEX ix_cards_user_type ON cards (user_id, type)",
            "CREATE INDEX ix_cards_user_observed ON cards (user_id, observed_at)",
            "CREATE INDEX ix_cards_user_occurred ON cards (user_id, occurred_at)",
            "CREATE INDEX ix_cards_user_pinned ON cards (user_id) WHERE pinned",
            # HNSW cannot lead with user_id; it serves users with many cards (see CardStore).
            """
            CREATE INDEX ix_cards_embedding_hnsw ON cards
            USING hnsw (embedding vector_cosine_ops)
            """,
            # Keyword terms computed in Python (CJK bigrams, stems): one row per card and term,
            # user first, so BM25 statistics are per user and exact. The card's length is
            # repeated here so BM25 is scored from the index alone, before touching cards.
            """
            CREATE TABLE card_terms (
                user_id text NOT NULL,
                term text NOT NULL,
                card_id bigint NOT NULL,
                frequency integer NOT NULL,
                keyword_length integer NOT NULL,
                PRIMARY KEY (user_id, term, card_id) INCLUDE (frequency, keyword_length)
            )
            """,
            "CREATE INDEX ix_card_terms_user_card ON card_terms (user_id, card_id)",
            """
            CREATE TABLE card_stats (
                user_id text PRIMARY KEY,
                cards bigint NOT NULL,
                keyword_length bigint NOT NULL
            )
            """,
            """
            CREATE TABLE card_embedding_model (
                singleton boolean PRIMARY KEY DEFAULT true,
                name text NOT NULL,
                dimension integer NOT NULL,
                CONSTRAINT ck_card_embedding_model_singleton CHECK (singleton)
            )
            """,
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

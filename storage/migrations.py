"""Versioned schema migrations, applied in order under a Postgres advisory lock."""

from dataclasses import dataclass

from sqlalchemy import Engine, text

from storage.citus import distribute

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
        4,
        "sessions belong to users; payloads keep NULs",
        (
            # A session is now named by (user_id, session_id): two users may both have a
            # session "default". Foreign keys on the session id alone cannot survive that.
            "ALTER TABLE messages DROP CONSTRAINT messages_session_id_fkey",
            "ALTER TABLE session_summaries DROP CONSTRAINT session_summaries_session_id_fkey",
            # The cards table keeps its session_id column; only its foreign key goes (a card's
            # session is (cards.user_id, cards.session_id) from now on).
            "ALTER TABLE cards DROP CONSTRAINT cards_session_id_fkey",
            "ALTER TABLE sessions RENAME COLUMN id TO session_id",
            "ALTER TABLE sessions DROP CONSTRAINT sessions_pkey",
            "ALTER TABLE sessions ADD CONSTRAINT sessions_pkey PRIMARY KEY (user_id, session_id)",
            "DROP INDEX ix_sessions_user_id",  # the primary key leads with user_id now
            # Messages: every key leads with user_id, so the table can be distributed by user.
            "ALTER TABLE messages ADD COLUMN user_id text",
            """
            UPDATE messages SET user_id = sessions.user_id
            FROM sessions WHERE sessions.session_id = messages.session_id
            """,
            "ALTER TABLE messages ALTER COLUMN user_id SET NOT NULL",
            "ALTER TABLE messages DROP CONSTRAINT messages_pkey",
            "ALTER TABLE messages DROP CONSTRAINT uq_messages_session_seq",
            """
            ALTER TABLE messages
            ADD CONSTRAINT messages_pkey PRIMARY KEY (user_id, session_id, seq)
            """,
            "CREATE UNIQUE INDEX uq_messages_user_id_id ON messages (user_id, id)",
            "DROP INDEX uq_messages_session_client",
            """
            CREATE UNIQUE INDEX uq_messages_session_client
            ON messages (user_id, session_id, client_id) WHERE client_id IS NOT NULL
            """,
            """
            ALTER TABLE messages ADD CONSTRAINT fk_messages_session
            FOREIGN KEY (user_id, session_id) REFERENCES sessions (user_id, session_id)
            """,
            # jsonb cannot hold \u0000; json keeps the document's text as sent (see inputs.py).
            "ALTER TABLE messages ALTER COLUMN metadata DROP DEFAULT",
            """
            ALTER TABLE messages
            ALTER COLUMN payload TYPE json USING payload::json,
            ALTER COLUMN metadata TYPE json USING metadata::json
            """,
            "ALTER TABLE messages ALTER COLUMN metadata SET DEFAULT '{}'::json",
            # Summaries.
            "ALTER TABLE session_summaries ADD COLUMN user_id text",
            """
            UPDATE session_summaries SET user_id = sessions.user_id
            FROM sessions WHERE sessions.session_id = session_summaries.session_id
            """,
            "ALTER TABLE session_summaries ALTER COLUMN user_id SET NOT NULL",
            "ALTER TABLE session_summaries DROP CONSTRAINT session_summaries_pkey",
            """
            ALTER TABLE session_summaries
            ADD CONSTRAINT session_summaries_pkey PRIMARY KEY (user_id, session_id)
            """,
            """
            ALTER TABLE session_summaries ADD CONSTRAINT fk_session_summaries_session
            FOREIGN KEY (user_id, session_id) REFERENCES sessions (user_id, session_id)
            """,
            # Jobs already carried user_id; their keys now lead with it.
            "ALTER TABLE jobs DROP CONSTRAINT jobs_pkey",
            "ALTER TABLE jobs ADD CONSTRAINT jobs_pkey PRIMARY KEY (user_id, id)",
            "DROP INDEX uq_jobs_pending_kind_session",
            """
            CREATE UNIQUE INDEX uq_jobs_pending_kind_session ON jobs (user_id, session_id, kind)
            WHERE status = 'pending'
            """,
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
    Migration(
        6,
        "job parameters",
        (
            # What a job needs to do the same work whichever worker runs it (budgets, ratios,
            # models): written by the process that queues it, read by the one that runs it.
            "ALTER TABLE jobs ADD COLUMN params jsonb NOT NULL DEFAULT '{}'::jsonb",
        ),
    ),
    Migration(
        7,
        "archive marks",
        (
            # How far each session's messages were archived as cards: the next archive starts
            # after it, so a retried or repeated archive re-reads nothing it already stored.
            """
            CREATE TABLE archive_marks (
                user_id text NOT NULL,
                session_id text NOT NULL,
                archived_seq bigint NOT NULL,
                PRIMARY KEY (user_id, session_id)
            )
            """,
        ),
    ),
    Migration(
        8,
        "card subjects and attributes",
        (
            # What a card is about and which property it sets: a newer card with the same pair
            # supersedes the older one, so the writer looks up a user's valid cards by the pair.
            "ALTER TABLE cards ADD COLUMN subject text, ADD COLUMN attribute text",
            """
            CREATE INDEX ix_cards_user_subject_attribute ON cards (user_id, subject, attribute)
            WHERE valid_to IS NULL AND subject IS NOT NULL
            """,
        ),
    ),
    Migration(
        9,
        "card vectors covering index",
        (
            # The exact per-user vector scan reads every current card of the user: from the
            # heap it deforms 17 columns per row to reach the vector (and, for a card whose
            # text pushes the row past 2 kB, fetches the vector from TOAST). This index holds
            # the vector next to the user, so the scan is index-only (BENCHMARKS.md, "Card
            # search latency").
            """
            CREATE INDEX ix_cards_user_current_vectors ON cards (user_id)
            INCLUDE (id, embedding) WHERE valid_to IS NULL
            """,
        ),
    ),
    Migration(
        10,
        "card set versions",
        (
            # A process keeps a user's current card vectors in memory (storage.cards.vectors);
            # it knows its copy is fresh when the user's version is the one it loaded. Every
            # write that changes a user's current cards takes a new value from one sequence,
            # in the same transaction: values are never reused, not even after a user's
            # statistics row was deleted (forget) and made again.
            "CREATE SEQUENCE card_stats_version_seq",
            "ALTER TABLE card_stats ADD COLUMN version bigint NOT NULL "
            "DEFAULT nextval('card_stats_version_seq')",
            # A refresh after a write lists the user's current card ids: from this index it
            # reads a few pages, already in id order; from the vectors' index it read all
            # 2,500 pages of a 10,000-card user (14.6 ms at load 6, as much as the scan).
            "CREATE INDEX ix_cards_user_current_ids ON cards (user_id, id) WHERE valid_to IS NULL",
        ),
    ),
    # Version 11 was never used (it was set aside for a session generation that erasure did
    # not need in the end: storage.erasure compares message ids instead).
    Migration(
        12,
        "turn cards keyed by their message, sessions by last activity, finished jobs by age",
        (
            # The message a turn card archives: at most one turn card per message, whatever its
            # neighbours were when it was archived (a retry after a crash may see more of them).
            # Turn cards stored before this migration have none.
            "ALTER TABLE cards ADD COLUMN turn_message_id bigint",
            """
            CREATE UNIQUE INDEX uq_cards_user_turn_message ON cards (user_id, turn_message_id)
            WHERE turn_message_id IS NOT NULL
            """,
            # When the session last got a message, on the database clock (set by the statements
            # that append): the idle sweep reads only the sessions that went quiet since it
            # last looked, by this index, not every session.
            "ALTER TABLE sessions ADD COLUMN last_active_at timestamptz NOT NULL DEFAULT now()",
            """
            UPDATE sessions SET last_active_at = coalesce(
                (
                    SELECT m.created_at FROM messages AS m
                    WHERE m.user_id = sessions.user_id AND m.session_id = sessions.session_id
                      AND m.seq = sessions.last_seq
                ),
                sessions.created_at
            )
            """,
            "CREATE INDEX ix_sessions_last_active_at ON sessions (last_active_at)",
            # Finished jobs by the time they finished: the worker deletes them after a while.
            """
            CREATE INDEX ix_jobs_finished_updated_at ON jobs (updated_at)
            WHERE status IN ('done', 'failed')
            """,
        ),
    ),
    Migration(
        13,
        "proxy keys",
        (
            # The memory proxy's keys (storage.proxy_keys): only a key's SHA-256 is stored. A
            # key is bound to one user, or is an admin key (no user) that may name any user;
            # both columns say which, so a missing user id never makes an admin by mistake.
            # The operator's credentials, not user data: the table does not lead with
            # user_id, and ``forget`` of a user leaves it alone.
            """
            CREATE TABLE proxy_keys (
                id bigserial PRIMARY KEY,
                key_hash bytea NOT NULL,
                user_id text,
                admin boolean NOT NULL,
                label text,
                created_at timestamptz NOT NULL DEFAULT now(),
                revoked_at timestamptz,
                CONSTRAINT uq_proxy_keys_hash UNIQUE (key_hash),
                CONSTRAINT ck_proxy_keys_hash_length CHECK (octet_length(key_hash) = 32),
                CONSTRAINT ck_proxy_keys_owner CHECK ((user_id IS NULL) = admin)
            )
            """,
        ),
    ),
    Migration(
        14,
        "cards by source message",
        (
            # Recall marks a turn excerpt stale when its messages are the sources of a
            # superseded card (memory.longterm.validity): it asks which keyed cards were made
            # from the recalled excerpts' messages, once per request. Message ids are unique, so the
            # index finds the few cards of those messages; only keyed cards are indexed.
            """
            CREATE INDEX ix_cards_keyed_sources ON cards USING gin (source_message_ids)
            WHERE subject IS NOT NULL
            """,
        ),
    ),
    Migration(
        15,
        "keyword document frequencies",
        (
            # How many of a user's cards hold each keyword term, kept by every write of
            # card_terms in the same transaction (storage.cards.writes, storage.erasure,
            # storage.imports). The keyword search reads a query's few rows here to leave the
            # terms nearly every card holds out of its scan (storage.cards.search): counting
            # them from card_terms read every posting of those terms, 73,000 rows for one
            # query of a user of 11,000 cards (BENCHMARKS.md, "prepare with recall").
            """
            CREATE TABLE card_term_counts (
                user_id text NOT NULL,
                term text NOT NULL,
                cards bigint NOT NULL,
                PRIMARY KEY (user_id, term)
            )
            """,
            """
            INSERT INTO card_term_counts (user_id, term, cards)
            SELECT user_id, term, count(*) FROM card_terms GROUP BY user_id, term
            """,
            # The planner's statistics now, not after autovacuum: without them it read the
            # user's every count to find a query's few.
            "ANALYZE card_term_counts",
        ),
    ),
    Migration(
        17,
        "store items",
        (
            # Framework stores' items (LangGraph's BaseStore: ``storage.items``): a JSON value
            # under a namespace and a key, owned by a user like everything else, so ``forget``
            # deletes them and the table can be distributed by user. ``json``, not ``jsonb``:
            # a value keeps its NULs (``storage.inputs``). ``namespace_seq`` and ``id`` (one
            # sequence) order items as their namespaces, then the items, were first written.
            # ``texts`` are the indexed texts by path: an export re-embeds from them.
            """
            CREATE TABLE store_items (
                user_id text NOT NULL,
                namespace text[] NOT NULL,
                key text NOT NULL,
                id bigint NOT NULL,
                namespace_seq bigint NOT NULL,
                value json NOT NULL,
                texts json NOT NULL DEFAULT '{}'::json,
                keyword_length integer NOT NULL DEFAULT 0,
                created_at timestamptz NOT NULL DEFAULT now(),
                updated_at timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (user_id, namespace, key),
                CONSTRAINT uq_store_items_user_id UNIQUE (user_id, id)
            )
            """,
            "CREATE SEQUENCE store_items_id_seq",
            # A page of a search without a query, in the store's order, from the index.
            "CREATE INDEX ix_store_items_user_order ON store_items (user_id, namespace_seq, id)",
            # One vector per indexed text of an item (a field, or each element of a list).
            f"""
            CREATE TABLE store_vectors (
                user_id text NOT NULL,
                item_id bigint NOT NULL,
                path text NOT NULL,
                embedding vector({EMBEDDING_DIM}) NOT NULL,
                PRIMARY KEY (user_id, item_id, path),
                CONSTRAINT fk_store_vectors_item FOREIGN KEY (user_id, item_id)
                    REFERENCES store_items (user_id, id) ON DELETE CASCADE
            )
            """,
            # The keyword terms of an item's indexed texts (``retrieval.analyze``), for BM25.
            """
            CREATE TABLE store_terms (
                user_id text NOT NULL,
                item_id bigint NOT NULL,
                term text NOT NULL,
                frequency integer NOT NULL,
                PRIMARY KEY (user_id, item_id, term),
                CONSTRAINT fk_store_terms_item FOREIGN KEY (user_id, item_id)
                    REFERENCES store_items (user_id, id) ON DELETE CASCADE
            )
            """,
        ),
    ),
    Migration(
        18,
        "agent item pops",
        (
            # An agent framework's session keeps its items whole in its messages' metadata
            # (storage.agent_items); messages are append-only, so an item taken back (the
            # Agents SDK's ``pop_item``) is marked here. Keyed by user first; erased with its
            # message (and listed in storage.erasure, for the count).
            """
            CREATE TABLE agent_item_pops (
                user_id text NOT NULL,
                session_id text NOT NULL,
                message_id bigint NOT NULL,
                item_index integer NOT NULL,
                popped_at timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (user_id, session_id, message_id, item_index),
                CONSTRAINT fk_agent_item_pops_message FOREIGN KEY (user_id, message_id)
                    REFERENCES messages (user_id, id) ON DELETE CASCADE
            )
            """,
        ),
    ),
    Migration(
        19,
        "kept request reports and previous summary versions",
        (
            # Each prepare's report, kept for the inspector page (storage.reports): written off
            # the request path, at most ``reports.keep`` per session. The token columns are the
            # chart's (read without parsing the report); the report itself is ``json``, not
            # ``jsonb``: a recall query holds the user's words, NUL characters included.
            """
            CREATE TABLE request_reports (
                user_id text NOT NULL,
                session_id text NOT NULL,
                id bigserial,
                prepared_at timestamptz NOT NULL,
                newest_seq bigint NOT NULL,
                newest_id bigint NOT NULL,
                budget integer NOT NULL,
                system_tokens integer NOT NULL,
                summary_tokens integer NOT NULL,
                memories_tokens integer NOT NULL,
                window_tokens integer NOT NULL,
                input_tokens integer NOT NULL,
                total_tokens integer NOT NULL,
                dropped integer NOT NULL,
                report json NOT NULL,
                PRIMARY KEY (user_id, session_id, id)
            )
            """,
            # The versions a session's summary had before its current one (storage.summaries):
            # copied in the transaction that replaces them, the newest few kept per session.
            """
            CREATE TABLE summary_versions (
                user_id text NOT NULL,
                session_id text NOT NULL,
                version integer NOT NULL,
                content text NOT NULL,
                kind text NOT NULL,
                boundary_seq bigint NOT NULL,
                covered integer NOT NULL,
                updated_at timestamptz NOT NULL,
                replaced_at timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (user_id, session_id, version)
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
    # On a Citus coordinator the tables are then distributed by user (nothing happens on a
    # database without Citus): see storage.citus.
    distribute(engine, _ADVISORY_LOCK_KEY)
    return applied

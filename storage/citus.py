"""Distributing the schema on a Citus cluster: every user's data on one shard.

``storage.migrations.migrate`` calls ``distribute`` after the migrations; it does nothing on a
database without the ``citus`` extension (the embedded server, a plain Postgres), so the
single-node schema stays exactly as the migrations make it. On a Citus coordinator it is a
step of its own, applied once and again after any new migration (it skips what is done):

- Per-user tables are distributed by ``user_id`` and co-located with ``sessions``: a user's
  messages, sessions, summaries, cards, terms and marks are on one shard group, so every
  statement that filters by one ``user_id`` is a single-shard router query, and the foreign
  keys (all of which include ``user_id``) hold within a shard.
- Citus requires the distribution column in every primary key and unique constraint. Where
  the single-node schema lacks it (``cards``: its key is ``id`` alone) the key is widened to
  ``(user_id, id)`` here. ``id`` stays unique (it comes from one sequence on the coordinator),
  so no statement behaves differently.
- Tables that are not per user are reference tables, copied to every node: the embedding
  model's single row and the proxy's keys (an admin key has no user, and a key is looked up by
  its hash before its user is known).
- ``jobs`` and ``schema_migrations`` stay plain tables on the coordinator. A worker claims the
  next due job of any user with ``FOR UPDATE SKIP LOCKED``, which Citus runs only on one
  shard: on a coordinator-local table the claim works exactly as on one server. The queue
  holds a row per pending session job, not per message, so one node carries it at any scale
  (docs/scaling.md).
"""

from sqlalchemy import Connection, Engine, text

__all__ = ["DISTRIBUTED", "LOCAL", "REFERENCE", "distribute", "is_citus"]

#: Per-user tables, in an order in which each foreign key's target is distributed first.
DISTRIBUTED = (
    "sessions",
    "messages",
    "session_summaries",
    "summary_versions",
    "cards",
    "card_terms",
    "card_stats",
    "card_term_counts",
    "archive_marks",
    "store_items",
    "store_vectors",
    "store_terms",
    "agent_item_pops",
    "request_reports",
)
#: Tables copied to every node.
REFERENCE = ("card_embedding_model", "proxy_keys")
#: Tables left on the coordinator alone.
LOCAL = ("schema_migrations", "jobs")

# Constraints the single-node schema has without user_id, and what takes their place.
_WIDENED = {
    "cards": (
        "ALTER TABLE cards DROP CONSTRAINT cards_pkey",
        "ALTER TABLE cards ADD CONSTRAINT cards_pkey PRIMARY KEY (user_id, id)",
    ),
}


def is_citus(connection: Connection) -> bool:
    """Whether the database is a Citus node (the ``citus`` extension is installed)."""
    found = connection.execute(text("SELECT 1 FROM pg_extension WHERE extname = 'citus'"))
    return found.first() is not None


def distribute(engine: Engine, lock_key: int) -> list[str]:
    """Distribute the tables not yet distributed, when the database is a Citus coordinator.

    Each table in its own transaction under the advisory lock ``lock_key`` (the migrations'
    own, so a concurrent process's migration and distribution wait for each other), so a
    failure leaves every table either as it was or distributed, and running again finishes
    the rest.

    Returns:
        The tables distributed or made reference tables by this call (empty on a database
        without Citus, and when every table already is).
    """
    with engine.connect() as connection:
        if not is_citus(connection):
            return []
    changed: list[str] = []
    for table in (*REFERENCE, *DISTRIBUTED):
        with engine.begin() as connection:
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": lock_key})
            done = connection.execute(
                text("SELECT 1 FROM pg_dist_partition WHERE logicalrelid = CAST(:t AS regclass)"),
                {"t": table},
            ).first()
            if done is not None:
                continue
            if table in REFERENCE:
                connection.execute(text("SELECT create_reference_table(:t)"), {"t": table})
            else:
                for statement in _WIDENED.get(table, ()):
                    connection.execute(text(statement))
                connection.execute(
                    text("SELECT create_distributed_table(:t, 'user_id', colocate_with => :with)"),
                    {"t": table, "with": "default" if table == "sessions" else "sessions"},
                )
            changed.append(table)
    return changed

"""Where a user's rows are: the nodes holding each table's shard for the user."""

from __future__ import annotations

from sqlalchemy import text

from storage import Database

# Every per-user table that the workload below writes.
WRITTEN = ("sessions", "messages", "cards", "card_terms", "card_stats", "request_reports")


def placements(database: Database, user_id: str) -> dict[str, set[int]]:
    """The nodes (by group) holding the shard of each table that has rows of the user."""
    placed: dict[str, set[int]] = {}
    with database.engine.connect() as connection:
        for table in WRITTEN:
            stored = connection.scalar(
                text(f"SELECT count(*) FROM {table} WHERE user_id = :u"), {"u": user_id}
            )
            if not stored:
                continue
            placed[table] = set(
                connection.scalars(
                    text(
                        "SELECT p.groupid FROM pg_dist_placement AS p "
                        "WHERE p.shardid = get_shard_id_for_distribution_column("
                        "  CAST(:t AS regclass), CAST(:u AS text))"
                    ),
                    {"t": table, "u": user_id},
                )
            )
    return placed

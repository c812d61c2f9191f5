"""Every statement of a user's requests is a single-shard router query on Citus.

Every statement that ``prepare`` (short-term and with recall), ``record``, ``search``,
``pin``, ``forget`` and the worker's per-session jobs sent is captured from libpq's trace of
the pool's connections (``statements.statements_sent``: nothing listed by hand, so a new
statement cannot slip by) and planned again by the coordinator with ``EXPLAIN`` and the
parameters it was sent with. A statement that Citus plans with more than one task (it would
run on every shard: a missing ``user_id`` filter) fails the test, named.

What one task means here. A statement on one user's tables is a router query: one task. A
statement with data-modifying CTEs or an ``INSERT ... SELECT`` from parameters (the append of
``prepare`` and ``record``, a card's terms) is run by Citus in steps: each step that reads a
table is a query with its task count in the plan (all 1: the user's shard), and the rows the
statement inserts are computed on the coordinator from the parameters ("pull to coordinator")
and sent to the shard of their ``user_id``, one user's. Such a step reads no table, so it can
fan out to nothing.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from sqlalchemy import text
from statements import Plan, conninfo, explain, statements_sent

from memory import Memory, Settings
from storage import Database
from storage.citus import DISTRIBUTED, LOCAL, REFERENCE

# What spans users by design, off the request path: the worker's idle sweep (one indexed
# range of sessions by last activity, on every shard, at most once a minute per worker).
_SPANS_USERS = ("FROM sessions AS s LEFT JOIN archive_marks AS a",)


def _settings() -> Settings:
    return Settings(
        context_window=1_200,
        max_output=100,
        cards={"embedder": "hashing", "debounce_seconds": 0},
        summary={"debounce_seconds": 0},
    )


def _fanned_out(plans: list[Plan]) -> list[str]:
    """The statements planned on more than one shard (but those that span users by design),
    and those whose reads Citus did not plan as tasks."""
    wrong = []
    for plan in plans:
        query = " ".join(plan.sent.query.split())
        spans = any(marker in query for marker in _SPANS_USERS)
        if any(count != 1 for count in plan.task_counts) and not spans:
            wrong.append(f"{plan.task_counts} tasks: {query[:300]}")
        if not plan.task_counts and plan.relations - set(LOCAL):
            wrong.append(f"reads {sorted(plan.relations)} without a task: {query[:300]}")
    return wrong


def test_every_table_is_placed(citus_database: Database) -> None:
    with citus_database.engine.connect() as connection:
        tables = set(
            connection.scalars(text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'"))
        )
        placed = dict(
            connection.execute(
                text(
                    "SELECT logicalrelid::text, partmethod FROM pg_dist_partition "
                    "WHERE logicalrelid::text = ANY(:tables)"
                ),
                {"tables": sorted(tables)},
            ).all()
        )
    # A table a new migration adds must be placed in storage.citus: else it stays on the
    # coordinator alone and every statement on it runs there.
    assert tables == set(DISTRIBUTED) | set(REFERENCE) | set(LOCAL)
    assert {t for t, method in placed.items() if method == "h"} == set(DISTRIBUTED)
    assert {t for t, method in placed.items() if method == "n"} == set(REFERENCE)


def test_a_users_requests_run_on_one_shard(
    citus_database: Database, citus_url: str, tmp_path: Path
) -> None:
    user, other = f"u-{uuid.uuid4()}", f"u-{uuid.uuid4()}"
    mem = Memory(citus_database, _settings())
    with statements_sent(citus_database.engine, tmp_path) as sent:
        for turn in range(6):
            mem.prepare(user_id=user, session_id="s1", input=f"I moved to Lisbon in May {turn}.")
            mem.record(
                user_id=user,
                session_id="s1",
                messages=[{"role": "assistant", "content": f"Noted, Lisbon {turn}. " * 20}],
            )
        run = mem.run_worker(until_idle=True)
        folded = mem.summary(user_id=user, session_id="s1")
        recalled = mem.prepare(user_id=user, session_id="s2", input="Where did I move?")
        mem.search(user_id=user, query="Lisbon")
        pinned = mem.pin(user_id=user, text="Always answer in Portuguese.")
        mem.pins(user_id=user)
        mem.unpin(user_id=user, card_id=pinned.id)
        mem.kept_reports(user_id=user, session_id="s2")
        mem.forget(user_id=user, card_id=pinned.id)
        mem.forget(user_id=user, session_id="s1")
        mem.prepare(user_id=other, session_id="s1", input="Hello")
        mem.forget(user_id=other)
    # The workload did what it is meant to exercise: cards made by the worker and recalled.
    assert run.failures == 0 and run.outcomes
    assert folded is not None  # a fold ran
    assert recalled.report.recall is not None and recalled.report.recall.cards
    plans = explain(conninfo(citus_url), sent)
    assert len(plans) > 50
    assert _fanned_out(plans) == []
    # Not vacuous: the plans are Citus's (router queries), and the one sweep spans users.
    assert sum(plan.task_counts == [1] for plan in plans) > 50
    assert [p for p in plans if max(p.task_counts or [0]) > 1], "the idle sweep was not planned"

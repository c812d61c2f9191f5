"""Kept reports and kept summary versions (migration 19): stored, bounded, read back newest
first, never stored for a session erased since, and erased with the user."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import event, text
from storage_samples import user

from storage import Database, MessageStore, StorageError, StoredMessage, SummaryStore, erase
from storage.reports import NewReport, ReportStore


def report_of(message: StoredMessage, total: int, **extra: Any) -> NewReport:
    """A report assembled up to ``message`` whose layers add up to ``total``."""
    data: dict[str, Any] = {
        "budget": 1_000,
        "tokens": {
            "system": 10,
            "summary": 20,
            "memories": 30,
            "window": total - 70,
            "input": 10,
            "total": total,
        },
        "dropped": [{"layer": "window", "detail": "messages 1-2", "tokens": 5, "reason": "r"}],
        **extra,
    }
    return NewReport(
        user_id=message.user_id,
        session_id=message.session_id,
        prepared_at=datetime.now(UTC),
        newest_seq=message.seq,
        newest_id=message.id,
        report=data,
    )


@pytest.fixture
def reports(database: Database) -> ReportStore:
    return ReportStore(database)


@pytest.fixture
def stored(database: Database, user_id: str, session_id: str) -> list[StoredMessage]:
    return MessageStore(database).append(user_id, session_id, [user(f"m{n}") for n in range(5)])


def test_reports_are_read_back_newest_first_and_charted_oldest_first(
    reports: ReportStore, stored: list[StoredMessage], user_id: str, session_id: str
) -> None:
    kept = reports.keep([report_of(stored[n], 100 + n) for n in range(5)], per_session=10)

    latest = reports.latest(user_id, session_id, limit=3)
    older = reports.latest(user_id, session_id, limit=10, before=latest[-1].id)
    chart = reports.tokens(user_id, session_id, limit=10)

    assert kept == 5
    assert [r.total for r in latest] == [104, 103, 102]
    assert [r.total for r in older] == [101, 100]
    assert [r.total for r in chart] == [100, 101, 102, 103, 104]
    assert (latest[0].window, latest[0].dropped, latest[0].newest_seq) == (34, 1, 5)
    assert latest[0].report["dropped"][0]["detail"] == "messages 1-2"


def test_each_session_keeps_its_newest_reports_only(
    reports: ReportStore,
    database: Database,
    stored: list[StoredMessage],
    user_id: str,
    session_id: str,
) -> None:
    [other] = MessageStore(database).append(user_id, "other", [user("x")])
    reports.keep([report_of(other, 500)], per_session=2)

    for n in range(5):
        reports.keep([report_of(stored[n], 100 + n)], per_session=2)

    assert [r.total for r in reports.latest(user_id, session_id, limit=10)] == [104, 103]
    assert reports.count(user_id, session_id) == 2
    assert [r.total for r in reports.latest(user_id, "other", limit=10)] == [500]


def test_a_report_of_a_session_erased_since_is_not_stored(
    reports: ReportStore,
    database: Database,
    stored: list[StoredMessage],
    user_id: str,
    session_id: str,
) -> None:
    late = report_of(stored[-1], 100)
    erase(database, user_id, session_id=session_id)
    # The session starts again under the same name: its message 5 is another message.
    again = MessageStore(database).append(user_id, session_id, [user(f"n{n}") for n in range(5)])

    kept = reports.keep([late, report_of(again[-1], 200)], per_session=10)

    assert kept == 1
    assert [r.total for r in reports.latest(user_id, session_id, limit=10)] == [200]


def test_keeping_runs_no_statement_through_sqlalchemy_and_stores_every_column(
    reports: ReportStore,
    database: Database,
    stored: list[StoredMessage],
    user_id: str,
    session_id: str,
) -> None:
    """The writer keeps a report after every request: its statements go to the driver's
    connection (``storage.driver``), each column as SQLAlchemy's execution stored it."""
    report = report_of(stored[2], 321, recall={"query": "über 咖啡 \u2603"})
    executed: list[str] = []

    def seen(*args: Any) -> None:
        executed.append(args[2])

    event.listen(database.engine, "before_cursor_execute", seen)
    try:
        kept = reports.keep([report], per_session=10)
    finally:
        event.remove(database.engine, "before_cursor_execute", seen)
    with database.reading() as connection:
        row = connection.execute(
            text(
                "SELECT prepared_at, newest_seq, newest_id, budget, system_tokens, "
                "summary_tokens, memories_tokens, window_tokens, input_tokens, total_tokens, "
                "dropped, report::text FROM request_reports "
                "WHERE user_id = :user_id AND session_id = :session_id"
            ),
            {"user_id": user_id, "session_id": session_id},
        ).one()

    assert (kept, executed) == (1, [])
    assert tuple(row) == (
        report.prepared_at, 3, stored[2].id, 1_000, 10, 20, 30, 251, 10, 321, 1,
        json.dumps(report.report, ensure_ascii=True, separators=(",", ":")),
    )  # fmt: skip


def test_a_batch_the_database_refuses_stores_none_of_it_and_leaves_the_connection_usable(
    reports: ReportStore, stored: list[StoredMessage], user_id: str, session_id: str
) -> None:
    too_big = report_of(stored[1], 100, budget=2**40)  # past the integer column

    with pytest.raises(StorageError):
        reports.keep([report_of(stored[0], 100), too_big], per_session=10)
    kept = reports.keep([report_of(stored[2], 200)], per_session=10)

    assert kept == 1
    assert [r.total for r in reports.latest(user_id, session_id, limit=10)] == [200]


def test_a_query_with_a_nul_character_is_kept_as_said(
    reports: ReportStore, stored: list[StoredMessage], user_id: str, session_id: str
) -> None:
    query = "what about\x00 the <script> \u2603?"
    reports.keep([report_of(stored[0], 100, recall={"query": query})], per_session=10)

    [kept] = reports.latest(user_id, session_id, limit=1)

    assert kept.report["recall"]["query"] == query


def test_erasing_the_user_deletes_reports_and_summary_versions_and_counts_them(
    reports: ReportStore,
    database: Database,
    stored: list[StoredMessage],
    user_id: str,
    session_id: str,
) -> None:
    reports.keep([report_of(stored[n], 100 + n) for n in range(3)], per_session=10)
    summaries = SummaryStore(database)
    for version in range(3):
        summaries.save(
            user_id,
            session_id,
            content=f"summary {version + 1}",
            kind="raw",
            boundary=stored[version],
            covered=version + 1,
            expected_version=version,
        )

    gone = erase(database, user_id)

    assert (gone.reports, gone.summary_versions, gone.summaries) == (3, 2, 1)
    assert gone.by_table()["request_reports"] == 3
    assert reports.latest(user_id, session_id, limit=10) == []
    assert summaries.versions(user_id, session_id) == []


def test_a_replaced_summary_version_is_kept_and_the_oldest_go(
    database: Database, stored: list[StoredMessage], user_id: str, session_id: str
) -> None:
    summaries = SummaryStore(database, keep_versions=2)
    for version in range(4):
        saved = summaries.save(
            user_id,
            session_id,
            content=f"summary {version + 1}",
            kind="llm",
            boundary=stored[version],
            covered=version + 1,
            expected_version=version,
        )
        assert saved is not None
    stale = summaries.save(
        user_id,
        session_id,
        content="a writer that lost the race",
        kind="llm",
        boundary=stored[4],
        covered=5,
        expected_version=2,
    )

    kept = summaries.versions(user_id, session_id)
    current = summaries.get(user_id, session_id)

    assert stale is None
    assert current is not None and (current.version, current.content) == (4, "summary 4")
    assert [(v.version, v.content, v.boundary_seq) for v in kept] == [
        (3, "summary 3", 3),
        (2, "summary 2", 2),
    ]
    assert all(v.replaced_at >= v.updated_at for v in kept)

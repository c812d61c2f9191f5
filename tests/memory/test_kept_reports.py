"""Every ``prepare`` keeps its report, off the request path, bounded per session; the setting
turns it off; ``forget`` takes them; what cannot be kept is counted, logged without content,
and never holds a request up."""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import replace

import pytest
from sqlalchemy import text

from memory import ConfigurationError, Memory, Settings
from memory.context.report import ContextReport, LayerTokens, MessageRef
from memory.session.kept_reports import ReportKeeper
from memory.settings import ReportSettings
from retrieval import MINILM_NAME, HashingEmbedder
from storage import Database
from storage.reports import ReportStore


def memory(database: Database, **settings: object) -> Memory:
    return Memory(
        database,
        Settings(summary={"mode": "inline"}, cards={"embedder": "hashing"}, **settings),
        embedder=HashingEmbedder(name=MINILM_NAME),
    )


def test_each_prepare_keeps_its_report_newest_first(database: Database, user_id: str) -> None:
    mem = memory(database)
    contexts = [
        mem.prepare(user_id=user_id, session_id="s", input=f"question {n}", system="Be brief.")
        for n in range(3)
    ]

    kept = mem.kept_reports(user_id=user_id, session_id="s")

    assert [k.newest_seq for k in kept] == [3, 2, 1]
    newest = contexts[-1].report
    assert kept[0].report == newest.to_dict()
    assert (kept[0].system, kept[0].input, kept[0].total, kept[0].budget) == (
        newest.tokens.system,
        newest.tokens.input,
        newest.tokens.total,
        newest.budget,
    )


def test_the_setting_turns_keeping_off(database: Database, user_id: str) -> None:
    mem = memory(database, reports={"enabled": False})
    mem.prepare(user_id=user_id, session_id="s", input="hello")

    assert mem.kept_reports(user_id=user_id, session_id="s") == []


def test_a_session_keeps_its_newest_reports_only(database: Database, user_id: str) -> None:
    mem = memory(database, reports={"keep": 2})
    for n in range(5):
        mem.prepare(user_id=user_id, session_id="s", input=f"question {n}")

    kept = mem.kept_reports(user_id=user_id, session_id="s", limit=10)

    assert [k.newest_seq for k in kept] == [5, 4]


def test_forget_takes_the_kept_reports_too(database: Database, user_id: str) -> None:
    mem = memory(database)
    for n in range(3):
        mem.prepare(user_id=user_id, session_id="s", input=f"my secret is {n}")
    assert len(mem.kept_reports(user_id=user_id, session_id="s")) == 3

    gone = mem.forget(user_id=user_id)

    assert gone.reports == 3
    assert mem.kept_reports(user_id=user_id, session_id="s") == []


def test_close_writes_what_is_still_queued(database_url: str, user_id: str) -> None:
    with Database.open(database_url) as opened:
        mem = memory(opened)
        for n in range(20):
            mem.prepare(user_id=user_id, session_id="s", input=f"question {n}")
        mem.close()
    with Database.open(database_url) as reading:
        assert ReportStore(reading).count(user_id, "s") == 20


def report_at(seq: int, message_id: int) -> ContextReport:
    return ContextReport(
        budget=100,
        tokens=LayerTokens(system=1, summary=0, memories=0, window=0, input=5, total=9),
        dropped=(),
        cut_tool_results=(),
        summary=None,
        newest=MessageRef(seq, message_id),
    )


def test_a_full_queue_leaves_reports_unkept_without_waiting(
    database: Database, user_id: str
) -> None:
    """The writer is held (the session locked by an erasure that has not finished): the
    requests go on, and what the queue cannot hold is counted."""
    mem = memory(database)
    [stored] = mem.record(
        user_id=user_id, session_id="s", messages=[{"role": "user", "content": "hi"}]
    )
    keeper = ReportKeeper(ReportStore(database), ReportSettings(queue=1))
    holding, release = threading.Event(), threading.Event()

    def hold_the_session() -> None:
        with database.engine.begin() as connection:
            connection.execute(
                text("SELECT 1 FROM sessions WHERE user_id = :u FOR UPDATE"), {"u": user_id}
            )
            holding.set()
            release.wait(60)

    holder = threading.Thread(target=hold_the_session)
    holder.start()
    assert holding.wait(60)
    for _ in range(4):
        keeper.keep(user_id, "s", report_at(stored.seq, stored.id))  # returns at once
    unkept_while_held = keeper.unkept
    release.set()
    holder.join()
    keeper.flush()

    assert unkept_while_held >= 2  # at most one written, one queued
    assert keeper.unkept == unkept_while_held
    assert ReportStore(database).count(user_id, "s") == 4 - keeper.unkept
    keeper.close()


def test_a_batch_the_database_refuses_is_counted_and_logged_without_content(
    database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    keeper = ReportKeeper(ReportStore(database), ReportSettings())
    secret = "my PIN is 4711"
    bad_user = "\x00" + secret  # an id storage refuses

    with caplog.at_level(logging.WARNING, logger="memory.session.kept_reports"):
        keeper.keep(bad_user, secret, report_at(1, 1))
        keeper.flush()

    assert keeper.unkept == 1
    assert "could not keep 1 request report" in caplog.text
    assert secret not in caplog.text
    keeper.close()


def test_after_close_reports_are_ignored(database: Database) -> None:
    keeper = ReportKeeper(ReportStore(database), ReportSettings())
    keeper.close()
    user_id = f"user-{uuid.uuid4()}"

    keeper.keep(user_id, "s", report_at(1, 1))
    keeper.flush()

    assert ReportStore(database).count(user_id, "s") == 0 and keeper.unkept == 0


def test_a_report_that_cannot_be_written_ends_no_keeping(database: Database, user_id: str) -> None:
    """A report that is no JSON (a bug) ends its writer thread: it and what was queued are
    counted unkept, a flush returns at once, and the next report is written by a new thread."""
    mem = memory(database)
    [stored] = mem.record(
        user_id=user_id, session_id="s", messages=[{"role": "user", "content": "hi"}]
    )
    keeper = ReportKeeper(ReportStore(database), ReportSettings())
    broken = replace(report_at(stored.seq, stored.id), summary=object())  # type: ignore[arg-type]
    failures: list[type[BaseException]] = []
    previous = threading.excepthook
    threading.excepthook = lambda args: failures.append(args.exc_type)
    try:
        keeper.keep(user_id, "s", broken)
        keeper.flush()
        unkept_after_the_bug = keeper.unkept
        keeper.keep(user_id, "s", report_at(stored.seq, stored.id))
        keeper.flush()
    finally:
        threading.excepthook = previous
        keeper.close()

    assert unkept_after_the_bug == 1 and keeper.unkept == 1 and len(failures) == 1
    assert ReportStore(database).count(user_id, "s") == 1


@pytest.mark.parametrize("bad", [{"keep": 0}, {"queue": -1}, {"kept": 5}])
def test_an_impossible_reports_setting_is_a_configuration_error_naming_it(
    bad: dict[str, int],
) -> None:
    with pytest.raises(ConfigurationError, match=f"reports.*{next(iter(bad))}"):
        Settings(reports=bad)

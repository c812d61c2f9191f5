"""Tests of SummaryStore: compare-and-set, boundaries that only move forward, ownership."""

import threading
import uuid
from collections.abc import Callable

import pytest
from storage_samples import user

from storage import (
    Database,
    InvalidInputError,
    MessageStore,
    SessionErasedError,
    StoredMessage,
    SummaryRecord,
    SummaryStore,
)

At = Callable[[str, str, int], StoredMessage]


@pytest.fixture
def summaries(database: Database) -> SummaryStore:
    return SummaryStore(database)


@pytest.fixture
def at(database: Database) -> At:
    """The stored message of a session by seq: what a summary's boundary is given as."""

    def find(user_id: str, session_id: str, seq: int) -> StoredMessage:
        [message] = MessageStore(database).between(user_id, session_id, seq - 1, seq)
        return message

    return find


@pytest.fixture
def session_with_messages(database: Database, user_id: str, session_id: str) -> str:
    MessageStore(database).append(user_id, session_id, [user(str(n)) for n in range(10)])
    return session_id


def test_first_save_then_update(
    summaries: SummaryStore, at: At, user_id: str, session_with_messages: str
) -> None:
    session_id = session_with_messages
    assert summaries.get(user_id, session_id) is None

    first = summaries.save(
        user_id,
        session_id,
        content="s1",
        kind="llm",
        boundary=at(user_id, session_id, 4),
        covered=4,
        expected_version=0,
    )
    assert first is not None
    assert (first.content, first.kind, first.boundary_seq, first.version) == ("s1", "llm", 4, 1)

    second = summaries.save(
        user_id,
        session_id,
        content="s2",
        kind="raw",
        boundary=at(user_id, session_id, 6),
        covered=6,
        expected_version=1,
    )
    assert second is not None
    assert (second.content, second.kind, second.covered, second.version) == ("s2", "raw", 6, 2)
    assert summaries.get(user_id, session_id) == second


def test_stale_version_loses(
    summaries: SummaryStore, at: At, user_id: str, session_with_messages: str
) -> None:
    session_id = session_with_messages
    assert summaries.save(
        user_id,
        session_id,
        content="a",
        kind="llm",
        boundary=at(user_id, session_id, 2),
        covered=2,
        expected_version=0,
    )
    assert (
        summaries.save(
            user_id,
            session_id,
            content="b",
            kind="llm",
            boundary=at(user_id, session_id, 3),
            covered=3,
            expected_version=0,
        )
        is None
    )
    assert (
        summaries.save(
            user_id,
            session_id,
            content="c",
            kind="llm",
            boundary=at(user_id, session_id, 3),
            covered=3,
            expected_version=7,
        )
        is None
    )
    current = summaries.get(user_id, session_id)
    assert current is not None
    assert (current.content, current.version) == ("a", 1)


@pytest.mark.parametrize("expected_version", [0, 1])
def test_concurrent_saves_with_the_same_version_have_one_winner(
    summaries: SummaryStore, at: At, user_id: str, session_with_messages: str, expected_version: int
) -> None:
    session_id = session_with_messages
    if expected_version:
        summaries.save(
            user_id,
            session_id,
            content="0",
            kind="llm",
            boundary=at(user_id, session_id, 1),
            covered=1,
            expected_version=0,
        )
    writers = 8
    start = threading.Barrier(writers)
    results: list[SummaryRecord | None] = []

    def save(writer: int) -> None:
        start.wait()
        results.append(
            summaries.save(
                user_id,
                session_id,
                content=f"writer {writer}",
                kind="llm",
                boundary=at(user_id, session_id, 5),
                covered=5,
                expected_version=expected_version,
            )
        )

    threads = [threading.Thread(target=save, args=(w,)) for w in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    winners = [r for r in results if r is not None]
    assert len(results) == writers
    assert len(winners) == 1
    assert summaries.get(user_id, session_id) == winners[0]
    assert winners[0].version == expected_version + 1


def test_boundary_cannot_go_back(
    summaries: SummaryStore, at: At, user_id: str, session_with_messages: str
) -> None:
    session_id = session_with_messages
    summaries.save(
        user_id,
        session_id,
        content="a",
        kind="llm",
        boundary=at(user_id, session_id, 5),
        covered=5,
        expected_version=0,
    )

    with pytest.raises(InvalidInputError, match="boundary"):
        summaries.save(
            user_id,
            session_id,
            content="b",
            kind="llm",
            boundary=at(user_id, session_id, 4),
            covered=4,
            expected_version=1,
        )

    current = summaries.get(user_id, session_id)
    assert current is not None
    assert current.boundary_seq == 5


def test_summaries_are_scoped_by_user(
    summaries: SummaryStore, at: At, user_id: str, session_with_messages: str
) -> None:
    session_id = session_with_messages
    mine = summaries.save(
        user_id,
        session_id,
        content="a",
        kind="llm",
        boundary=at(user_id, session_id, 1),
        covered=1,
        expected_version=0,
    )
    intruder = f"other-{uuid.uuid4()}"

    assert summaries.get(intruder, session_id) is None
    with pytest.raises(SessionErasedError):
        summaries.save(
            intruder,
            session_id,
            content="x",
            kind="raw",
            boundary=at(user_id, session_id, 2),
            covered=2,
            expected_version=1,
        )
    with pytest.raises(SessionErasedError):
        summaries.save(
            user_id,
            "no-such-session",
            content="x",
            kind="raw",
            boundary=at(user_id, session_id, 1),
            covered=1,
            expected_version=0,
        )
    assert summaries.get(user_id, session_id) == mine


def test_two_users_keep_their_own_summary_of_the_same_session_id(
    database: Database, summaries: SummaryStore, at: At, session_id: str
) -> None:
    alice, bob = f"alice-{uuid.uuid4()}", f"bob-{uuid.uuid4()}"
    for owner in (alice, bob):
        MessageStore(database).append(owner, session_id, [user(owner)])
        summaries.save(
            owner,
            session_id,
            content=owner,
            kind="llm",
            boundary=at(owner, session_id, 1),
            covered=1,
            expected_version=0,
        )

    for owner in (alice, bob):
        summary = summaries.get(owner, session_id)
        assert summary is not None
        assert (summary.user_id, summary.content, summary.version) == (owner, owner, 1)


def test_summary_content_with_nul_is_a_clear_error(
    summaries: SummaryStore, at: At, user_id: str, session_with_messages: str
) -> None:
    with pytest.raises(InvalidInputError, match="NUL"):
        summaries.save(
            user_id,
            session_with_messages,
            content="a\x00b",
            kind="llm",
            boundary=at(user_id, session_with_messages, 1),
            covered=1,
            expected_version=0,
        )

    assert summaries.get(user_id, session_with_messages) is None

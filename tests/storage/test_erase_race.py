"""A session erased while it starts: ``erase`` runs again, an append creates it again;
neither fails.

The erasure locks the session's row first; a session whose row did not exist yet is not held
off, and when its first message is committed between the erasure's delete of the messages and
its delete of the session, the latter fails on the messages' foreign key. The erasure then
runs again, and erases the session started meanwhile with the rest. An append that finds the
session erased between creating its row and locking it creates it again (found by a forget
in a loop beside two threads recording and preparing: both failed as ``InvalidInputError``).
"""

from typing import Any

import pytest
from storage_samples import user

import storage.erasure
from storage import Database, Erased, InvalidInputError, MessageStore, erase
from storage.messages import appends
from storage.messages.appends import message_row

pytestmark = pytest.mark.slow


def test_a_session_started_while_it_is_erased_is_erased_too(
    database: Database, user_id: str, session_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = MessageStore(database)
    counted = storage.erasure._rowcount
    deletes: list[int] = []

    def counting(result: Any) -> int:
        deletes.append(counted(result))
        if len(deletes) == _MESSAGES_DELETE:  # first attempt, messages just deleted
            store.append(user_id, session_id, [user("started meanwhile")])
        return deletes[-1]

    monkeypatch.setattr(storage.erasure, "_rowcount", counting)
    erased = erase(database, user_id, session_id=session_id)

    assert (erased.messages, erased.sessions) == (1, 1)
    assert store.history(user_id, session_id) == []


def test_a_refusal_that_is_not_a_foreign_key_is_raised_at_once(
    database: Database, user_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs: list[str] = []

    def refused(*args: Any, **kwargs: Any) -> Erased:
        runs.append("run")
        raise InvalidInputError("the database rejected the input (22P05): unsupported")

    monkeypatch.setattr(storage.erasure, "_erase_once", refused)
    with pytest.raises(InvalidInputError, match="22P05"):
        erase(database, user_id)
    assert runs == ["run"]


#: The position of the messages' delete among the erasure's deletes (``_CONVERSATION``).
_MESSAGES_DELETE = [name for name, _ in storage.erasure._CONVERSATION].index("messages") + 1


def test_a_session_erased_as_an_append_creates_it_is_created_again(
    database: Database, user_id: str, session_id: str
) -> None:
    """Another request creates the session and a forget erases it between this append's
    insert of the row (which then does nothing) and its lock (which then finds none)."""
    store = MessageStore(database)

    class Racing:
        def __init__(self, connection: Any) -> None:
            self._connection = connection
            self.raced = False

        def scalar(self, *args: Any, **kwargs: Any) -> Any:
            return self._connection.scalar(*args, **kwargs)

        def execute(self, statement: Any, *args: Any, **kwargs: Any) -> Any:
            if statement is not appends._CREATE or self.raced:
                return self._connection.execute(statement, *args, **kwargs)
            self.raced = True
            store.append(user_id, session_id, [user("another request")])
            result = self._connection.execute(statement, *args, **kwargs)
            erase(database, user_id, session_id=session_id)
            return result

    with database.transaction() as connection:
        racing = Racing(connection)
        last_seq = appends.lock_session(racing, user_id, session_id)  # type: ignore[arg-type]
        rows = [message_row(0, user("this request"))]
        appends.insert_messages(connection, user_id, session_id, last_seq, rows)

    assert racing.raced
    assert [m.payload["content"] for m in store.history(user_id, session_id)] == ["this request"]

"""The database round trips of one proxied request, counted: a ceiling a regression breaks.

Timing is not deterministic; the number of statements is. A steady request of a session (the
client resends its history plus a new question) costs: one read of the stored tail to tell the
new messages from the resent ones, one statement that stores the input and loads the window,
the pins and the card search (long-term memory is on here), then, after the answer has gone
out, one transaction that stores the reply and one check of whether a fold is due.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from proxy_harness import *  # noqa: F403 - the fixtures
from proxy_harness import MakeClient, MakeProxy, recorded, stored, who
from sqlalchemy import event

from memory import Memory, ReportSettings
from retrieval import MINILM_NAME, HashingEmbedder
from storage import Database

#: Reports of prepare not kept (a thread writes them, off the request path).
QUIET = ReportSettings(enabled=False)
#: Statements of one steady request before the upstream is called.
BEFORE_THE_UPSTREAM = 4
#: Statements that store the reply after the answer (lock, open tail, insert, seq, fold check).
AFTER_THE_ANSWER = 5


class Trips:
    """The statements and the transactions the proxy's database handle ran."""

    def __init__(self) -> None:
        self.statements: list[str] = []
        self.transactions = 0

    def clear(self) -> None:
        self.statements.clear()
        self.transactions = 0


@pytest.fixture
def trips(proxy_database: Database) -> Iterator[Trips]:
    counted = Trips()

    def statement(conn: Any, cursor: Any, text: str, *args: Any) -> None:
        counted.statements.append(" ".join(text.split())[:80])

    def commit(conn: Any) -> None:
        counted.transactions += 1

    event.listen(proxy_database.engine, "before_cursor_execute", statement)
    event.listen(proxy_database.engine, "commit", commit)
    yield counted
    event.remove(proxy_database.engine, "before_cursor_execute", statement)
    event.remove(proxy_database.engine, "commit", commit)


@pytest.mark.parametrize("stream", [False, True])
def test_a_steady_request_costs_a_few_statements_and_one_transaction(
    make_proxy: MakeProxy,
    make_client: MakeClient,
    trips: Trips,
    memory: Memory,
    user_id: str,
    session_id: str,
    stream: bool,
) -> None:
    # No kept reports: their writer thread's statements would be counted by chance.
    memory = Memory(
        memory.database,
        memory.settings.model_copy(update={"reports": QUIET}),
        embedder=HashingEmbedder(name=MINILM_NAME),
    )
    client = make_client(make_proxy(memory), **who(user_id, session_id))
    history: list[Any] = [{"role": "system", "content": "Be brief."}]
    for number in range(3):
        history.append({"role": "user", "content": f"question {number}"})
        if number == 2:
            recorded()
            trips.clear()
        if stream:
            chunks = client.chat.completions.create(model="m", messages=history, stream=True)
            text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks)
        else:
            completion = client.chat.completions.create(model="m", messages=history)
            text = completion.choices[0].message.content or ""
        history.append({"role": "assistant", "content": text})
    recorded()
    counted = list(trips.statements)

    assert len(counted) <= BEFORE_THE_UPSTREAM + AFTER_THE_ANSWER, counted
    assert trips.transactions <= 1, counted
    # The resent history was recognised: each message stored once.
    assert [m["content"] for m in stored(memory, user_id, session_id)] == [
        m["content"] for m in history[1:]
    ]

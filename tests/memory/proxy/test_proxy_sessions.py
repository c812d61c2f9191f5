"""Another session of the user recalls what one said, through the proxy and its own worker thread:
within seconds without ending the first, or at once with ``X-Stratamem-End-Session: 1``.

The waits below are bounded polls for an outcome (a session archived), never sleeps that a
result depends on. The module has a database of its own: a proxy's worker runs every job of
its database, and the shared one holds other tests' jobs, some of them slow on purpose.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from proxy_harness import *  # noqa: F403 - the fixtures
from proxy_harness import MakeClient, MakeProxy, recorded, stored, who
from upstream_fake import Fail, FakeUpstream

from memory import Memory, Settings
from memory.cli.app import build_parser
from memory.proxy import END_SESSION_HEADER
from memory.proxy.keys import KeyRing
from retrieval import MINILM_NAME, HashingEmbedder
from storage import ArchiveMarks, Database
from storage.engine import stop_embedded
from storage.proxy_keys import ProxyKeyStore

#: The longest a test waits for the proxy's worker to archive a session; it takes well under a
#: second, so reaching this is a failure, not a slow machine.
ARCHIVED_LIMIT_S = 30.0
FACT = "My sister Ana lives in Lisbon."
QUESTION = "Where does my sister Ana live?"


@pytest.fixture(scope="module")
def own_database(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Database]:
    """An embedded database of this module's own, stopped after its tests."""
    data_dir: Path = tmp_path_factory.mktemp("proxy-sessions") / "data"
    try:
        with Database.open(None, data_dir=data_dir) as database:
            yield database
    finally:
        if (data_dir / "pg").exists():
            stop_embedded((data_dir / "pg").resolve())


@pytest.fixture(scope="module")
def own_key(own_database: Database) -> str:
    """An admin key of the module's database."""
    key, _ = KeyRing(ProxyKeyStore(own_database)).create(user_id=None, label="sessions")
    return key


def memory_with(database: Database, mode: str = "background", **cards: Any) -> Memory:
    """A ``Memory`` on the shared database, cards by the hashing fake."""
    settings = Settings(summary={"mode": mode, "debounce_seconds": 0}, cards=cards)
    return Memory(database, settings, embedder=HashingEmbedder(name=MINILM_NAME))


def until(condition: Callable[[], bool], what: str) -> None:
    """Return once ``condition`` holds; fail after ``ARCHIVED_LIMIT_S``."""
    deadline = time.monotonic() + ARCHIVED_LIMIT_S
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)


def archived_through(mem: Memory, user_id: str, session_id: str) -> Callable[[], bool]:
    """Whether every stored message of the session is archived as cards."""

    def done() -> bool:
        last = stored(mem, user_id, session_id)
        return ArchiveMarks(mem.database).get(user_id, session_id) == len(last) > 0

    return done


def system_sent(fake: FakeUpstream) -> str:
    """The system messages (summary, memories) of the upstream's last request."""
    return "\n".join(
        str(m["content"]) for m in fake.bodies[-1]["messages"] if m["role"] == "system"
    )


@pytest.mark.slow
def test_a_fact_said_in_one_session_is_recalled_in_another_without_ending_it(
    make_proxy: MakeProxy,
    make_client: MakeClient,
    upstream: tuple[FakeUpstream, str],
    own_database: Database,
    own_key: str,
    user_id: str,
) -> None:
    fake, _ = upstream
    mem = memory_with(own_database, debounce_seconds=0.2)
    url = make_proxy(mem, worker=True)
    monday = make_client(url, api_key=own_key, **who(user_id, "monday"))
    monday.chat.completions.create(model="m", messages=[{"role": "user", "content": FACT}])

    # The proxy's own worker makes the cards; nobody ends monday, nor does it idle for long.
    until(archived_through(mem, user_id, "monday"), "monday archived by the proxy's worker")
    friday = make_client(url, api_key=own_key, **who(user_id, "friday"))
    friday.chat.completions.create(model="m", messages=[{"role": "user", "content": QUESTION}])

    assert "Lisbon" in system_sent(fake)


def test_the_end_session_header_ends_the_session_once_its_reply_is_stored(
    make_proxy: MakeProxy,
    make_client: MakeClient,
    upstream: tuple[FakeUpstream, str],
    own_database: Database,
    own_key: str,
    user_id: str,
) -> None:
    fake, _ = upstream
    # Only the end makes cards here: none are made soon after a record.
    mem = memory_with(own_database, archive_promptly=False)
    url = make_proxy(mem, worker=True)
    monday = make_client(url, api_key=own_key, **who(user_id, "monday"))
    ending = make_client(
        url, api_key=own_key, **who(user_id, "monday"), **{END_SESSION_HEADER: "1"}
    )
    monday.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hello."}])
    recorded()
    assert ArchiveMarks(mem.database).get(user_id, "monday") == 0

    ending.chat.completions.create(model="m", messages=[{"role": "user", "content": FACT}])

    until(archived_through(mem, user_id, "monday"), "monday ended and archived")
    assert ArchiveMarks(mem.database).get(user_id, "monday") == 4  # its reply included
    assert END_SESSION_HEADER.lower() not in fake.received[-1].headers  # never forwarded
    friday = make_client(url, api_key=own_key, **who(user_id, "friday"))
    friday.chat.completions.create(model="m", messages=[{"role": "user", "content": QUESTION}])
    assert "Lisbon" in system_sent(fake)
    # The same session id goes on afterwards, and is archived again from where it ended.
    monday.chat.completions.create(model="m", messages=[{"role": "user", "content": "And?"}])
    assert [m["content"] for m in stored(mem, user_id, "monday")][4:] == ["And?", "echo: And?"]
    assert ArchiveMarks(mem.database).get(user_id, "monday") == 4


def test_a_request_whose_reply_is_not_stored_ends_nothing(
    make_proxy: MakeProxy,
    make_client: MakeClient,
    upstream: tuple[FakeUpstream, str],
    own_database: Database,
    own_key: str,
    user_id: str,
) -> None:
    fake, _ = upstream
    # Inline: an end would archive at once, in the proxy's own thread pool.
    mem = memory_with(own_database, "inline")
    ending = make_client(
        make_proxy(mem), api_key=own_key, **who(user_id, "monday"), **{END_SESSION_HEADER: "1"}
    )
    fake.script(Fail(503))

    with pytest.raises(openai.APIStatusError):
        ending.chat.completions.create(model="m", messages=[{"role": "user", "content": FACT}])
    recorded()

    assert [m["content"] for m in stored(mem, user_id, "monday")] == [FACT]
    assert ArchiveMarks(mem.database).get(user_id, "monday") == 0
    # The client's retry, with the header, is answered: its reply stored, the session ended.
    ending.chat.completions.create(model="m", messages=[{"role": "user", "content": FACT}])
    recorded()
    assert [m["content"] for m in stored(mem, user_id, "monday")] == [FACT, f"echo: {FACT}"]
    assert ArchiveMarks(mem.database).get(user_id, "monday") == 2


def test_serve_runs_a_worker_thread_unless_told_not_to() -> None:
    parse = build_parser().parse_args

    assert parse(["serve"]).no_worker is False
    assert parse(["serve", "--no-worker"]).no_worker is True
    assert parse(["serve", "--worker"]).no_worker is False  # the old flag: the default now

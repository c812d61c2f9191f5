"""The in-process cache of recent messages: a warm load always equals a cold one."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

from memory.recent import RecentMessages
from storage import MessageStore, NewMessage, StoredMessage


def new(payload: dict[str, Any], tokens: int) -> NewMessage:
    return NewMessage(payload=payload, role=payload["role"], tokens=tokens)


def turn(rng: random.Random, index: int) -> list[NewMessage]:
    """A user message, sometimes a tool exchange, and an answer, of random sizes."""
    messages = [new({"role": "user", "content": f"question {index}"}, rng.randint(5, 60))]
    if rng.random() < 0.4:
        call = {"id": f"c{index}", "type": "function", "function": {"name": "f", "arguments": ""}}
        messages.append(new({"role": "assistant", "tool_calls": [call]}, 10))
        messages.append(new({"role": "tool", "tool_call_id": f"c{index}", "content": "r"}, 80))
    messages.append(new({"role": "assistant", "content": f"answer {index}"}, rng.randint(5, 60)))
    return messages


class CountingStore(MessageStore):
    """A message store that counts the records its walks yield."""

    read = 0

    def walk_back(self, *args: Any, **kwargs: Any) -> Iterator[StoredMessage]:
        for record in super().walk_back(*args, **kwargs):
            self.read += 1
            yield record


@pytest.fixture
def store(database: Any) -> CountingStore:
    return CountingStore(database)


def test_warm_loads_equal_cold_loads_as_the_session_grows_and_the_boundary_moves(
    store: CountingStore, user_id: str, session_id: str
) -> None:
    rng = random.Random(7)
    warm = RecentMessages(store)
    boundary = 0
    for index in range(60):
        store.append(user_id, session_id, turn(rng, index))
        if index % 9 == 8:  # a consolidation elsewhere moved the boundary to a unit start
            history = store.history(user_id, session_id)
            starts = [m.seq for m in history if m.role != "tool" and m.seq > boundary]
            boundary = rng.choice(starts[: len(starts) // 2 or 1]) - 1
        budget = rng.choice([50, 200, 400, 10_000])

        got = warm.load(user_id, session_id, after_seq=boundary, budget=budget)
        expected = RecentMessages(store).load(
            user_id, session_id, after_seq=boundary, budget=budget
        )

        assert got == expected
        assert all(m.seq > boundary for m in got.stored)
        assert [m.to_openai() for m in got.messages] == [m.payload for m in got.stored]


def test_a_warm_load_reads_only_the_new_messages(
    store: CountingStore, user_id: str, session_id: str
) -> None:
    rng = random.Random(1)
    for index in range(40):
        store.append(user_id, session_id, turn(rng, index))
    recent = RecentMessages(store)
    recent.load(user_id, session_id, after_seq=0, budget=300)
    before = len(store.history(user_id, session_id))
    store.read = 0

    store.append(user_id, session_id, turn(rng, 40))
    window = recent.load(user_id, session_id, after_seq=0, budget=300)

    assert store.read == len(store.history(user_id, session_id)) - before
    assert window.last_seq == len(store.history(user_id, session_id))


def test_the_cache_never_serves_another_users_session(
    store: CountingStore, user_id: str, session_id: str
) -> None:
    store.append(user_id, session_id, turn(random.Random(2), 0))
    recent = RecentMessages(store)
    recent.load(user_id, session_id, after_seq=0, budget=100)

    assert recent.load("someone-else", session_id, after_seq=0, budget=100).stored == ()


def test_the_cache_forgets_the_least_recently_used_sessions_past_its_token_limit(
    store: CountingStore, user_id: str, session_id: str
) -> None:
    one_session = sum(message.tokens for message in turn(random.Random(3), 0))
    recent = RecentMessages(store, max_tokens=2 * one_session)
    sessions = [f"{session_id}-{name}" for name in "abc"]
    for session in sessions:
        store.append(user_id, session, turn(random.Random(3), 0))
        recent.load(user_id, session, after_seq=0, budget=10_000)
    store.read = 0

    for session in sessions[1:]:  # still cached: nothing new to read
        recent.load(user_id, session, after_seq=0, budget=10_000)
    assert store.read == 0

    recent.load(user_id, sessions[0], after_seq=0, budget=10_000)  # forgotten: read again
    assert store.read == len(store.history(user_id, sessions[0]))

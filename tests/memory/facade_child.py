"""A child of the multi-process ``Memory`` tests; run as ``python facade_child.py MODE ...``.

Every mode talks to the parent over stdout lines (and reads a line on stdin where it must wait
for the parent or a sibling), so the tests synchronise on pipes, never on sleeps. The turn
helpers are shared with the tests, so threads and processes write the same conversation.
Cards are embedded by the hashing fake (named as the model the shared database records): these
tests are about concurrent writes, not recall, and each process would load MiniLM.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from typing import Any

from child_process import say, wait_for_go, wait_for_line
from sqlalchemy import event

import memory.session.writer
import storage.messages.store
from memory import Memory, Settings, validate_history
from retrieval import MINILM_NAME, HashingEmbedder
from storage import Database, NewMessage, StoredMessage

CLIENT_KEYS = ("id", "metadata", "timestamp")


def question(writer: str, index: int) -> dict[str, Any]:
    """The index-th user message of a writer, with a client id and its position as metadata."""
    return {
        "role": "user",
        "content": f"{writer} asks question {index}",
        "id": f"{writer}-q{index}",
        "metadata": {"writer": writer, "index": 2 * index},
    }


def answer(writer: str, index: int) -> dict[str, Any]:
    """The assistant's reply to ``question(writer, index)``."""
    return {
        "role": "assistant",
        "content": f"{writer} answers question {index}",
        "id": f"{writer}-a{index}",
        "metadata": {"writer": writer, "index": 2 * index + 1},
    }


def write_turns(
    mem: Memory, user_id: str, session_id: str, writer: str, count: int, *, own_input: bool
) -> list[str]:
    """Write ``count`` turns (prepare with the question, record the answer) as one writer.

    Args:
        own_input: also require every context to hold the writer's own question (true when the
            budget fits the whole conversation; with a small one, other writers may push it out).

    Returns:
        Every problem seen in a prepared context: invalid structure, stratamem-only keys, or
        (with ``own_input``) the writer's question missing. Empty when all were fine.
    """
    problems: list[str] = []
    for index in range(count):
        asked = question(writer, index)
        context = mem.prepare(user_id=user_id, session_id=session_id, input=asked)
        problems += [f"{writer} turn {index}: {p}" for p in validate_history(context.messages)]
        if any(key in message for message in context.messages for key in CLIENT_KEYS):
            problems.append(f"{writer} turn {index}: a client key reached the context")
        if context.report.tokens.total > context.report.budget:
            problems.append(f"{writer} turn {index}: {context.report.tokens} over budget")
        if own_input and asked["content"] not in [m.get("content") for m in context.messages]:
            problems.append(f"{writer} turn {index}: its own question is not in the context")
        mem.record(user_id=user_id, session_id=session_id, messages=[answer(writer, index)])
    return problems


def expected_ids(writers: list[str], count: int) -> set[str]:
    """The client ids ``write_turns`` stores for these writers."""
    return {
        f"{writer}-{kind}{index}" for writer in writers for index in range(count) for kind in "qa"
    }


def turn_problems(history: list[StoredMessage], writers: list[str], count: int) -> list[str]:
    """What is wrong with a session the writers filled: loss, duplicates, gaps, disorder."""
    problems: list[str] = []
    total = 2 * len(writers) * count
    if [m.seq for m in history] != list(range(1, total + 1)):
        problems.append(f"seqs are not 1..{total}: {[m.seq for m in history]}")
    ids = [m.client_id for m in history]
    if len(ids) != len(set(ids)):
        problems.append("a client id is stored twice")
    if set(ids) != expected_ids(writers, count):
        problems.append(f"lost or foreign ids: {set(ids) ^ expected_ids(writers, count)}")
    for writer in writers:
        order = [m.metadata["index"] for m in history if m.metadata.get("writer") == writer]
        if order != list(range(2 * count)):
            problems.append(f"{writer}'s messages are out of order: {order}")
    return problems


def turns(url: str, user_id: str, session_id: str, writer: str, count: str) -> None:
    """Write turns through ``Memory.open(url)`` once the parent says go; report any problem."""
    with Memory.open(url, embedder=HashingEmbedder(name=MINILM_NAME)) as mem:
        wait_for_go()
        problems = write_turns(mem, user_id, session_id, writer, int(count), own_input=True)
    say("done" if not problems else "problems " + "; ".join(problems))


def die_in_record(url: str, user_id: str, session_id: str, stage: str, count: str) -> None:
    """Record three turns, then a large batch that blocks at ``stage``.

    ``statement``: just before the one statement that stores a batch after a closed tail is
    sent. ``validate`` and ``commit``, in the general path's transaction (the one-statement path
    turned off): after the batch was checked against the stored tail, before any insert; after
    every insert of the batch was sent, just before the commit. The parent kills the process
    with SIGKILL once it says ``paused``.
    """
    database = Database.open(url, pool_size=1)
    mem = Memory(database, Settings(database_url=url), embedder=HashingEmbedder(name=MINILM_NAME))
    for index in range(3):
        mem.prepare(user_id=user_id, session_id=session_id, input=question("earlier", index))
        mem.record(user_id=user_id, session_id=session_id, messages=[answer("earlier", index)])

    def pause() -> None:
        say("paused")
        signal.pause()

    if stage == "statement":
        append = storage.messages.store.run_append

        def pause_then_append(*args: Any) -> list[StoredMessage]:
            pause()
            return append(*args)

        storage.messages.store.run_append = pause_then_append
    else:
        storage.messages.store.MessageStore.append_after_closed_tail = (  # type: ignore[method-assign]
            lambda *_, **__: None
        )
    if stage == "validate":
        check = memory.session.writer._check_structure

        def check_then_pause(tail: list[StoredMessage], batch: list[NewMessage]) -> None:
            check(tail, batch)
            pause()

        memory.session.writer._check_structure = check_then_pause
    elif stage == "commit":
        event.listen(database.engine, "commit", lambda connection: pause())
    mem.record(user_id=user_id, session_id=session_id, messages=batch(int(count)))
    say("recorded")  # never reached


def batch(count: int) -> list[dict[str, Any]]:
    """A batch recorded in one call: a question, then alternating answers and follow-ups."""
    messages = [question("batch", 0)]
    for index in range(1, count):
        make = answer if index % 2 else question
        messages.append(make("batch", index))
    return messages


def open_embedded(user_id: str, session_id: str, writer: str) -> None:
    """Open the embedded database (``STRATAMEM_DATA_DIR``) with a sibling, write, read back."""
    wait_for_go()
    with Memory.open() as mem:
        mem.record(user_id=user_id, session_id=session_id, messages=[question(writer, 0)])
        say("opened")
        # Read once the sibling has written too: both must see one shared database.
        wait_for_line()
        history = mem.history(user_id=user_id, session_id=session_id)
        say("seen " + ",".join(sorted(str(m.client_id) for m in history)))
        wait_for_line()


MODES: dict[str, Callable[..., None]] = {
    "turns": turns,
    "die-in-record": die_in_record,
    "open-embedded": open_embedded,
}

if __name__ == "__main__":
    MODES[sys.argv[1]](*sys.argv[2:])

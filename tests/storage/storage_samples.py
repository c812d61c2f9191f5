"""Sample messages and history checks shared by the storage tests and their child processes."""

from typing import Any

from storage import NewMessage, StoredMessage


def user(text: str, client_id: str | None = None, **metadata: Any) -> NewMessage:
    """A user message whose token count is its length."""
    return NewMessage(
        payload={"role": "user", "content": text},
        role="user",
        tokens=len(text),
        client_id=client_id,
        metadata=metadata,
    )


def written(writer: str, index: int) -> NewMessage:
    """The index-th message of a concurrent writer, with its own client id and a marker."""
    return user(f"{writer} {index}", f"{writer}-{index}", writer=writer, index=index)


def assert_complete_and_ordered(
    history: list[StoredMessage], writers: int, per_writer: int
) -> None:
    """No loss, no duplicate, contiguous seqs, and each writer's messages in its own order."""
    assert [m.seq for m in history] == list(range(1, writers * per_writer + 1))
    assert len({m.client_id for m in history}) == writers * per_writer
    by_writer: dict[Any, list[int]] = {}
    for m in history:
        by_writer.setdefault(m.metadata["writer"], []).append(m.metadata["index"])
    assert len(by_writer) == writers
    assert all(indices == list(range(per_writer)) for indices in by_writer.values())

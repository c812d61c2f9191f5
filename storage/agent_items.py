"""``AgentItems``: framework items kept whole in messages' metadata, and the items popped since.

An agent framework's session (the OpenAI Agents SDK's: ``memory.integrations.openai_agents``)
stores its items (Responses-API items, JSON objects) inside stratamem messages, under
``ITEMS_KEY`` in each message's metadata, so they are ordered, stored all or none and erased
with the session's messages. Messages are append-only; taking the newest item back
(``pop``) marks it popped (``agent_item_pops``) instead: the items of a session are its
messages' items, oldest first, less the popped ones. Persistence only.
"""

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, text

from storage.engine import Database
from storage.inputs import check_id

__all__ = ["ITEMS_KEY", "AgentItems", "ItemMessage"]

#: The key of a message's metadata that holds its items (a JSON list).
ITEMS_KEY = "agent_items"

# Newest first, with the indexes of the message's popped items (one statement: one snapshot).
_WALK_BACK = text(
    "SELECT m.seq, m.id, m.payload, m.metadata, ARRAY("
    "  SELECT p.item_index FROM agent_item_pops AS p"
    "  WHERE p.user_id = m.user_id AND p.message_id = m.id"
    ") AS popped FROM messages AS m "
    "WHERE m.user_id = :user_id AND m.session_id = :session_id AND m.seq < :before "
    "AND m.seq >= :first ORDER BY m.seq DESC LIMIT :batch"
)


@dataclass(frozen=True, slots=True)
class ItemMessage:
    """One stored message of a session and the items it still holds.

    Attributes:
        seq: its place in the session.
        id: its id (never reused).
        payload: the chat message as stored.
        holds_items: whether it was stored with items (``ITEMS_KEY`` in its metadata); a
            message stratamem stored itself (an "interrupted" tool result) holds none.
        items: ``(index, item)`` of each item not popped, in order.
        metadata: its metadata as stored (an adapter's own keys beside ``ITEMS_KEY``).
    """

    seq: int
    id: int
    payload: dict[str, Any]
    holds_items: bool
    items: tuple[tuple[int, dict[str, Any]], ...]
    metadata: dict[str, Any]


class AgentItems:
    """Reads a session's items, pops its newest one, and reads the messages of a seq range."""

    def __init__(self, database: Database) -> None:
        self._database = database

    def items(self, user_id: str, session_id: str, limit: int | None = None) -> list[Any]:
        """The session's items, oldest first: all of them, or the newest ``limit``.

        ``limit`` 0 is none; a negative ``limit`` is all (as SQLite's ``LIMIT`` reads it, for
        the Agents SDK's ``SQLiteSession``).

        Raises:
            InvalidInputError: An id is not usable.
        """
        _check_ids(user_id, session_id)
        wanted = None if limit is None or limit < 0 else limit
        if wanted == 0:
            return []
        newest_first: list[Any] = []
        with self._database.transaction() as connection:
            # One snapshot for every batch: a pop or an append in between is not half seen.
            connection.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"))
            for message in _walk_back(connection, user_id, session_id):
                newest_first.extend(item for _, item in reversed(message.items))
                if wanted is not None and len(newest_first) >= wanted:
                    break
        if wanted is not None:
            del newest_first[wanted:]
        newest_first.reverse()
        return newest_first

    def pop(self, user_id: str, session_id: str) -> Any | None:
        """Take the session's newest item back (marked popped) and return it; ``None`` when
        it has none.

        Under the session's row lock: pops, appends and an erasure of the session take turns,
        so two pops never return the same item and a pop never marks an item erased since.

        Raises:
            InvalidInputError: An id is not usable.
        """
        _check_ids(user_id, session_id)
        with self._database.transaction() as connection:
            held = connection.execute(
                text(
                    "SELECT 1 FROM sessions WHERE user_id = :user_id "
                    "AND session_id = :session_id FOR UPDATE"
                ),
                {"user_id": user_id, "session_id": session_id},
            ).first()
            if held is None:
                return None
            for message in _walk_back(connection, user_id, session_id):
                if not message.items:
                    continue
                index, item = message.items[-1]
                connection.execute(
                    text(
                        "INSERT INTO agent_item_pops (user_id, session_id, message_id, "
                        "item_index) VALUES (:user_id, :session_id, :message_id, :index)"
                    ),
                    {
                        "user_id": user_id,
                        "session_id": session_id,
                        "message_id": message.id,
                        "index": index,
                    },
                )
                return item
        return None

    def messages(
        self, user_id: str, session_id: str, first_seq: int, last_seq: int
    ) -> list[ItemMessage]:
        """The session's messages from seq ``first_seq`` through ``last_seq``, in order, each
        with the items it still holds.

        Raises:
            InvalidInputError: An id is not usable.
        """
        _check_ids(user_id, session_id)
        with self._database.transaction() as connection:
            found = list(
                _walk_back(connection, user_id, session_id, before=last_seq + 1, first=first_seq)
            )
        found.reverse()
        return found


def _walk_back(
    connection: Connection,
    user_id: str,
    session_id: str,
    *,
    before: int = 2**62,
    first: int = 0,
) -> Iterator[ItemMessage]:
    """The session's messages with seq in ``[first, before)``, newest first, read in batches."""
    batch = 64
    while True:
        rows = connection.execute(
            _WALK_BACK,
            {
                "user_id": user_id,
                "session_id": session_id,
                "before": before,
                "first": first,
                "batch": batch,
            },
        ).all()
        for row in rows:
            yield _item_message(row.seq, row.id, row.payload, row.metadata, row.popped)
        if len(rows) < batch:
            return
        before = rows[-1].seq
        batch = min(batch * 4, 4096)


def _item_message(
    seq: int, message_id: int, payload: Any, metadata: Any, popped: Sequence[int]
) -> ItemMessage:
    listed = metadata.get(ITEMS_KEY) if isinstance(metadata, dict) else None
    items = listed if isinstance(listed, list) else []
    gone = set(popped)
    return ItemMessage(
        seq=seq,
        id=message_id,
        payload=payload if isinstance(payload, dict) else {},
        holds_items=isinstance(listed, list),
        items=tuple((index, item) for index, item in enumerate(items) if index not in gone),
        metadata=metadata if isinstance(metadata, dict) else {},
    )


def _check_ids(user_id: str, session_id: str) -> None:
    check_id("user_id", user_id)
    check_id("session_id", session_id)

"""The records of store items (``storage.items``): where an item lives, what is stored of it,
what it is found by, and how its rows read back."""

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Row

__all__ = [
    "ITEM_COLUMNS",
    "ItemIndexing",
    "ItemKey",
    "ItemRef",
    "StoredItem",
    "item_of",
    "item_of_tuple",
]

#: The columns a ``StoredItem`` is read from, in every statement returning items.
ITEM_COLUMNS = "user_id, namespace, key, id, value, created_at, updated_at, keyword_length"


@dataclass(frozen=True, slots=True)
class ItemKey:
    """Where an item lives: its owner, namespace and key."""

    user_id: str
    namespace: tuple[str, ...]
    key: str


@dataclass(frozen=True, slots=True)
class StoredItem:
    """An item as stored.

    Attributes:
        user_id: The owner.
        namespace: The item's namespace, whole (the label naming the user included).
        key: The key, unique in the namespace.
        id: The item's id, kept across updates (a deleted and written again item gets a new one).
        value: The JSON object.
        created_at: When it was first written.
        updated_at: When it was last written.
        keyword_length: How many keyword terms its indexed texts have (0: not indexed).
    """

    user_id: str
    namespace: tuple[str, ...]
    key: str
    id: int
    value: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    keyword_length: int = 0


@dataclass(frozen=True, slots=True)
class ItemRef:
    """An item without its value: what ranking needs (``storage.items.search.RankableItem``)."""

    user_id: str
    id: int
    keyword_length: int


@dataclass(frozen=True, slots=True)
class ItemIndexing:
    """What an item is found by: its indexed texts, one unit vector each, and their terms.

    Attributes:
        texts: Each indexed text by its path in the value (``text``, ``tags.0``).
        vectors: Each indexed text's vector, by path.
        terms: Each keyword term of the indexed texts with how often it occurs.
    """

    texts: Mapping[str, str] = field(default_factory=dict)
    vectors: Mapping[str, Sequence[float]] = field(default_factory=dict)
    terms: Mapping[str, int] = field(default_factory=dict)


def item_of_tuple(row: tuple[Any, ...]) -> StoredItem:
    """A row of ``_COLUMNS`` from the driver's connection."""
    user_id, namespace, key, item_id, value, created_at, updated_at, keyword_length = row
    return StoredItem(
        user_id=user_id,
        namespace=tuple(namespace),
        key=key,
        id=int(item_id),
        value=json.loads(value) if isinstance(value, str) else value,
        created_at=created_at,
        updated_at=updated_at,
        keyword_length=int(keyword_length),
    )


def item_of(row: Row[Any]) -> StoredItem:
    value = row.value
    # psycopg decodes ``json`` itself; a value read as text (another driver) is decoded here.
    if isinstance(value, str):
        value = json.loads(value)
    return StoredItem(
        user_id=row.user_id,
        namespace=tuple(row.namespace),
        key=row.key,
        id=int(row.id),
        value=value,
        created_at=row.created_at,
        updated_at=row.updated_at,
        keyword_length=int(row.keyword_length),
    )

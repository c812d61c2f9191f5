"""``Items``: the namespaced JSON memories framework stores keep (LangGraph's ``BaseStore``).

``Memory.items`` hands it out. An item is a JSON object under a namespace (a tuple of labels)
and a key, owned by a user, so ``Memory.forget(user_id=...)`` deletes it with the rest of the
user. Its indexed texts are embedded by the cards' embedder and keyword-indexed as cards are,
and ``rank`` orders items by the same hybrid search (``retrieval.items``). Framework semantics
(which texts of a value to index, filters, paging) belong to the adapters in
``memory.integrations``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from retrieval.items import ItemIndex, Ranked, RankedItem
from storage.items.store import ItemIndexing, ItemKey, ItemRef, StoredItem

__all__ = ["ItemRef", "ItemWrite", "Items", "RankedItem", "StoredItem"]


@dataclass(frozen=True, slots=True)
class ItemWrite:
    """One put or delete of an item.

    Attributes:
        user_id: The owner.
        namespace: The item's namespace.
        key: Its key in the namespace.
        value: The JSON object to store; ``None`` deletes the item.
        texts: The texts it is found by, keyed by their path in the value (``text``,
            ``tags.0``); none: stored without an index (never ranked by a query).
    """

    user_id: str
    namespace: tuple[str, ...]
    key: str
    value: Mapping[str, Any] | None
    texts: Mapping[str, str] = field(default_factory=dict)


class Items:
    """Every user's items; each method names the user, or ``None`` where a prefix spans users."""

    def __init__(self, index: ItemIndex) -> None:
        """Use ``index`` (the item store with the cards' embedder)."""
        self._index = index
        self._store = index.store

    @property
    def dimension(self) -> int:
        """The length of the vectors items are indexed with (the embedder's)."""
        return self._index.dimension

    def index_texts(self, texts: Sequence[Mapping[str, str]]) -> list[ItemIndexing | None]:
        """What items with these indexed texts (path -> text) are found by, in one embedding
        batch (an import stores items with it)."""
        return self._index.indexing(texts)

    def get(self, *, user_id: str, namespace: Sequence[str], key: str) -> StoredItem | None:
        """The item at ``namespace`` and ``key`` of the user, if stored."""
        return self._store.get(ItemKey(user_id, tuple(namespace), key))

    def write(self, writes: Sequence[ItemWrite]) -> None:
        """Apply puts and deletes in one transaction, all or none; the last write of a key
        wins. Every text is embedded first, in one batch.

        Raises:
            storage.InvalidInputError: a namespace, key or value cannot be stored.
        """
        last: dict[tuple[str, tuple[str, ...], str], ItemWrite] = {}
        for write in writes:
            last[(write.user_id, tuple(write.namespace), write.key)] = write
        puts = [write for write in last.values() if write.value is not None]
        deletes = [
            ItemKey(write.user_id, tuple(write.namespace), write.key)
            for write in last.values()
            if write.value is None
        ]
        indexings: list[ItemIndexing | None] = self._index.indexing([put.texts for put in puts])
        self._store.write(
            [
                (ItemKey(put.user_id, tuple(put.namespace), put.key), put.value or {}, indexing)
                for put, indexing in zip(puts, indexings, strict=True)
            ],
            deletes,
        )

    def scan(
        self,
        prefix: Sequence[str],
        *,
        user_id: str | None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[StoredItem]:
        """The items under ``prefix`` in the store's order (namespaces, then items, as first
        written), of one user or (``None``) of every user."""
        return self._store.scan(prefix, user_id=user_id, limit=limit, offset=offset)

    def rank(self, items: Sequence[Ranked], query: str) -> list[RankedItem[Ranked]]:
        """Every given item (stored, or a reference from ``scan_refs``), best match for
        ``query`` first (hybrid: vectors and keywords); items with no indexed text last, with
        no score."""
        return self._index.rank(items, query)

    def scan_refs(self, prefix: Sequence[str], *, user_id: str | None) -> list[ItemRef]:
        """``scan`` without the values: what ``rank`` needs of every item under a prefix."""
        return self._store.scan_refs(prefix, user_id=user_id)

    def get_many(self, refs: Sequence[ItemRef]) -> list[StoredItem]:
        """The referenced items with their values, in order (one deleted since is left out)."""
        return self._store.get_many(refs)

    def namespaces(
        self, prefix: Sequence[str] = (), *, user_id: str | None
    ) -> list[tuple[str, ...]]:
        """The namespaces holding items under ``prefix``, sorted."""
        return self._store.namespaces(prefix, user_id=user_id)

    def count(self, *, user_id: str) -> int:
        """How many items the user has."""
        return self._store.count(user_id)

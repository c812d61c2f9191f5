"""``StratamemStore``: LangGraph's ``BaseStore`` on stratamem's Postgres and hybrid recall.

Items live in stratamem's database (``Memory.items``), each owned by a user, so a user's
``forget`` deletes their items too. Which user owns an item is decided by its namespace:

- ``StratamemStore(memory)``: the namespace's first label names the user, e.g.
  ``("u1", "memories")``; ``user_position=1`` for LangGraph's usual ``("memories", user_id)``.
  A namespace too short to name a user is an ``InvalidNamespaceError``. A search or listing
  whose prefix names the user reads that user's items only; a shorter prefix (``("memories",)``
  with ``user_position=1``, or none) reads every user's: that is the application's choice.
- ``StratamemStore(memory, user_id="u1")``: every item belongs to ``u1``, whatever its
  namespace (a store per user, e.g. built for each request).

Answers are those of LangGraph's ``InMemoryStore`` (tested by playing random sequences of
operations against both), with these differences: a search with a ``query`` ranks by
stratamem's hybrid search (vectors and BM25 keywords fused; ``score`` is the fused score, 1 for
first in both) instead of cosine similarity alone, and pages of it include unindexed items
once (after the ranked ones); an update keeps the item's ``created_at``; a namespace whose items
were all deleted is not listed (``InMemoryStore`` lists it, and one a ``get`` looked in, until
the process ends); a range operator (``$gt``, ...) on an item whose field is missing or not a
number does not match it (``InMemoryStore`` raises ``TypeError``).

Texts are embedded by the memory's embedder (``IndexConfig``'s ``embed`` is not taken: open the
memory with ``embedder=``); ``fields`` and ``put(..., index=)`` choose what is embedded,
``index=False`` stores an item that no query ranks. No TTL. The namespace labels and the key
together take at most 1,536 UTF-8 bytes (``storage.items``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    get_text_at_path,
    tokenize_path,
    validate_op_namespace,
)

from memory.errors import ConfigurationError
from memory.facade import Memory
from memory.longterm.items import ItemWrite, StoredItem

__all__ = ["StratamemStore"]


class StratamemStore(BaseStore):
    """A LangGraph store whose items are stratamem's, owned by users (see the module docstring).

    Example:
        ``graph = builder.compile(store=StratamemStore(memory, user_position=1))``; a node
        then calls ``store.put(("memories", user_id), key, {"text": ...})`` and
        ``store.search(("memories", user_id), query=...)``.
    """

    __slots__ = ("_fields", "_items", "_user_id", "_user_position")

    def __init__(
        self,
        memory: Memory,
        *,
        user_position: int = 0,
        user_id: str | None = None,
        index: IndexConfig | None = None,
    ) -> None:
        """Store items in ``memory``'s database.

        Args:
            memory: The open memory (long-term memory on: its embedder indexes items).
            user_position: Which label of a namespace names its user.
            user_id: Instead, the one user owning every item of this store.
            index: Which texts of a value are embedded (``fields``, default ``["$"]``: the
                whole value as JSON); ``dims``, when given, must be the embedder's dimension.

        Raises:
            ConfigurationError: long-term memory is off, ``user_position`` is negative,
                ``index`` names an ``embed`` or a dimension the memory's embedder lacks.
        """
        if isinstance(user_position, bool) or not isinstance(user_position, int):
            raise ConfigurationError("user_position must be a whole number")
        if user_position < 0:
            raise ConfigurationError(f"user_position must be >= 0, not {user_position}")
        self._items = memory.items
        self._user_id = user_id
        self._user_position = user_position
        config: dict[str, Any] = dict(index or {})
        if config.get("embed") is not None:
            raise ConfigurationError(
                "StratamemStore embeds with the memory's embedder: open the Memory with "
                "embedder=... instead of passing index['embed']"
            )
        dims = config.get("dims")
        dimension = self._items.dimension
        if dims is not None and dims != dimension:
            raise ConfigurationError(
                f"index['dims'] is {dims}, but the memory's embedder makes {dimension}-"
                "dimensional vectors"
            )
        fields: list[str] = config.get("fields") or ["$"]
        self._fields = [(path, _tokens(path)) for path in fields]

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the operations in order; reads see the store as it was before the batch's
        puts, which are applied together at the end in one transaction (the last put of a
        key wins), as ``InMemoryStore`` does."""
        ops = list(ops)
        for op in ops:
            validate_op_namespace(op)
        results: list[Result] = []
        writes: list[ItemWrite] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(self._get(op))
            elif isinstance(op, SearchOp):
                results.append(self._search(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op))
            elif isinstance(op, PutOp):
                writes.append(self._write(op))
                results.append(None)
            else:
                raise ValueError(f"Unknown operation type: {type(op)}")
        if writes:
            self._items.write(writes)
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """``batch`` in a worker thread (stratamem's API is synchronous)."""
        listed = list(ops)
        return await asyncio.to_thread(self.batch, listed)

    # --- operations -----------------------------------------------------------------------

    def _get(self, op: GetOp) -> Item | None:
        stored = self._items.get(
            user_id=self._owner(op.namespace), namespace=op.namespace, key=op.key
        )
        return _item(stored) if stored is not None else None

    def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix, limit, offset = op.namespace_prefix, op.limit, op.offset
        user_id = self._reader(prefix)
        if not op.filter and not op.query and limit >= 0 and offset >= 0:
            page = self._items.scan(prefix, user_id=user_id, limit=limit, offset=offset)
            return [_search_item(item, None) for item in page]
        if op.query and not op.filter:
            # Every item is ranked, but only the page's values are read.
            refs = self._items.rank(self._items.scan_refs(prefix, user_id=user_id), op.query)
            scores = {entry.item.id: entry.score for entry in refs[offset : offset + limit]}
            chosen = self._items.get_many([e.item for e in refs[offset : offset + limit]])
            return [_search_item(item, scores[item.id]) for item in chosen]
        found = self._items.scan(prefix, user_id=user_id)
        if op.filter:
            wanted = op.filter
            found = [
                item
                for item in found
                if all(_matches(item.value.get(key), value) for key, value in wanted.items())
            ]
        if not op.query:
            return [_search_item(item, None) for item in found[offset : offset + limit]]
        ranked = self._items.rank(found, op.query)[offset : offset + limit]
        return [_search_item(entry.item, entry.score) for entry in ranked]

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conditions = op.match_conditions or ()
        user_id = self._user_id
        if user_id is None:
            for condition in conditions:
                path = condition.path
                if (
                    condition.match_type == "prefix"
                    and len(path) > self._user_position
                    and path[self._user_position] != "*"
                ):
                    user_id = path[self._user_position]
        namespaces = self._items.namespaces(user_id=user_id)
        namespaces = [ns for ns in namespaces if all(_fits(c, ns) for c in conditions)]
        if op.max_depth is not None:
            namespaces = sorted({ns[: op.max_depth] for ns in namespaces})
        return namespaces[op.offset : op.offset + op.limit]

    def _write(self, op: PutOp) -> ItemWrite:
        owner = self._owner(op.namespace)
        if op.value is None:
            return ItemWrite(owner, op.namespace, op.key, None)
        texts: dict[str, str] = {}
        if op.index is not False:
            paths = self._fields if op.index is None else [(p, _tokens(p)) for p in op.index]
            for path, tokens in paths:
                found = get_text_at_path(op.value, tokens)
                if len(found) > 1:
                    texts.update({f"{path}.{i}": text for i, text in enumerate(found)})
                elif found:
                    texts[path] = found[0]
        return ItemWrite(owner, op.namespace, op.key, op.value, texts)

    # --- users ----------------------------------------------------------------------------

    def _owner(self, namespace: tuple[str, ...]) -> str:
        """The user an item of ``namespace`` belongs to."""
        if self._user_id is not None:
            return self._user_id
        if len(namespace) <= self._user_position:
            raise InvalidNamespaceError(
                f"namespace {namespace!r} names no user: this store reads the user from "
                f"label {self._user_position} (user_position)"
            )
        return namespace[self._user_position]

    def _reader(self, prefix: tuple[str, ...]) -> str | None:
        """The one user a prefix reads, or ``None`` when it spans users."""
        if self._user_id is not None:
            return self._user_id
        if len(prefix) > self._user_position:
            return prefix[self._user_position]
        return None


def _tokens(path: str) -> str | list[str]:
    return path if path == "$" else tokenize_path(path)


def _item(stored: StoredItem) -> Item:
    return Item(
        value=stored.value,
        key=stored.key,
        namespace=stored.namespace,
        created_at=stored.created_at,
        updated_at=stored.updated_at,
    )


def _search_item(stored: StoredItem, score: float | None) -> SearchItem:
    return SearchItem(
        namespace=stored.namespace,
        key=stored.key,
        value=stored.value,
        created_at=stored.created_at,
        updated_at=stored.updated_at,
        score=score,
    )


def _fits(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    """Whether a namespace meets a ``list_namespaces`` condition (``*`` matches any label)."""
    path: Sequence[str] = condition.path
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    else:
        raise ValueError(f"Unsupported match type: {condition.match_type}")
    return all(wanted in ("*", label) for label, wanted in pairs)


def _matches(value: Any, wanted: Any) -> bool:
    """Whether a value meets a search filter's condition, with LangGraph's operators
    (``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``) and nested objects and lists."""
    if isinstance(wanted, Mapping):
        if any(str(key).startswith("$") for key in wanted):
            return all(_compare(value, op, operand) for op, operand in wanted.items())
        if not isinstance(value, Mapping):
            return False
        return all(_matches(value.get(key), inner) for key, inner in wanted.items())
    if isinstance(wanted, list | tuple):
        return (
            isinstance(value, list | tuple)
            and len(value) == len(wanted)
            and all(_matches(v, w) for v, w in zip(value, wanted, strict=True))
        )
    return bool(value == wanted)


def _compare(value: Any, operator: str, operand: Any) -> bool:
    if operator == "$eq":
        return bool(value == operand)
    if operator == "$ne":
        return bool(value != operand)
    if operator in ("$gt", "$gte", "$lt", "$lte"):
        try:
            left, right = float(value), float(operand)
        except (TypeError, ValueError):
            # No number to compare (the key is missing, or holds text): no match, where
            # ``InMemoryStore`` raises and a database's JSON comparison yields nothing.
            return False
        return {
            "$gt": left > right,
            "$gte": left >= right,
            "$lt": left < right,
            "$lte": left <= right,
        }[operator]
    raise ValueError(f"Unsupported operator: {operator}")

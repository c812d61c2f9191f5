"""``StratamemStore`` answers as LangGraph's own ``InMemoryStore`` does, on random sequences of
operations (puts, deletes, gets, searches with filters and queries, namespace listings, batches
of several) played against both.

The reference is ``InMemoryStore`` with the same embedding function, with three of its quirks
fixed (``RepairedInMemoryStore``): it keeps a namespace listed forever once a ``get`` looked in
it or its last item was deleted; it keeps an item's old vectors when a put of it indexes other
fields or none; and a batch whose puts hold one text twice fails (``ValueError: Number of
embeddings (1) does not match number of indices (2)``).

A query search ranks differently by design (stratamem's hybrid ranking, not cosine alone), so
for those the test compares what is returned (which items, which are scored, the unscored ones
in order), not the order of the scored ones.

On a database of the module's own: searches whose prefix spans users read every user's items.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from databases import own_database
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.store.base import (
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore
from sqlalchemy import text

from memory import Memory, Settings
from memory.integrations.langgraph import StratamemStore
from retrieval import MINILM_NAME, HashingEmbedder
from storage import Database

EMBEDDER = HashingEmbedder(name=MINILM_NAME)
FIELDS = ["text", "tags[*]"]
WORDS = ["tea", "coffee", "jazz", "cat", "lisbon", "billing", "rain", "piano"]
USERS = ["ann", "bob"]


class _Namespace(dict[str, Item]):
    """A namespace of the reference that exists once it holds an item (not when looked in)."""

    def __init__(self, owner: dict[tuple[str, ...], _Namespace], name: tuple[str, ...]) -> None:
        super().__init__()
        self._owner, self._name = owner, name

    def __setitem__(self, key: str, item: Item) -> None:
        self._owner.setdefault(self._name, self)
        super().__setitem__(key, item)


class _Namespaces(dict[tuple[str, ...], _Namespace]):
    def __missing__(self, name: tuple[str, ...]) -> _Namespace:
        return _Namespace(self, name)


class RepairedInMemoryStore(InMemoryStore):
    """``InMemoryStore`` without its two quirks (see the module docstring)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._data = _Namespaces()  # type: ignore[assignment]

    def _apply_put_ops(self, put_ops: dict[tuple[tuple[str, ...], str], PutOp]) -> None:
        super()._apply_put_ops(put_ops)
        for namespace, _ in put_ops:
            if namespace in self._data and not self._data[namespace]:
                del self._data[namespace]

    def _extract_texts(
        self, put_ops: dict[tuple[tuple[str, ...], str], PutOp]
    ) -> dict[str, list[tuple[tuple[str, ...], str, str]]]:
        # Called after the batch's reads, before its vectors are stored: a put replaces them.
        for namespace, key in put_ops:
            self._vectors[namespace].pop(key, None)
        return super()._extract_texts(put_ops)

    def _insertinmem_store(
        self,
        to_embed: dict[str, list[tuple[tuple[str, ...], str, str]]],
        embeddings: list[list[float]],
    ) -> None:
        # One vector per distinct text, stored at every place the text was found.
        every = [v for v, places in zip(embeddings, to_embed.values(), strict=True) for _ in places]
        super()._insertinmem_store(to_embed, every)


def embed(texts: list[str]) -> list[list[float]]:
    return EMBEDDER.embed(texts)


namespaces = st.sampled_from(
    [(user, *rest) for user in USERS for rest in [("m",), ("m", "x"), ("n",)]]
)
keys = st.sampled_from(["k1", "k2", "k3"])
values = st.fixed_dictionaries(
    {
        "text": st.lists(st.sampled_from(WORDS), max_size=4).map(" ".join),
        "n": st.integers(0, 5),
    },
    optional={
        "tags": st.lists(st.sampled_from(WORDS), max_size=3),
        "meta": st.fixed_dictionaries({"kind": st.sampled_from(["a", "b"])}),
    },
)
puts = st.builds(
    PutOp,
    namespaces,
    keys,
    st.one_of(st.none(), values),  # None deletes
    st.sampled_from([None, None, False, ["text"], ["tags[*]"], ["meta.kind"]]),
)
prefixes = st.sampled_from([(), ("ann",), ("ann", "m"), ("bob",), ("ann", "m", "x"), ("zed",)])
filters = st.sampled_from(
    [
        None,
        {"n": 3},
        {"n": {"$gt": 2}},
        {"n": {"$lte": 1}, "meta": {"kind": "a"}},
        {"n": {"$ne": 0}},
        {"meta": {"kind": "b"}},
        {"tags": ["tea"]},
    ]
)
searches = st.builds(
    SearchOp,
    prefixes,
    filters,
    st.integers(1, 6),
    st.integers(0, 4),
    st.none(),
)
query_searches = st.builds(
    SearchOp, prefixes, filters, st.integers(1, 12), st.just(0), st.sampled_from(WORDS)
)
conditions = st.lists(
    st.builds(
        MatchCondition,
        st.sampled_from(["prefix", "suffix"]),
        st.sampled_from([("ann",), ("*", "m"), ("m",), ("x",), ("bob", "*"), ("n",)]),
    ),
    max_size=2,
).map(lambda found: tuple(found) or None)
listings = st.builds(
    ListNamespacesOp,
    conditions,
    st.one_of(st.none(), st.integers(1, 3)),
    st.integers(1, 10),
    st.integers(0, 3),
)
gets = st.builds(GetOp, namespaces, keys)
operations = st.one_of(puts, puts, puts, gets, searches, query_searches, listings)
batches = st.lists(operations, min_size=1, max_size=4)


@pytest.fixture(scope="module")
def own(database: Database) -> Iterator[Database]:
    with own_database(database, "langgraph") as other:
        yield other


@pytest.fixture(scope="module")
def memory(own: Database) -> Memory:
    return Memory(own, Settings(summary={"mode": "inline"}), embedder=EMBEDDER)


def plain(result: Any) -> Any:
    """A result without what the stores may differ in: times, and the order and scores of
    ranked items (those are compared apart)."""
    if isinstance(result, Item):
        return (result.namespace, result.key, result.value)
    return result


def compare(op: Op, ours: Any, theirs: Any) -> None:
    if isinstance(op, SearchOp) and op.query:
        assert len(ours) == len(theirs)
        assert [plain(i) for i in ours if i.score is None] == [
            plain(i) for i in theirs if i.score is None
        ]
        scored = {(i.namespace, i.key) for i in theirs if i.score is not None}
        if len(theirs) < op.limit:  # the page holds every match: the same ones
            assert {(i.namespace, i.key) for i in ours if i.score is not None} == scored
        return
    if isinstance(op, SearchOp):
        assert [plain(i) for i in ours] == [plain(i) for i in theirs]
        return
    assert plain(ours) == plain(theirs)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(sequence=st.lists(batches, min_size=1, max_size=12))
@pytest.mark.slow
def test_random_sequences_answer_as_in_memory_store_does(
    memory: Memory, own: Database, sequence: list[list[Op]]
) -> None:
    with own.engine.begin() as connection:
        connection.execute(text("TRUNCATE store_items CASCADE"))
    ours = StratamemStore(memory, index={"fields": FIELDS})
    theirs = RepairedInMemoryStore(
        index={"dims": EMBEDDER.dimension, "embed": embed, "fields": FIELDS}
    )

    for batch in sequence:
        got, expected = ours.batch(batch), theirs.batch(batch)

        for op, mine, reference in zip(batch, got, expected, strict=True):
            compare(op, mine, reference)
    every = SearchOp((), None, 1_000, 0, None)
    assert [plain(i) for i in ours.batch([every])[0]] == [
        plain(i) for i in theirs.batch([every])[0]
    ]

"""``ItemStore``: namespaced JSON items (a framework store's memories), their vectors and terms.

An item is a JSON object under a namespace (a tuple of labels) and a key, owned by a user:
every key of the tables leads with ``user_id``, and ``storage.erase`` deletes a user's items
with the rest of the user. Like ``CardStore``, this stores no text analysis of its own and
computes no embedding: callers hand it each indexed text's vector and the item's keyword terms.

Order: items come back as their namespaces were first written (a namespace whose items were all
deleted starts again at the end), then as the items were first written (an update keeps an
item's place). That is the order of LangGraph's ``InMemoryStore``, so the two agree page by page.
"""

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, text

from storage.cards.rows import unit_vector, vector_literal
from storage.driver import driver_autocommit, driver_sql
from storage.engine import Database
from storage.errors import InvalidInputError
from storage.inputs import check_id, check_text, encode_json
from storage.items.records import (
    ITEM_COLUMNS,
    ItemIndexing,
    ItemKey,
    ItemRef,
    StoredItem,
    item_of,
    item_of_tuple,
)
from storage.items.search import ItemQueries

__all__ = [
    "MAX_ITEM_PATH_BYTES",
    "ItemIndexing",
    "ItemKey",
    "ItemRef",
    "ItemStore",
    "StoredItem",
    "check_item_path",
    "encode_item",
    "lock_namespaces",
    "put_item",
]

#: The most UTF-8 bytes a namespace's labels and the key may take together: they are keys of a
#: b-tree index (entries up to about 2,700 bytes) beside a user id of up to 1,024 bytes.
MAX_ITEM_PATH_BYTES = 1_536


def check_item_path(namespace: Sequence[str], key: str) -> None:
    """Raise unless the namespace and key can be stored.

    Raises:
        InvalidInputError: A label or the key is not a string, is empty, holds a NUL or a lone
            surrogate, or together they take more than ``MAX_ITEM_PATH_BYTES``.
    """
    if not namespace:
        raise InvalidInputError("an item's namespace must have at least one label")
    for position, label in enumerate(namespace):
        check_id(f"namespace label {position}", label)
    if not isinstance(key, str) or not key:
        raise InvalidInputError("an item's key must be a non-empty string")
    check_text("item key", key)
    size = sum(len(part.encode()) for part in (*namespace, key))
    if size > MAX_ITEM_PATH_BYTES:
        raise InvalidInputError(
            f"an item's namespace and key take {size:,} bytes; at most "
            f"{MAX_ITEM_PATH_BYTES:,} are allowed"
        )


class ItemStore(ItemQueries):
    """Every user's items; reads name a user, or ``None`` for a prefix that spans users.

    Its searching half (the vector and keyword rankings of chosen items) is ``ItemQueries``.
    """

    def __init__(self, database: Database) -> None:
        """Use ``database`` (migrated: the tables come from migration 17)."""
        self._database = database

    def get(self, where: ItemKey) -> StoredItem | None:
        """The item at ``where``, if stored."""
        with self._database.reading() as connection:
            row = connection.execute(
                text(
                    f"SELECT {ITEM_COLUMNS} FROM store_items WHERE user_id = :user_id "
                    "AND namespace = CAST(:namespace AS text[]) AND key = :key"
                ),
                _key_params(where),
            ).first()
        return item_of(row) if row is not None else None

    def scan(
        self,
        prefix: Sequence[str],
        *,
        user_id: str | None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[StoredItem]:
        """The items whose namespace starts with ``prefix``, in the store's order.

        Args:
            prefix: The leading labels (none: every namespace).
            user_id: The owner, or ``None`` for every user's items under the prefix.
            limit: How many at most (``None``: all).
            offset: How many to skip first.
        """
        params: dict[str, Any] = {
            "prefix": list(prefix),
            "depth": len(prefix),
            "limit": limit,
            "offset": max(offset, 0),
        }
        owner = ""
        if user_id is not None:
            owner = "user_id = :user_id AND "
            params["user_id"] = user_id
        # A namespace's items share its ``namespace_seq`` (``put_item`` takes it under a lock
        # on the namespace), and no other namespace has it.
        sql = (
            f"SELECT {ITEM_COLUMNS} FROM store_items WHERE {owner}"
            "namespace[1:CAST(:depth AS integer)] = CAST(:prefix AS text[]) "
            "ORDER BY namespace_seq, id LIMIT :limit OFFSET :offset"
        )
        # On the driver's own connection: SQLAlchemy's result machinery took most of the time
        # of a scan of thousands of items (``storage.driver``).
        with driver_autocommit(self._database) as connection:
            rows = connection.execute(driver_sql(self._database, sql), params).fetchall()
        return [item_of_tuple(row) for row in rows]

    def scan_refs(self, prefix: Sequence[str], *, user_id: str | None) -> list[ItemRef]:
        """``scan``'s items without their values (a query ranks them all, then reads only
        the page's values: ``get_many``)."""
        params: dict[str, Any] = {"prefix": list(prefix), "depth": len(prefix)}
        owner = ""
        if user_id is not None:
            owner = "user_id = :user_id AND "
            params["user_id"] = user_id
        sql = (
            f"SELECT user_id, id, keyword_length FROM store_items WHERE {owner}"
            "namespace[1:CAST(:depth AS integer)] = CAST(:prefix AS text[]) "
            "ORDER BY namespace_seq, id"
        )
        with driver_autocommit(self._database) as connection:
            rows = connection.execute(driver_sql(self._database, sql), params).fetchall()
        return [ItemRef(user_id, int(item_id), int(length)) for user_id, item_id, length in rows]

    def get_many(self, refs: Sequence[ItemRef]) -> list[StoredItem]:
        """The referenced items, in the order given (one deleted meanwhile is left out)."""
        if not refs:
            return []
        sql = (
            f"SELECT {ITEM_COLUMNS} FROM unnest(CAST(:users AS text[]), CAST(:ids AS bigint[])) "
            "AS c(owner, wanted) JOIN store_items ON user_id = c.owner AND id = c.wanted"
        )
        params = {"users": [ref.user_id for ref in refs], "ids": [ref.id for ref in refs]}
        with driver_autocommit(self._database) as connection:
            rows = connection.execute(driver_sql(self._database, sql), params).fetchall()
        found = {item.id: item for item in map(item_of_tuple, rows)}
        return [found[ref.id] for ref in refs if ref.id in found]

    def namespaces(
        self, prefix: Sequence[str] = (), *, user_id: str | None
    ) -> list[tuple[str, ...]]:
        """Every namespace holding an item under ``prefix`` (of one user, or of all), sorted."""
        params: dict[str, Any] = {"prefix": list(prefix), "depth": len(prefix)}
        owner = ""
        if user_id is not None:
            owner = "user_id = :user_id AND "
            params["user_id"] = user_id
        with self._database.reading() as connection:
            rows = connection.execute(
                text(
                    f"SELECT DISTINCT namespace FROM store_items WHERE {owner}"
                    "namespace[1:CAST(:depth AS integer)] = CAST(:prefix AS text[])"
                ),
                params,
            ).all()
        return sorted(tuple(row.namespace) for row in rows)

    def write(
        self,
        puts: Sequence[tuple[ItemKey, Mapping[str, Any], ItemIndexing | None]],
        deletes: Sequence[ItemKey] = (),
    ) -> None:
        """Store and delete items in one transaction: all of it or none.

        A put of a stored key replaces its value, vectors and terms and keeps its id and
        creation time; a put without indexing leaves it unindexed. Deleting a key nobody
        stored is no error. A namespace keeps its place in the order through the batch, even
        when the batch deletes its last item before putting another (as ``InMemoryStore``
        does: its namespaces are emptied and filled within one batch).

        Raises:
            InvalidInputError: A namespace or key is unusable, a value is not a JSON object
                (or holds a lone surrogate, NaN, a value JSON has no form for).
        """
        encoded = [(where, encode_item(where, value), indexing) for where, value, indexing in puts]
        for where in deletes:
            check_id("user_id", where.user_id)
            check_item_path(where.namespace, where.key)
        with self._database.transaction() as connection:
            lock_namespaces(connection, [*(where for where, _, _ in encoded), *deletes])
            places = {
                namespace: _place(connection, *namespace)
                for namespace in {(where.user_id, where.namespace) for where, _, _ in encoded}
            }
            for where in deletes:
                connection.execute(
                    text(
                        "DELETE FROM store_items WHERE user_id = :user_id "
                        "AND namespace = CAST(:namespace AS text[]) AND key = :key"
                    ),
                    _key_params(where),
                )
            for where, document, indexing in encoded:
                place = places.get((where.user_id, where.namespace))
                put_item(connection, where, document, indexing, place=place)

    def count(self, user_id: str) -> int:
        """How many items the user has."""
        with self._database.reading() as connection:
            found = connection.execute(
                text("SELECT count(*) FROM store_items WHERE user_id = :user_id"),
                {"user_id": user_id},
            ).scalar_one()
        return int(found)


def encode_item(where: ItemKey, value: object) -> str:
    """Check an item's place and value; its value as JSON text for ``put_item``.

    Raises:
        InvalidInputError: The user id, namespace or key is unusable, or the value is not a
            JSON object (or holds a lone surrogate, NaN, a value JSON has no form for).
    """
    check_id("user_id", where.user_id)
    check_item_path(where.namespace, where.key)
    if not isinstance(value, Mapping):
        raise InvalidInputError(
            f"an item's value must be a JSON object, not {type(value).__name__}"
        )
    return encode_json("item value", dict(value))


def lock_namespaces(connection: Connection, places: Sequence[ItemKey]) -> None:
    """Hold the namespaces of ``places`` for this transaction, before any ``put_item`` in it.

    Two writers starting one namespace at once would each give it a new place in the order;
    the second waits here for the first to commit, then finds the place. Taken in one sorted
    order, so two writers never wait for each other in a cycle.
    """
    keys = sorted({"\x1f".join((where.user_id, *where.namespace)) for where in places})
    for key in keys:
        connection.execute(
            text("SELECT pg_advisory_xact_lock(hashtextextended(:key, 17))"), {"key": key}
        )


def put_item(
    connection: Connection,
    where: ItemKey,
    value: str,
    indexing: ItemIndexing | None,
    *,
    created_at: datetime | None = None,
    updated_at: datetime | None = None,
    place: int | None = None,
) -> None:
    """Insert or replace one item (its value from ``encode_item``), then its vectors and
    terms, in the caller's transaction (which holds its namespace: ``lock_namespaces``); the
    times default to the database clock. ``place`` is the namespace's place in the order
    (its ``namespace_seq``), when the caller read it; else the place it has now, or a new one."""
    params: dict[str, Any] = {
        **_key_params(where),
        "created_at": created_at,
        "updated_at": updated_at,
        "place": place,
        "value": value,
        "texts": encode_json("item texts", dict(indexing.texts) if indexing is not None else {}),
        "length": sum(indexing.terms.values()) if indexing is not None else 0,
    }
    row = connection.execute(
        text(
            "INSERT INTO store_items (user_id, namespace, key, id, namespace_seq, value, texts, "
            "keyword_length, created_at, updated_at) "
            "SELECT :user_id, CAST(:namespace AS text[]), :key, s.id, "
            "coalesce(CAST(:place AS bigint), (SELECT namespace_seq FROM store_items "
            "WHERE user_id = :user_id AND namespace = CAST(:namespace AS text[]) LIMIT 1), "
            "s.id), "
            "CAST(:value AS json), CAST(:texts AS json), :length, "
            "coalesce(:created_at, now()), coalesce(:updated_at, now()) "
            "FROM (SELECT nextval('store_items_id_seq') AS id) AS s "
            "ON CONFLICT (user_id, namespace, key) DO UPDATE SET value = excluded.value, "
            "texts = excluded.texts, keyword_length = excluded.keyword_length, "
            "updated_at = excluded.updated_at "
            "RETURNING id, (xmax <> 0) AS updated"
        ),
        params,
    ).one()
    item = {"user_id": where.user_id, "item_id": row.id}
    if row.updated:
        connection.execute(
            text("DELETE FROM store_vectors WHERE user_id = :user_id AND item_id = :item_id"), item
        )
        connection.execute(
            text("DELETE FROM store_terms WHERE user_id = :user_id AND item_id = :item_id"), item
        )
    if indexing is None:
        return
    if indexing.vectors:
        connection.execute(
            text(
                "INSERT INTO store_vectors (user_id, item_id, path, embedding) "
                "VALUES (:user_id, :item_id, :path, CAST(:embedding AS vector))"
            ),
            [
                {**item, "path": path, "embedding": vector_literal(unit_vector(vector))}
                for path, vector in indexing.vectors.items()
            ],
        )
    if indexing.terms:
        connection.execute(
            text(
                "INSERT INTO store_terms (user_id, item_id, term, frequency) "
                "VALUES (:user_id, :item_id, :term, :frequency)"
            ),
            [
                {**item, "term": term, "frequency": frequency}
                for term, frequency in indexing.terms.items()
            ],
        )


def _place(connection: Connection, user_id: str, namespace: tuple[str, ...]) -> int | None:
    """The namespace's place in the order, if it holds an item."""
    found = connection.execute(
        text(
            "SELECT namespace_seq FROM store_items WHERE user_id = :user_id "
            "AND namespace = CAST(:namespace AS text[]) LIMIT 1"
        ),
        {"user_id": user_id, "namespace": list(namespace)},
    ).scalar_one_or_none()
    return int(found) if found is not None else None


def _key_params(where: ItemKey) -> dict[str, Any]:
    return {"user_id": where.user_id, "namespace": list(where.namespace), "key": where.key}

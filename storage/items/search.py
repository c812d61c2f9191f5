"""The searches of ``ItemStore``: the vector and keyword rankings of the items a search chose
(a namespace prefix and a filter), for ``retrieval.items`` to fuse as card searches are."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from sqlalchemy import text

from storage.cards.rows import unit_vector, vector_literal
from storage.engine import Database

__all__ = ["ItemQueries", "ItemTerms", "RankableItem"]


class RankableItem(Protocol):
    """What ranking needs of an item: its owner, id and indexed length."""

    @property
    def user_id(self) -> str:
        """The owner."""
        ...

    @property
    def id(self) -> int:
        """The item's id."""
        ...

    @property
    def keyword_length(self) -> int:
        """How many keyword terms its indexed texts have (0: none)."""
        ...


@dataclass(frozen=True, slots=True)
class ItemTerms:
    """The keyword matches of a set of items: each matched term's frequency in each item."""

    frequencies: dict[int, dict[str, int]]


class ItemQueries:
    """``ItemStore``'s searching half; every statement names each item's owner."""

    _database: Database

    def vector_ranking(
        self, items: Sequence[RankableItem], query: Sequence[float]
    ) -> list[tuple[int, float]]:
        """The given items that have vectors, by their best vector's cosine similarity to
        ``query``, best first (ties by id): ``(item id, similarity)``."""
        if not items:
            return []
        params = {
            "users": [item.user_id for item in items],
            "ids": [item.id for item in items],
            "query": vector_literal(unit_vector(query)),
        }
        # Inner products of unit vectors (a text with no words may embed as zeros: 0, not NaN).
        sql = (
            "SELECT v.item_id, max(-(v.embedding <#> CAST(:query AS vector))) AS score "
            "FROM unnest(CAST(:users AS text[]), CAST(:ids AS bigint[])) AS c(user_id, id) "
            "JOIN store_vectors AS v ON v.user_id = c.user_id AND v.item_id = c.id "
            "GROUP BY v.item_id ORDER BY score DESC, v.item_id"
        )
        with self._database.reading() as connection:
            rows = connection.execute(text(sql), params).all()
        return [(int(row.item_id), float(row.score)) for row in rows]

    def term_matches(self, items: Sequence[RankableItem], terms: Sequence[str]) -> ItemTerms:
        """Each of the given items' frequencies of the wanted keyword terms (for BM25)."""
        wanted = sorted(set(terms))
        indexed = [item for item in items if item.keyword_length > 0]
        if not wanted or not indexed:
            return ItemTerms({})
        params = {
            "users": [item.user_id for item in indexed],
            "ids": [item.id for item in indexed],
            "terms": wanted,
        }
        sql = (
            "SELECT t.item_id, t.term, t.frequency "
            "FROM unnest(CAST(:users AS text[]), CAST(:ids AS bigint[])) AS c(user_id, id) "
            "JOIN store_terms AS t ON t.user_id = c.user_id AND t.item_id = c.id "
            "WHERE t.term = ANY(CAST(:terms AS text[]))"
        )
        frequencies: dict[int, dict[str, int]] = {}
        with self._database.reading() as connection:
            for row in connection.execute(text(sql), params):
                frequencies.setdefault(int(row.item_id), {})[row.term] = int(row.frequency)
        return ItemTerms(frequencies)

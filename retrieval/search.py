"""``CardIndex``: cards embedded and keyword-indexed on the way in, hybrid search on the way out."""

import math
from collections.abc import Iterable, Sequence
from datetime import datetime

from pydantic import Field

from retrieval.embedder import Embedder
from retrieval.errors import EmbedderMismatchError
from retrieval.fusion import weighted_rrf
from retrieval.keywords import analyze, term_frequencies
from retrieval.ranking import CardRanking
from retrieval.recipe import SearchConfig, search_config_for
from retrieval.vectors import DEFAULT_VECTOR_CACHE_BYTES
from storage.cards.store import Card, CardDraft, CardFilter, CardStore, NewCard
from storage.records import Record

__all__ = [
    "NEAR_DUPLICATE_SIMILARITY",
    "CardDraft",
    "CardIndex",
    "CardQuery",
    "ScoredCard",
]

#: Cosine similarity (MiniLM) at or above which a new card is the same statement as one the user
#: has, provided both have the same keyword terms: its sources then merge into that card instead
#: of a new card. Calibrated by ``python -m benchmarks.dedup`` (BENCHMARKS.md, "Near-duplicate
#: cards"): cosine alone cannot tell "User is 34 years old" from "... 35 ..." (0.97) nor two
#: Chinese preferences (0.99), which must supersede, not merge; with the terms guard no pair of
#: different facts merged, and every rewording with the same words (articles, punctuation,
#: tense) did down to 0.85.
NEAR_DUPLICATE_SIMILARITY = 0.85


class CardQuery(Record):
    """What one card search asks for besides the user and the text: passed down whole from
    ``Memory.search`` and recall to ``CardIndex.search``, instead of a dozen keywords at each
    layer.

    Attributes:
        k: How many cards at most.
        where: The filters (types, session, topic, tags, time range, superseded cards, pins),
            every one applied in SQL inside every ranking.
        during: The half-open time window the query asks about (``"last week"``): cards said
            or happening in it are boosted, never required: a window that holds nothing
            relevant (a date resolved against the wrong "now") changes nothing.
        min_score: Drop cards whose cosine similarity to the query is below this.
        diversify: Skip a card all of whose sources are in cards ranked above it (turn cards
            that overlap their neighbours), so ``k`` cards cover more.
    """

    k: int = 4
    where: CardFilter = CardFilter()
    during: tuple[datetime, datetime] | None = None
    min_score: float | None = None
    diversify: bool = True


_DEFAULT_QUERY = CardQuery()


class ScoredCard(Record):
    """A recalled card with its fused score and the two scores it was fused from.

    Attributes:
        card: The card.
        score: The fused score in (0, 1]: 1 means first in both rankings.
        similarity: Cosine similarity between the query and the card.
        keyword_score: BM25 score of the card for the query's terms (0 when none matched).
        terms: The card's search terms as stored (``None`` when the search did not read
            them): recall's relevance gate reads them instead of analysing the text again.
    """

    card: Card
    score: float
    similarity: float
    keyword_score: float
    terms: frozenset[str] | None = Field(default=None, exclude=True, repr=False)


class CardIndex:
    """Adds cards with their embedding and keyword terms, and searches them (vector + BM25)."""

    def __init__(
        self,
        store: CardStore,
        embedder: Embedder,
        *,
        config: SearchConfig | None = None,
        near_duplicate: float = NEAR_DUPLICATE_SIMILARITY,
        vector_cache_bytes: int = DEFAULT_VECTOR_CACHE_BYTES,
    ) -> None:
        """Combine a card store with the embedder its vectors come from.

        Args:
            store: The card store.
            embedder: The embedder; must be the model the store was opened with.
            config: The search recipe (fusion weights, stop words, the relevance gate);
                ``None``: the embedder's default (``search_config_for``).
            near_duplicate: The cosine similarity from which a new card merges into an
                existing one (above 1 turns merging off).
            vector_cache_bytes: The most memory the search may take to keep users' current
                card vectors (``retrieval.vectors``); 0 keeps none, every search scans in SQL.

        Raises:
            EmbedderMismatchError: The store was opened for another model or dimension.
        """
        if (store.model, store.dimension) != (embedder.name, embedder.dimension):
            raise EmbedderMismatchError(
                f"the card store holds {store.model!r} ({store.dimension}) vectors, "
                f"the embedder is {embedder.name!r} ({embedder.dimension})"
            )
        self._store = store
        self._embedder = embedder
        self.config = config or search_config_for(embedder)
        self._weights = (1.0, self.config.keyword_weight)
        self._near_duplicate = near_duplicate
        self._ranking = CardRanking(store, vector_cache_bytes=vector_cache_bytes)

    @property
    def ranking(self) -> CardRanking:
        """The candidates' ranking, with the users' vectors held in this process."""
        return self._ranking

    @property
    def store(self) -> CardStore:
        """The underlying card store."""
        return self._store

    def terms(self, text: str) -> list[str]:
        """The search terms of ``text`` under this index's recipe (its stop words)."""
        return analyze(text, self.config.stop_words)

    def add(self, user_id: str, drafts: Sequence[CardDraft]) -> list[Card]:
        """Embed, analyse and store cards (one embedding batch for all of them).

        A near-duplicate is not stored again: a draft (not a turn, not pinned) with the same
        keyword terms as one of the user's valid cards of the same type, or as an earlier draft
        of the batch, and a cosine similarity to it of at least ``near_duplicate``, merges its
        sources into that card. An identical card (same content hash) merges its sources in
        the store, valid or not.

        Returns:
            The stored cards in order (a merged draft gives the card it merged into).
        """
        if not drafts:
            return []
        vectors = self._embedder.embed([draft.text for draft in drafts])
        cards = [
            NewCard.of(
                draft, embedding=vector, terms=term_frequencies(draft.text, self.config.stop_words)
            )
            for draft, vector in zip(drafts, vectors, strict=True)
        ]
        # Each draft's group leader: itself, an earlier near-duplicate draft, or a stored card.
        leader: list[int] = list(range(len(cards)))
        into: dict[int, int] = {}  # leader draft -> stored card id it merges into
        for position, card in enumerate(cards):
            if not _mergeable(card):
                continue
            twin = next(
                (
                    earlier
                    for earlier in range(position)
                    if leader[earlier] == earlier
                    and _mergeable(cards[earlier])
                    and cards[earlier].type == card.type
                    and cards[earlier].terms.keys() == card.terms.keys()
                    and _cosine(cards[earlier].embedding, card.embedding) >= self._near_duplicate
                ),
                None,
            )
            if twin is not None:
                leader[position] = twin
                continue
            target = self._near_duplicate_of(user_id, card)
            if target is not None:
                into[position] = target
        groups: dict[int, list[int]] = {}
        for position, first in enumerate(leader):
            groups.setdefault(first, []).append(position)
        merged: dict[int, Card] = {}
        new_leaders = [first for first in groups if first not in into]
        stored = self._store.add(
            user_id,
            [
                _with_sources(cards[first], [cards[i] for i in groups[first]])
                for first in new_leaders
            ],
        )
        merged.update(zip(new_leaders, stored, strict=True))
        for first, card_id in into.items():
            members = [cards[i] for i in groups[first]]
            merged[first] = self._store.merge_sources(
                user_id,
                card_id,
                message_ids=[m for c in members for m in c.source_message_ids],
                client_ids=[c_id for c in members for c_id in c.source_client_ids],
            )
        return [merged[first] for first in leader]

    def _near_duplicate_of(self, user_id: str, card: NewCard) -> int | None:
        """The id of the user's valid card of the same type that ``card`` merely rewords."""
        nearest = self._store.search_vector(
            user_id, card.embedding, limit=3, where=CardFilter(types=(card.type,))
        )
        close = [m.card_id for m in nearest if m.score >= self._near_duplicate]
        # Same words (stems, CJK bigrams) too: a changed value ("34" -> "35", 茶 -> 咖啡) can
        # sit as close as a rewording in MiniLM, but it changes the terms.
        for stored in self._store.get_many(user_id, close):
            if term_frequencies(stored.text, self.config.stop_words).keys() == card.terms.keys():
                return stored.id
        return None

    def search(
        self, user_id: str, query: str, request: CardQuery = _DEFAULT_QUERY
    ) -> list[ScoredCard]:
        """Return the user's ``request.k`` cards best matching ``query``, best first.

        The vector ranking (cosine) and the keyword ranking (BM25 over ``analyze``'s terms)
        each contribute their top candidates; with ``request.during``, a third ranking holds
        the nearest cards said or happening in that window. They are fused by weighted
        reciprocal rank. Every filter is applied in SQL, inside every ranking.

        Args:
            user_id: The owner; no other user's card is ever returned.
            query: The (rewritten) query.
            request: How many cards, the filters and the time window (``CardQuery``).

        Returns:
            At most ``k`` scored cards; fewer only when fewer pass the filters (and
            ``min_score``) or, with ``diversify``, when the others add no new source.
        """
        k, where, during, min_score = request.k, request.where, request.during, request.min_score
        if k <= 0:
            return []
        # The vector is asked for only when it is needed: a prefetching embedder may still be
        # embedding the query while the store's statement runs.
        found = self._ranking.candidates(
            user_id, lambda: self._embedder.embed([query])[0], self.terms(query),
            limit=max(self.config.candidates, 5 * k), where=where, during=during,
        )  # fmt: skip
        rankings = [[m.card_id for m in found.dense], [m.card_id for m in found.keyword]]
        rrf_k = self.config.rrf_k
        fused = weighted_rrf(rankings, self._weights, k=rrf_k)
        if during is not None and found.timed:
            # The window's cards in the order the query ranks them (then the window's other
            # near cards): a boost that keeps relevance first among the cards of that time,
            # rather than lifting whatever was said then (measured: BENCHMARKS.md).
            timed = {m.card_id for m in found.timed}
            in_window = [card_id for card_id, _ in fused if card_id in timed]
            in_window += [m.card_id for m in found.timed if m.card_id not in set(in_window)]
            fused = weighted_rrf(
                [*rankings, in_window], [*self._weights, self.config.time_weight], k=rrf_k
            )
        # Scores are scaled so that first in the vector and keyword rankings is 1, with or
        # without a time window: a score means the same whatever the query said about time.
        best = sum(self._weights) / (rrf_k + 1)
        ranked = [
            (card_id, min(1.0, score / best))
            for card_id, score in fused
            if min_score is None or found.similarity.get(card_id, -1.0) >= min_score
        ]
        bm25 = {match.card_id: match.score for match in found.keyword}
        chosen: list[ScoredCard] = []
        covered: set[str] = set()
        # Cards are fetched k at a time, or a few more when diversifying may skip some: without
        # it only a card deleted since the ranking is skipped (a search of recall's asked for
        # 54 cards and used the first 18).
        step = 3 * k if request.diversify else k
        for start in range(0, len(ranked), step):
            pool = ranked[start : start + step]
            cards = {
                c.id: (c, terms)
                for c, terms in self._store.get_many(user_id, [i for i, _ in pool], terms=True)
            }
            for card_id, score in pool:
                found_card = cards.get(card_id)
                if found_card is None:  # deleted between the queries
                    continue
                card, terms = found_card
                sources = _sources(card)
                if request.diversify and sources and sources <= covered:
                    continue
                covered |= sources
                chosen.append(
                    ScoredCard(
                        card=card,
                        score=score,
                        similarity=found.similarity.get(card_id, 0.0),
                        keyword_score=bm25.get(card_id, 0.0),
                        terms=terms,
                    )
                )
                if len(chosen) == k:
                    return chosen
        return chosen

    # Recall reads the cards it needs besides a search through the index too, so long-term
    # memory reaches the store through retrieval only (``benchmarks/package_hops.py``).

    def pins(self, user_id: str) -> list[Card]:
        """The user's pinned cards, oldest first, superseded ones included."""
        return self._store.list_cards(user_id, CardFilter(pinned=True, include_superseded=True))

    def keyed_from_messages(self, user_id: str, message_ids: Sequence[int]) -> list[Card]:
        """The user's cards with a subject and attribute made from any of ``message_ids``,
        superseded ones included (``CardStore.keyed_from_messages``)."""
        return self._store.keyed_from_messages(user_id, message_ids)

    def current_keyed(
        self,
        user_id: str,
        keys: Iterable[tuple[str, str]],
        *,
        prefixes: Iterable[tuple[str, str]] = (),
    ) -> list[Card]:
        """The user's valid cards with one of the (subject, attribute) pairs ``keys``, or an
        attribute starting with one of ``prefixes`` (``CardStore.current_keyed``)."""
        return self._store.current_keyed(user_id, keys, prefixes=prefixes)


def _mergeable(card: NewCard) -> bool:
    """Whether a new card may merge into a near-duplicate: turns are what was said (every one
    is kept), and a pin is the user's explicit word."""
    return card.type != "turn" and not card.pinned


def _cosine(first: Sequence[float], second: Sequence[float]) -> float:
    norm = math.sqrt(math.fsum(v * v for v in first) * math.fsum(v * v for v in second))
    return math.fsum(a * b for a, b in zip(first, second, strict=True)) / norm if norm else 0.0


def _with_sources(card: NewCard, members: Sequence[NewCard]) -> NewCard:
    """``card`` with the sources of every member of its group (itself first)."""
    return card.model_copy(
        update={
            "source_message_ids": list(
                dict.fromkeys(m for c in members for m in c.source_message_ids)
            ),
            "source_client_ids": list(
                dict.fromkeys(i for c in members for i in c.source_client_ids)
            ),
        }
    )


def _sources(card: Card) -> set[str]:
    """A card's sources as comparable keys (stored ids and client ids)."""
    return {f"m{i}" for i in card.source_message_ids} | {f"c{i}" for i in card.source_client_ids}

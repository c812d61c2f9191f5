"""Each user's current card vectors as one matrix in this process, kept fresh by a version,
with the same cards' keyword postings (``retrieval.postings``: read in the same snapshot, so
a search ranks both its rankings here when the statement sees that version).

Loaded through ``CardStore.current_vectors`` (storage reads, retrieval ranks).

Why: the exact per-user vector scan was the largest part of a hybrid search. On the embedded
server (pgvector 0.6.2: no ``halfvec``, no iterative index scans) it reads every current card
of the user from ``ix_cards_user_current_vectors``: about 10 ms of a 21 ms search for 10,000
cards on a quiet machine. The same inner products over a float32 matrix in memory take 1-2 ms,
and the statement, no longer scanning, about 2 ms on the server. Measured interleaved in one
process on the same queries (``benchmarks/recall.py`` prints both as its ``hybrid`` and ``sql``
rows), 10,000 cards, k = 10: p50 31.7 -> 19.2 ms at load 6, 24.5 -> 15.6 ms at load 3.3, the
same cards every time. The other option, a smaller stored vector for a first pass with an exact
re-rank, still reads every row in the server, needs a second copy of every vector written by a
migration, and can miss a neighbour. Users past ``EXACT_SCAN_MAX_CARDS`` keep the HNSW index:
a matrix of 100,000 cards searched no faster than the index, took 154 MB and 3 s to load.

Correct across processes: ``card_stats.version`` (migration 10) takes a new value from one
sequence in the same transaction as every write that changes a user's current cards (a card
added, deleted, superseded or made valid again; merging sources or pinning changes no vector).
The search statement reads the version in its own snapshot and runs the exact scan in SQL
unless it equals the version of this process's matrix (``CardStore.candidates`` with ``held``;
``retrieval.ranking`` compares the versions), so a matrix is used only when it is exactly the
user's current cards as that statement sees them, whoever wrote them. Sequence values are never
reused, so a user whose statistics were deleted and written again cannot match an old matrix.

Bounded: the matrices of all users together take at most ``max_bytes``; the least recently
used users are dropped first, and a user whose matrix alone is larger is never cached (their
searches stay in SQL). The vectors of a card never change, so a refresh after a write fetches
only the cards this process does not hold yet (the ids of the current cards, a few ms for
10,000, and the new vectors); the first search of a user in a process pays the full load after
its answer is computed (10,000 vectors: 0.25-0.56 s at load 3-6).
"""

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from retrieval.postings import HeldPostings
from storage.cards.store import CardMatch, CardStore
from storage.cards.vectors import CurrentVectors

__all__ = ["DEFAULT_VECTOR_CACHE_BYTES", "CardVectors", "UserVectors"]

#: The default bound of all cached matrices of one process: 256 MiB holds about 170,000 cards
#: of 384 dimensions (a user of 10,000 cards takes 15 MB; 20,000, the most held, 31 MB).
DEFAULT_VECTOR_CACHE_BYTES = 256 * 2**20


@dataclass(frozen=True, slots=True)
class UserVectors:
    """One user's current cards at one version: ids ascending, their unit vectors, and their
    keyword postings (``retrieval.postings``; None: not held, the keywords are ranked in SQL)."""

    version: int
    ids: npt.NDArray[np.int64]
    matrix: npt.NDArray[np.float32]
    #: The rows ``matrix`` is the start of, with room after it: cards added later are written
    #: there (by ``CardVectors`` under its lock, only by the user's newest ``UserVectors``),
    #: never into a row an older one can see.
    buffer: npt.NDArray[np.float32]
    postings: HeldPostings | None = None

    @property
    def nbytes(self) -> int:
        """The memory the arrays take."""
        held = 0 if self.postings is None else self.postings.nbytes
        return int(self.ids.nbytes + self.buffer.nbytes + held)

    def nearest(self, query: Sequence[float], limit: int) -> list[CardMatch]:
        """The ``limit`` cards nearest to a unit ``query`` by inner product, best first.

        Ties are broken by id, as the SQL scan does; scores are the cosine similarity.
        """
        if limit <= 0 or len(self.ids) == 0:
            return []
        scores = _inner_products(self.matrix, query)
        if len(scores) > limit:
            picked = np.argpartition(-scores, limit - 1)[:limit]
        else:
            picked = np.arange(len(scores))
        order = picked[np.lexsort((self.ids[picked], -scores[picked]))]
        ids, best = self.ids[order].tolist(), scores[order].tolist()
        return [CardMatch(card_id=i, score=score) for i, score in zip(ids, best, strict=True)]

    def similarities(self, query: Sequence[float], card_ids: Sequence[int]) -> dict[int, float]:
        """The cosine similarity of a unit ``query`` to each given card this matrix holds."""
        if not card_ids or len(self.ids) == 0:
            return {}
        wanted = np.asarray(card_ids, dtype=np.int64)
        rows = np.searchsorted(self.ids, wanted)
        rows = np.minimum(rows, len(self.ids) - 1)
        held = self.ids[rows] == wanted
        scores = _inner_products(self.matrix[rows[held]], query)
        return dict(zip(wanted[held].tolist(), scores.tolist(), strict=True))


def _inner_products(
    matrix: npt.NDArray[np.float32], query: Sequence[float]
) -> npt.NDArray[np.float32]:
    """Each row's inner product with ``query``, on this thread.

    ``einsum``, not ``matrix @ query``: the matrix product goes to OpenBLAS, whose worker
    threads (one per core) spin at every call; on a loaded machine 10,000 x 384 took 7-12 ms
    that way against 1.3-2.8 ms here (measured in one process, alternating, load 2.9).
    """
    products: npt.NDArray[np.float32] = np.einsum(
        "ij,j->i", matrix, np.asarray(query, dtype=np.float32)
    )
    return products


class CardVectors:
    """The cached matrices of this process, by user, within ``max_bytes`` (thread-safe)."""

    def __init__(self, store: CardStore, *, max_bytes: int) -> None:
        """Start empty; nothing is loaded until a user's first ``refresh``.

        Args:
            store: The card store the vectors are read from.
            max_bytes: The most memory all matrices may take together (0 caches nothing).
        """
        self._store = store
        self._dimension = store.dimension
        self._max_bytes = max_bytes
        self._users: OrderedDict[str, UserVectors] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        """The memory the cached matrices take now."""
        return self._bytes

    def get(self, user_id: str) -> UserVectors | None:
        """The user's cached matrix (of whatever version it was loaded at), or None."""
        with self._lock:
            found = self._users.get(user_id)
            if found is not None:
                self._users.move_to_end(user_id)
            return found

    def drop(self, user_id: str) -> None:
        """Forget the user's matrix."""
        with self._lock:
            gone = self._users.pop(user_id, None)
            if gone is not None:
                self._bytes -= gone.nbytes

    def refresh(self, user_id: str) -> UserVectors | None:
        """Load the user's current vectors at the user's current version, and keep them.

        The version and the set of current cards are read in one repeatable-read snapshot;
        only the vectors of cards not held yet are fetched (a card's vector never changes).

        Returns:
            The new matrix, or None when the user has no cards or it would not fit.
        """
        held = self.get(user_id)
        read = self._store.current_vectors(
            user_id,
            known=None if held is None else held.ids.tolist(),
            max_cards=self._max_bytes // self._row_bytes,
            postings_known=held is not None and held.postings is not None,
        )
        if read is None:
            self.drop(user_id)
            return None
        if held is None:
            ids, matrix = read.ids, read.new_rows
            postings = HeldPostings(read.new_postings)
        else:
            count = len(held.ids)
            if len(read.ids) >= count and np.array_equal(read.ids[:count], held.ids):
                # Only cards added (the common write): their rows go after the held ones.
                return self._append(user_id, held, read)
            kept = np.isin(held.ids, read.ids, assume_unique=True)
            ids = np.concatenate([held.ids[kept], read.new_ids])
            matrix = np.concatenate([held.matrix[kept], read.new_rows])
            order = np.argsort(ids, kind="stable")
            ids, matrix = ids[order], matrix[order]
            postings = _postings_after(held, read, removed=int(count - kept.sum()))
        loaded = UserVectors(read.version, ids, *_with_room(matrix), postings)
        with self._lock:
            self._keep_locked(user_id, loaded)
        return loaded

    def _append(self, user_id: str, held: UserVectors, read: CurrentVectors) -> UserVectors:
        """``held`` with cards added after it: written into its room when it still is the
        user's newest matrix and has room (no copy of the others), else copied."""
        count, more = len(held.ids), len(read.new_ids)
        postings = _postings_after(held, read, removed=0)
        with self._lock:
            if self._users.get(user_id) is held and count + more <= len(held.buffer):
                held.buffer[count : count + more] = read.new_rows
                matrix, buffer = held.buffer[: count + more], held.buffer
            else:
                matrix, buffer = _with_room(np.concatenate([held.matrix, read.new_rows]))
            loaded = UserVectors(read.version, read.ids, matrix, buffer, postings)
            self._keep_locked(user_id, loaded)
        return loaded

    @property
    def _row_bytes(self) -> int:
        return 4 * self._dimension + 8

    def _keep(self, user_id: str, loaded: UserVectors) -> None:
        """Store a matrix, dropping the least recently used others until all fit."""
        with self._lock:
            self._keep_locked(user_id, loaded)

    def _keep_locked(self, user_id: str, loaded: UserVectors) -> None:
        old = self._users.pop(user_id, None)
        if old is not None:
            self._bytes -= old.nbytes
        if loaded.nbytes > self._max_bytes:
            return
        while self._users and self._bytes + loaded.nbytes > self._max_bytes:
            _, evicted = self._users.popitem(last=False)
            self._bytes -= evicted.nbytes
        self._users[user_id] = loaded
        self._bytes += loaded.nbytes


def _postings_after(held: UserVectors, read: CurrentVectors, *, removed: int) -> HeldPostings:
    """The postings of ``read``'s current cards: ``held``'s updated with the new cards' (all
    of them read when ``held`` had none), ``removed`` cards having left."""
    if held.postings is None:
        return HeldPostings(read.new_postings)
    return held.postings.updated(read.ids, removed, read.new_ids, read.new_postings)


def _with_room(
    matrix: npt.NDArray[np.float32],
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """A copy of ``matrix`` at the start of a buffer with room for an eighth more rows (at
    least 8), so the cards of the next writes are added without copying the others: the
    matrix and the buffer."""
    room = max(len(matrix) // 8, 8)
    buffer = np.empty((len(matrix) + room, matrix.shape[1]), dtype=np.float32)
    buffer[: len(matrix)] = matrix
    return buffer[: len(matrix)], buffer

"""``PrefetchingEmbedder``: a query's embedding started early, while the database works.

Why: in ``prepare`` with recall, embedding the query with MiniLM on the CPU is the largest single
cost, and it used to start only after the input was stored and the window read (round trips
during which this process waits on the server). The input is known when ``prepare`` starts, and
most inputs are searched as written (the rewrite resolves a reference only now and then), so
its embedding can start first, on a thread of its own (torch and psycopg both release the
GIL), and be ready, or nearly, when the search asks for it. A rewritten query, or any other
text, is embedded as before; a prefetched text nobody asks for is dropped after
``max_pending`` newer ones.
"""

import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from retrieval.embedder import Embedder
from retrieval.held_texts import hold_texts

__all__ = ["PrefetchingEmbedder"]


class PrefetchingEmbedder:
    """Wraps an embedder; ``prefetch(text)`` embeds ``text`` in the background for a later
    ``embed([text])``. Anything else passes through unchanged."""

    def __init__(self, inner: Embedder, *, max_pending: int = 8) -> None:
        """Wrap ``inner``; the background thread starts with the first ``prefetch``.

        Args:
            inner: The embedder doing the work.
            max_pending: The most prefetched texts kept waiting for their ``embed``.
        """
        self._inner = inner
        self._max_pending = max_pending
        self._pending: OrderedDict[str, Future[list[float]]] = OrderedDict()
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        #: How many prefetched vectors an ``embed`` took (the rest were dropped or are pending).
        self.handed_over = 0
        hold_texts(self.forget)

    @property
    def name(self) -> str:
        """The inner model's name."""
        return self._inner.name

    @property
    def dimension(self) -> int:
        """The inner model's dimension."""
        return self._inner.dimension

    @property
    def pending(self) -> int:
        """How many prefetched texts wait for their ``embed``."""
        with self._lock:
            return len(self._pending)

    def prefetch(self, text: str) -> None:
        """Start embedding ``text`` in the background; never raises (``embed`` will)."""
        with self._lock:
            if text in self._pending:
                return
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix="query-embedding")
            self._pending[text] = self._executor.submit(self._one, text)
            while len(self._pending) > self._max_pending:
                self._pending.popitem(last=False)[1].cancel()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """The vectors of ``texts``: a single prefetched text's from its background run.

        Raises:
            Whatever the inner embedder raises, for a prefetched text too.
        """
        if len(texts) == 1:
            with self._lock:
                future = self._pending.pop(texts[0], None)
            if future is not None and not future.cancelled():
                vector = future.result()
                with self._lock:
                    self.handed_over += 1
                return [vector]
        return self._inner.embed(texts)

    def forget(self, _user_id: str) -> None:
        """Drop every prefetched text still waiting (``retrieval.held_texts``: they are inputs,
        not known by user); an ``embed`` of one embeds it then."""
        with self._lock:
            dropped = list(self._pending.values())
            self._pending.clear()
        for future in dropped:
            future.cancel()

    def _one(self, text: str) -> list[float]:
        [vector] = self._inner.embed([text])
        return vector

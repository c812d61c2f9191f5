"""Card search latency for one user among many, exact scan vs HNSW, and the index's recall@10.

    python -m benchmarks.recall [--data-dir DIR] [--queries 200] [--only-10k] [--prepare-only]
                                [--torch-threads N]

(``DIR`` defaults to ``/tmp/stratamem-bench-recall``.)

Loads (once; later runs reuse the folder) a cards table of many users: 10 users with 10,000
cards each, one user with 10,000 and one with 100,000 (210,000 rows), with random unit vectors
and random keyword terms generated inside Postgres (embedding 210,000 texts with MiniLM on two
cores would take most of an hour). The vectors are clustered like real embeddings (2,000 random
centroids plus noise, cosine about 0.5 within a cluster) rather than uniform: uniform random
vectors in 384 dimensions have no near neighbours at all, which makes any index's recall
meaningless (it measured 0.14 there). Queries are drawn the same way. Then,
for the 10k and the 100k user: vector search p50/p95 by exact scan and by the index (k=10),
the index's recall@10 against the exact scan, and the whole hybrid ``CardIndex.search``
(vector + BM25 + fusion + fetching the cards; the query's embedding is given, not computed),
as a process runs it (``hybrid``: the user's current vectors held in memory after the first
search, ``storage.cards.vectors``) and with no vectors held (``sql``: the exact scan in SQL).
Last, ``Memory.prepare`` with recall on for the 10k user: storing the input, the window, the
pins, the query rewrite, MiniLM embedding the query, the search and assembling the context.
Each row ends with the CPU steal during its timed calls (``benchmarks.machine``).
"""

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Literal

from sqlalchemy import text

from benchmarks.machine import CpuSteal, machine_state
from memory import Memory, Settings
from retrieval import (
    MINILM_DIMENSION,
    MINILM_NAME,
    CardIndex,
    CardQuery,
    SentenceTransformerEmbedder,
    normalize,
)
from retrieval.sentence_transformer import DEFAULT_TORCH_THREADS
from storage import CardStore, Database

USERS = {"bench-10k": 10_000, "bench-100k": 100_000}
CROWD = {f"bench-crowd-{i}": 10_000 for i in range(10)}
VOCABULARY = 5_000
CENTROIDS = 2_000
# Noise per dimension relative to a centroid's (both uniform, centred): 1.0 gives a cosine of
# about 0.7 to the centroid and 0.5 between two members of a cluster.
NOISE = 1.0
TERMS_PER_CARD = 8


class GivenVector:
    """An embedder that returns a prepared vector, so the benchmark times search, not MiniLM."""

    name = MINILM_NAME
    dimension = MINILM_DIMENSION

    def __init__(self) -> None:
        self.vector: list[float] = []

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.vector for _ in texts]


def load(database: Database, user_id: str, count: int) -> None:
    """Insert ``count`` cards of random vectors and random terms for a user, in SQL."""
    with database.transaction() as session:
        done = session.execute(
            text("SELECT cards FROM card_stats WHERE user_id = :u"), {"u": user_id}
        ).scalar_one_or_none()
        if done == count:
            return
        session.execute(
            text(
                """
                INSERT INTO cards (user_id, type, text, content_hash, embedding, keyword_length)
                SELECT :u, 'fact', 'card ' || g, md5(:u || g),
                       -- unit length, as CardStore.add stores every vector
                       (SELECT array_agg(x / vector_norm(raw) ORDER BY i)
                        FROM unnest(raw::real[]) WITH ORDINALITY AS u(x, i))::vector,
                       :terms
                FROM generate_series(1, :n) AS g
                JOIN bench_centroids AS c ON c.id = (hashtext(:u || g) & 2147483647) % :k
                CROSS JOIN LATERAL (
                    SELECT c.v + (SELECT array_agg((random() - 0.5) * :noise)
                                  FROM generate_series(1, 384) WHERE g > 0)::vector AS raw
                ) AS r
                """
            ),
            {"u": user_id, "n": count, "terms": TERMS_PER_CARD, "noise": NOISE, "k": CENTROIDS},
        )
        # Zipf-like term choice: a few common terms, a long tail of rare ones.
        session.execute(
            text(
                """
                INSERT INTO card_terms (user_id, term, card_id, frequency, keyword_length)
                SELECT :u, term, id, count(*), :t FROM (
                    SELECT c.id, 'w' || floor(power(random(), 3) * :v)::int AS term
                    FROM cards AS c, generate_series(1, :t) AS i
                    WHERE c.user_id = :u
                ) AS t GROUP BY term, id
                """
            ),
            {"u": user_id, "v": VOCABULARY, "t": TERMS_PER_CARD},
        )
        # The keyword search reads each term's document frequency here (migration 15), which
        # storage keeps on every write of card_terms: the inserts above are not storage's.
        session.execute(
            text(
                "INSERT INTO card_term_counts (user_id, term, cards) "
                "SELECT :u, term, count(*) FROM card_terms WHERE user_id = :u GROUP BY term "
                "ON CONFLICT (user_id, term) DO UPDATE SET cards = excluded.cards"
            ),
            {"u": user_id},
        )
        session.execute(
            text(
                "INSERT INTO card_stats (user_id, cards, keyword_length) VALUES (:u, :n, :l) "
                "ON CONFLICT (user_id) DO UPDATE SET cards = :n, keyword_length = :l, "
                "version = nextval('card_stats_version_seq')"
            ),
            {"u": user_id, "n": count, "l": count * TERMS_PER_CARD},
        )


def timed(call: Callable[[], object], runs: int) -> tuple[float, float, str]:
    """Return p50 and p95 in milliseconds of ``runs`` calls (after 5 warm-up calls), and the
    share of CPU time the host took from this machine meanwhile (``benchmarks.machine``)."""
    for _ in range(5):
        call()
    samples = []
    steal = CpuSteal()
    for _ in range(runs):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    share = steal.share()
    stolen = f"{100 * share:6.1f}" if share is not None else f"{'-':>6}"
    return statistics.median(samples), samples[int(0.95 * (len(samples) - 1))], stolen


def measure(
    store: CardStore,
    indexes: dict[str, CardIndex],
    given: GivenVector,
    user_id: str,
    count: int,
    runs: int,
    rng: random.Random,
    centroids: list[list[float]],
) -> None:
    """Print exact, index and hybrid latency for one user, and the index's recall@10.

    ``indexes`` are the hybrid searches to time by row name: ``hybrid`` (the default store,
    the user's vectors held in this process after the first search) and ``sql`` (a store
    keeping no vectors: every search scans in SQL).
    """
    queries = [
        normalize([x + (rng.random() - 0.5) * NOISE for x in rng.choice(centroids)])
        for _ in range(runs)
    ]
    exact = [store.search_vector(user_id, q, limit=10, method="exact") for q in queries]
    indexed = [store.search_vector(user_id, q, limit=10, method="index") for q in queries]
    assert all(len(found) == 10 for found in indexed), "the index returned fewer than k"
    overlap = statistics.mean(
        len({m.card_id for m in e} & {m.card_id for m in i}) / 10
        for e, i in zip(exact, indexed, strict=True)
    )
    methods: tuple[Literal["exact", "index"], ...] = ("exact", "index")
    for method in methods:
        cycle = iter(queries * 100)

        def vector(
            m: Literal["exact", "index"] = method, c: Iterator[list[float]] = cycle
        ) -> object:
            return store.search_vector(user_id, next(c), limit=10, method=m)

        p50, p95, steal = timed(vector, runs)
        recall = overlap if method == "index" else 1.0
        print(f"{count:>10} {method:>8} {p50:8.2f} {p95:8.2f} {recall:9.3f} {steal}", flush=True)
    words = [f"w{rng.randrange(200)}" for _ in range(runs * 3)]
    for name, index in indexes.items():
        vectors = iter(queries * 100)
        terms = iter(words * 100)

        def hybrid(
            i: CardIndex = index, v: Iterator[list[float]] = vectors, t: Iterator[str] = terms
        ) -> object:
            given.vector = next(v)
            return i.search(user_id, " ".join(next(t) for _ in range(3)), CardQuery(k=10))

        p50, p95, steal = timed(hybrid, runs)
        print(f"{count:>10} {name:>8} {p50:8.2f} {p95:8.2f} {'auto':>9} {steal}", flush=True)


PREPARE_INPUTS = [
    "What did we decide about the database last week?",
    "Can you remind me what my daughter is called?",
    "Which city did I say I was moving to?",
    "What was the name of the book you recommended?",
    "How did the charity race go?",
]


def measure_prepare(
    database: Database, user_id: str, count: int, runs: int, threads: int | None
) -> None:
    """Print ``Memory.prepare`` p50/p95 with recall on (MiniLM embeds every query).

    Each call is the next turn of its own short session (two earlier messages), as in a chat
    that just resumed: one long session would grow the window, and with it how many cards
    recall asks for (``k`` plus twice the window), with every call.
    """
    memory = Memory(database, Settings(), embedder=SentenceTransformerEmbedder(threads=threads))
    run = time.time_ns()
    sessions = [f"bench-prepare-{run}-{i}" for i in range(runs + 5)]
    for session in sessions:
        memory.record(
            user_id=user_id,
            session_id=session,
            messages=[
                {"role": "user", "content": "Hi, I am back."},
                {"role": "assistant", "content": "Welcome back! How can I help?"},
            ],
        )
    calls = iter(zip(sessions, PREPARE_INPUTS * runs, strict=False))

    def prepare() -> object:
        session, question = next(calls)
        context = memory.prepare(user_id=user_id, session_id=session, input=question)
        assert context.report.recall is not None and not context.report.recall.failed
        return context

    p50, p95, steal = timed(prepare, runs)
    print(f"{count:>10} {'prepare':>8} {p50:8.2f} {p95:8.2f} {'auto':>9} {steal}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/stratamem-bench-recall"))
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument(
        "--only-10k", action="store_true", help="skip the 100k user (its rows take minutes)"
    )
    parser.add_argument("--prepare-only", action="store_true", help="only the prepare row")
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=DEFAULT_TORCH_THREADS or 0,
        help="torch intra-op threads for the prepare row (default: the embedder's, "
        f"{DEFAULT_TORCH_THREADS or 0}; 0: torch's own choice)",
    )
    args = parser.parse_args(argv)
    database = Database.open(None, data_dir=args.data_dir)
    store = CardStore(database, model=MINILM_NAME, dimension=MINILM_DIMENSION)
    started = time.perf_counter()
    everyone = {**CROWD, **USERS}
    if store.count("bench-100k") != USERS["bench-100k"]:
        # Building the HNSW graph once after loading is much faster than row by row.
        with database.transaction() as session:
            session.execute(text("DROP INDEX IF EXISTS ix_cards_embedding_hnsw"))
        with database.transaction() as session:
            session.execute(
                text(
                    "CREATE TABLE IF NOT EXISTS bench_centroids (id int PRIMARY KEY, v vector(384))"
                )
            )
            session.execute(
                text(
                    "INSERT INTO bench_centroids SELECT i, (SELECT array_agg(random() - 0.5) "
                    "FROM generate_series(1, 384) WHERE i >= 0)::vector "
                    "FROM generate_series(0, :k - 1) AS i ON CONFLICT DO NOTHING"
                ),
                {"k": CENTROIDS},
            )
        for user_id, count in everyone.items():
            load(database, user_id, count)
            print(f"loaded {user_id} ({time.perf_counter() - started:.0f}s)", flush=True)
    with database.transaction() as session:
        session.execute(text("SET LOCAL maintenance_work_mem = '2GB'"))
        session.execute(
            text(
                "CREATE INDEX IF NOT EXISTS ix_cards_embedding_hnsw ON cards "
                "USING hnsw (embedding vector_cosine_ops)"
            )
        )
    with database.engine.connect() as connection:
        total = connection.execute(text("SELECT count(*) FROM cards")).scalar_one()
        connection.execute(text("ANALYZE cards"))
        connection.execute(text("ANALYZE card_terms"))
        connection.execute(text("ANALYZE card_term_counts"))
        connection.commit()
    print(f"{total} cards in the table (loaded in {time.perf_counter() - started:.0f}s)")
    with database.reading() as connection:
        centroids = [
            [float(x) for x in row.v.strip("[]").split(",")]
            for row in connection.execute(text("SELECT v::text AS v FROM bench_centroids"))
        ]
    rng = random.Random(1)
    given = GivenVector()
    indexes = {
        "hybrid": CardIndex(store, given),
        "sql": CardIndex(store, given, vector_cache_bytes=0),
    }
    print(
        f"{'cards/user':>10} {'method':>8} {'p50 ms':>8} {'p95 ms':>8} {'recall@10':>9}"
        f" {'steal%':>6}",
        flush=True,
    )
    steal = CpuSteal()
    print(f"before: {machine_state()}", flush=True)
    for user_id, count in USERS.items():
        if args.prepare_only or (args.only_10k and count > 10_000):
            continue
        measure(store, indexes, given, user_id, count, args.queries, rng, centroids)
    threads = args.torch_threads or None
    measure_prepare(database, "bench-10k", USERS["bench-10k"], args.queries, threads)
    print(f"after: {machine_state(steal)} (the run)", flush=True)
    database.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

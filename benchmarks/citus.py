"""stratamem on a Citus cluster against the single embedded server, in one run.

1. Latency: the same users and messages are written to both databases, then ``prepare``
   (short-term: cards off; with recall: cards on), ``record`` and ``search`` are timed on each,
   the two databases in turn (so a change of machine load touches both alike). p50 and p90 in
   ms, and the difference of the p50s (the issue's goal: within +3 ms).
2. Spread: rows per shard of ``messages`` and ``cards`` for ``--spread-users`` users.
3. Rebalance: a third worker is added and ``citus_rebalance_start`` moves shards to it while a
   load (record then prepare, users in turn) runs; every request must succeed and every
   message acknowledged must be stored once afterwards.

Cards come from the model-free hashing embedder: what is compared is the database's part of
each request (the embedding of a query costs the same on both). The cluster is a coordinator
and two workers on this machine's loopback (``scripts/citus``): every hop between nodes is
local, and all nodes share the same cores, so this measures the cost Citus adds (planning and
one hop to a worker), not the scaling a cluster of machines gives.

    scripts/citus build && .venv/bin/python -m benchmarks.citus
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import text

from benchmarks.machine import CpuSteal, machine_state
from memory import Memory, Settings
from storage import Database, StorageError
from storage.citus_cluster import Cluster

REPO = Path(__file__).resolve().parents[1]
FACTS = (
    "I moved to Lisbon in May and work at a bakery near the river.",
    "My sister Ana plays the cello in the city orchestra.",
    "I am allergic to peanuts and avoid Thai food because of it.",
    "We adopted a grey cat called Miso last winter.",
    "I run the half marathon every October with my friend Rui.",
)


def settings(cards: bool) -> Settings:
    return Settings(
        cards={"enabled": cards, "embedder": "hashing", "debounce_seconds": 0},
        reports={"enabled": False},
    )


def fill(mem: Memory, users: list[str], turns: int) -> None:
    """Each user: ``turns`` exchanges in one session, then the worker's summaries and cards."""
    for user in users:
        for turn in range(turns):
            fact = FACTS[turn % len(FACTS)]
            mem.record(
                user_id=user,
                session_id="history",
                messages=[
                    {"role": "user", "content": f"{fact} (turn {turn})"},
                    {"role": "assistant", "content": f"Noted: {fact}"},
                ],
            )
    mem.run_worker(until_idle=True)


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


def requests(
    short: Memory, recall: Memory, user: str, session: str
) -> dict[str, Callable[[], object]]:
    """The timed requests of one round, on one database."""
    return {
        "prepare (short-term)": lambda: short.prepare(
            user_id=user, session_id=session, input="What did I tell you about Miso?"
        ),
        "record": lambda: short.record(
            user_id=user,
            session_id=session,
            messages=[{"role": "assistant", "content": "Miso is your grey cat."}],
        ),
        "prepare (with recall)": lambda: recall.prepare(
            user_id=user, session_id=session, input="Where do I work these days?"
        ),
        "search": lambda: recall.search(user_id=user, query="sister cello orchestra"),
    }


def latency(mems: dict[str, dict[str, Memory]], users: list[str], rounds: int) -> None:
    """Time each operation on each database, the databases in turn."""
    samples: dict[tuple[str, str], list[float]] = {}
    for index in range(rounds):
        user = users[index % len(users)]
        session = f"bench-{index}"
        for where, pair in mems.items():
            operations = requests(pair["short"], pair["recall"], user, session)
            for name, action in operations.items():
                samples.setdefault((name, where), []).append(timed(action))
    print("| operation | embedded p50 | Citus p50 | difference | embedded p90 | Citus p90 |")
    print("|---|---|---|---|---|---|")
    for name in ("prepare (short-term)", "prepare (with recall)", "record", "search"):
        single, cluster = samples[(name, "embedded")], samples[(name, "citus")]
        p50s = statistics.median(single), statistics.median(cluster)
        p90s = quantile(single, 0.9), quantile(cluster, 0.9)
        print(
            f"| {name} | {p50s[0]:.1f} ms | {p50s[1]:.1f} ms | {p50s[1] - p50s[0]:+.1f} ms "
            f"| {p90s[0]:.1f} ms | {p90s[1]:.1f} ms |"
        )


def quantile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def spread(database: Database, mem: Memory, users: int) -> None:
    """Rows per shard of messages and cards once ``users`` more users wrote a little each."""
    for index in range(users):
        user = f"spread-{index}-{uuid.uuid4().hex[:6]}"
        mem.record(
            user_id=user,
            session_id="s1",
            messages=[
                {"role": "user", "content": FACTS[index % len(FACTS)]},
                {"role": "assistant", "content": "Noted."},
            ],
        )
        mem.remember(user_id=user, text=FACTS[(index + 1) % len(FACTS)])
    with database.engine.connect() as connection:
        # The users themselves (the few heavy users of the latency rounds aside).
        per_shard = [
            int(row[0])
            for row in connection.execute(
                text(
                    "SELECT result FROM run_command_on_shards('sessions', "
                    "'SELECT count(*) FROM %s WHERE left(user_id, 7) = ''spread-''')"
                )
            )
        ]
        print(
            f"{users} users: per shard min {min(per_shard)}, median "
            f"{statistics.median(per_shard):.0f}, max {max(per_shard)} "
            f"(an even spread: {users / len(per_shard):.0f})"
        )
        for table in ("messages", "cards"):
            counts = [
                int(row[1])
                for row in connection.execute(
                    text(
                        "SELECT shardid, result FROM run_command_on_shards("
                        f"'{table}', 'SELECT count(*) FROM %s')"
                    )
                )
            ]
            print(
                f"{table}: {len(counts)} shards, rows per shard min {min(counts)}, "
                f"median {statistics.median(counts):.0f}, max {max(counts)}, "
                f"total {sum(counts)}"
            )
        nodes = connection.execute(
            text(
                "SELECT nodeport, count(*) FROM citus_shards WHERE table_name = "
                "CAST('messages' AS regclass) GROUP BY nodeport ORDER BY nodeport"
            )
        ).all()
        print("messages shards per node:", {int(port): int(n) for port, n in nodes})


def rebalance(cluster: Cluster, database: Database, mem: Memory) -> None:
    """Add a worker and rebalance onto it while a load runs; nothing lost, nothing failed."""
    users = [f"rebalance-{n}-{uuid.uuid4().hex[:6]}" for n in range(40)]
    acknowledged: dict[str, int] = dict.fromkeys(users, 0)
    failures: list[str] = []
    latencies: list[float] = []
    halt = threading.Event()

    def load() -> None:
        turn = 0
        while not halt.is_set():
            user = users[turn % len(users)]
            try:
                started = time.perf_counter()
                mem.prepare(user_id=user, session_id="s1", input=f"message {turn}")
                latencies.append((time.perf_counter() - started) * 1000)
                acknowledged[user] += 1
            except StorageError as error:
                failures.append(str(error)[:200])
            turn += 1

    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    time.sleep(2)
    started = time.perf_counter()
    added = cluster.add_worker()
    with database.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        c.execute(text("SELECT citus_rebalance_start()"))
        while True:
            state = c.scalar(text("SELECT state FROM citus_rebalance_status()"))
            if state in ("finished", "failed", "cancelled"):
                break
            time.sleep(1)
        moved = c.scalar(
            text("SELECT count(*) FROM citus_shards WHERE nodeport = :p"), {"p": added.port}
        )
    took = time.perf_counter() - started
    time.sleep(2)
    halt.set()
    worker.join()
    stored = {user: len(mem.history(user_id=user, session_id="s1")) for user in acknowledged}
    lost = sum(acknowledged[user] - stored[user] for user in users)
    print(
        f"rebalance onto a third worker: {state} in {took:.0f} s, {moved} shards on it; "
        f"{sum(acknowledged.values())} prepares during it, {len(failures)} failed, "
        f"{lost} messages lost; prepare p50 {statistics.median(latencies):.1f} ms, "
        f"max {max(latencies):.0f} ms"
    )
    for failure in failures[:5]:
        print("  failed:", failure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--turns", type=int, default=30, help="exchanges per user")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--spread-users", type=int, default=1_000)
    arguments = parser.parse_args()
    steal = CpuSteal()
    with tempfile.TemporaryDirectory() as folder:
        subprocess.run(
            ["bash", str(REPO / "scripts" / "citus"), "start", f"{folder}/cluster"],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        cluster = Cluster(Path(folder) / "cluster")
        try:
            databases = {
                "embedded": Database.open(None, data_dir=Path(folder) / "embedded"),
                "citus": Database.open(cluster.url),
            }
            mems = {
                where: {"short": Memory(db, settings(False)), "recall": Memory(db, settings(True))}
                for where, db in databases.items()
            }
            users = [f"bench-{n}-{uuid.uuid4().hex[:6]}" for n in range(arguments.users)]
            for pair in mems.values():
                fill(pair["recall"], users, arguments.turns)
            print(
                f"{arguments.users} users x {arguments.turns} exchanges each, "
                f"{arguments.rounds} rounds; {machine_state(steal)}"
            )
            latency(mems, users, arguments.rounds)
            print(f"after the latency rounds: {machine_state(steal)}")
            spread(databases["citus"], mems["citus"]["recall"], arguments.spread_users)
            rebalance(cluster, databases["citus"], mems["citus"]["short"])
            print(f"at the end: {machine_state(steal)}")
            for db in databases.values():
                db.close()
        finally:
            cluster.clean()


if __name__ == "__main__":
    main()

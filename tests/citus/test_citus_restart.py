"""A worker node of the cluster restarted while requests run: nothing acknowledged is lost.

Writes to the users whose shards are on the stopped node fail with ``StorageError`` while it
is down (those on the other node go on); each is retried with the same client ids until it is
stored, and in the end every session holds each message exactly once, in order.
"""

from __future__ import annotations

import threading
import uuid

import pytest
from sqlalchemy import text

from memory import Memory, Settings
from storage import Database, StorageError
from storage.citus_cluster import Cluster, wait_accepting

_USERS = 8


def _node_of(database: Database, user_id: str) -> int:
    with database.engine.connect() as connection:
        return int(
            connection.scalar(
                text(
                    "SELECT n.nodeport FROM pg_dist_placement AS p "
                    "JOIN pg_dist_node AS n USING (groupid) "
                    "WHERE p.shardid = get_shard_id_for_distribution_column("
                    "  'messages', CAST(:u AS text))"
                ),
                {"u": user_id},
            )
        )


class Writer(threading.Thread):
    """Records numbered messages to its users in turn, retrying a failed one (same ids)."""

    def __init__(self, mem: Memory, users: list[str]) -> None:
        super().__init__(daemon=True)
        self.mem, self.users = mem, users
        self.stored = 0
        self.failures: list[StorageError] = []
        self.halt = threading.Event()
        self.progress = threading.Condition()

    def run(self) -> None:
        turn = 0
        while not self.halt.is_set():
            user = self.users[turn % len(self.users)]
            message = {"role": "user", "content": f"turn {turn}", "id": f"m-{turn}"}
            try:
                self.mem.record(user_id=user, session_id="s1", messages=[message])
            except StorageError as error:
                with self.progress:
                    self.failures.append(error)
                    self.progress.notify_all()
                continue  # the same message again
            turn += 1
            with self.progress:
                self.stored += 1
                self.progress.notify_all()

    def wait_for(self, what: str, done: object) -> None:
        with self.progress:
            assert self.progress.wait_for(done, timeout=120), f"timed out waiting for {what}"  # type: ignore[arg-type]


def test_a_worker_node_restarted_mid_run_loses_nothing(
    citus_cluster: Cluster | None, citus_database: Database
) -> None:
    if citus_cluster is None:
        pytest.skip("restarts a node: needs the cluster scripts/citus started, not a given URL")
    mem = Memory(citus_database, Settings(cards={"enabled": False}, reports={"enabled": False}))
    victim = citus_cluster.node("worker1")
    users = [f"u-{uuid.uuid4()}" for _ in range(_USERS)]
    on_victim = [user for user in users if _node_of(citus_database, user) == victim.port]
    assert on_victim and len(on_victim) < len(users), "the users should span both workers"
    writer = Writer(mem, users)
    writer.start()
    try:
        writer.wait_for("writes before the stop", lambda: writer.stored >= 10)
        citus_cluster.stop_node(victim.name, mode="immediate")
        writer.wait_for("a write failing while the node is down", lambda: writer.failures)
        citus_cluster.start_node(victim.name)
        wait_accepting(victim)
        before = writer.stored
        writer.wait_for("writes after the restart", lambda: writer.stored >= before + 20)
    finally:
        writer.halt.set()
        writer.join(timeout=120)

    assert writer.failures
    # Every message acknowledged (and every one retried) is stored once, in turn order.
    written = writer.stored
    stored = {
        user: [m.payload["content"] for m in mem.history(user_id=user, session_id="s1")]
        for user in users
    }
    for index, user in enumerate(users):
        expected = [f"turn {t}" for t in range(index, written, len(users))]
        assert stored[user] == expected, user

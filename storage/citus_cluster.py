"""A Citus cluster on this machine, for the distributed tests and the benchmark: a coordinator
and workers on loopback ports, run from pgserver's PostgreSQL with Citus built into it
(``scripts/citus`` builds it and starts a cluster with this module).

A test cluster, not a deployment (see docs/scaling.md for one): every node trusts connections
from 127.0.0.1, so any account on this machine can reach it while it runs. Put no real data in
it.

The cluster lives in one folder: a data folder per node (``coordinator``, ``worker1``, ...),
``cluster.json`` (the nodes and their ports) and ``url`` (the coordinator's URL). As root the
nodes run as the ``pgserver`` account, started from inside their data folders (see
``storage.embedded.programs``), so the folders above them need no permission for it; their
programs come from a copy that account can read, made once per build (named by its content,
so a copy made before Citus was installed is never used).

Usage: ``python -m storage.citus_cluster start|stop|clean FOLDER``.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

from storage.embedded.install import content_fingerprint, shared_copy
from storage.embedded.programs import (
    SHARED_PROGRAMS_ROOT,
    Account,
    binaries_folder,
    server_account,
)

__all__ = ["Cluster", "Node"]

_HOST = "127.0.0.1"
_TIMEOUT_SECONDS = 120
# Postgres settings of every node. Logical replication lets the rebalancer move shards while
# writes go on; prepared transactions are Citus's two-phase commit across nodes.
_SETTINGS = {
    "shared_preload_libraries": "'citus'",
    "listen_addresses": f"'{_HOST}'",
    "unix_socket_directories": "''",
    "max_connections": "200",
    "max_prepared_transactions": "200",
    "wal_level": "logical",
    "max_replication_slots": "16",
    "max_wal_senders": "16",
    "fsync": "off",
    "citus.shard_count": "32",
}


@dataclass(frozen=True)
class Node:
    """One server of the cluster: its name (and data folder's) and its port."""

    name: str
    port: int

    def conninfo(self, database: str = "postgres") -> str:
        """A libpq connection string for this node."""
        return f"host={_HOST} port={self.port} user=postgres dbname={database}"


class Cluster:
    """A coordinator and workers in ``folder``: made, started, stopped, grown, restarted."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder.resolve()
        self._account = server_account()

    @property
    def nodes(self) -> list[Node]:
        """The nodes, coordinator first (empty before ``start``)."""
        described = self.folder / "cluster.json"
        if not described.exists():
            return []
        return [Node(name, port) for name, port in json.loads(described.read_text()).items()]

    @property
    def coordinator(self) -> Node:
        """The coordinator node."""
        return self.nodes[0]

    @property
    def url(self) -> str:
        """The coordinator's SQLAlchemy URL."""
        return f"postgresql+psycopg://postgres@{_HOST}:{self.coordinator.port}/postgres"

    def node(self, name: str) -> Node:
        """The node called ``name``."""
        return next(node for node in self.nodes if node.name == name)

    def start(self, workers: int = 2) -> str:
        """Make the nodes that do not exist yet, start those not running; the coordinator's URL.

        Safe to call again: an existing cluster is started as it is.
        """
        self.folder.mkdir(parents=True, exist_ok=True)
        if not self.nodes:
            names = ["coordinator", *(f"worker{index + 1}" for index in range(workers))]
            self._describe([Node(name, _free_port()) for name in names])
        for node in self.nodes:
            self._make_and_start(node)
        self._join()
        (self.folder / "url").write_text(self.url + "\n")
        return self.url

    def add_worker(self) -> Node:
        """Make, start and add one more worker (it holds no shard until a rebalance)."""
        node = Node(f"worker{len(self.nodes)}", _free_port())
        self._describe([*self.nodes, node])
        self._make_and_start(node)
        self._join()
        return node

    def stop(self) -> None:
        """Stop every node that runs (the data stays)."""
        for node in reversed(self.nodes):
            self.stop_node(node.name)

    def clean(self) -> None:
        """Stop every node and remove the folder."""
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)

    def stop_node(self, name: str, mode: str = "fast") -> None:
        """Stop one node (``mode`` as ``pg_ctl -m``: fast, or immediate as a crash would)."""
        data = self.folder / name
        if not (data / "postmaster.pid").exists():
            return
        try:
            self._pg_ctl(data, "-m", mode, "-w", "-t", str(_TIMEOUT_SECONDS), "stop")
        except RuntimeError:
            # A stale postmaster.pid (the server was killed): nothing runs to stop.
            if _accepts(self.node(name)):
                raise

    def start_node(self, name: str) -> None:
        """Start one node again (after ``stop_node``)."""
        self._make_and_start(self.node(name))

    def _describe(self, nodes: list[Node]) -> None:
        (self.folder / "cluster.json").write_text(
            json.dumps({node.name: node.port for node in nodes})
        )

    def _make_and_start(self, node: Node) -> None:
        data = self.folder / node.name
        if not (data / "PG_VERSION").exists():
            data.mkdir(mode=0o700, exist_ok=True)
            if self._account.name is not None:
                os.chown(data, self._account.uid, self._account.gid)
            self._run(data, "initdb", "--auth=trust", "--encoding=utf8", "--username=postgres")
            settings = "".join(f"{key} = {value}\n" for key, value in _SETTINGS.items())
            with (data / "postgresql.conf").open("a") as conf:
                conf.write(f"{settings}port = {node.port}\n")
            with (data / "pg_hba.conf").open("w") as hba:
                hba.write(f"host all all {_HOST}/32 trust\n")
        if not _accepts(node):
            self._pg_ctl(data, "-w", "-t", str(_TIMEOUT_SECONDS), "-l", "log", "start")

    def _join(self) -> None:
        """Create the extensions on every node and add the workers to the coordinator."""
        for node in self.nodes:
            with psycopg.connect(node.conninfo(), autocommit=True) as connection:
                # Only where missing: a worker in the cluster refuses DDL (even a no-op).
                present = {row[0] for row in connection.execute("SELECT extname FROM pg_extension")}
                for extension in ("citus", "vector"):
                    if extension not in present:
                        connection.execute(f"CREATE EXTENSION {extension}")
        coordinator, *workers = self.nodes
        with psycopg.connect(coordinator.conninfo(), autocommit=True) as connection:
            connection.execute(
                "SELECT citus_set_coordinator_host(%s, %s)", (_HOST, coordinator.port)
            )
            known = {row[0] for row in connection.execute("SELECT nodeport FROM pg_dist_node")}
            for worker in workers:
                if worker.port not in known:
                    connection.execute("SELECT citus_add_node(%s, %s)", (_HOST, worker.port))

    def _pg_ctl(self, data: Path, *args: str) -> None:
        self._run(data, "pg_ctl", *args)

    def _run(self, data: Path, program: str, *args: str) -> None:
        """Run a program on the data folder ``data`` as the server's account, from inside it."""
        other = self._account.name is not None
        with tempfile.TemporaryFile() as output:
            # A file, not a pipe: a server started by pg_ctl must not hold our pipe open.
            completed = subprocess.run(
                [str(_programs(self._account) / program), "-D", "/proc/self/cwd", *args],
                cwd=data,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                timeout=_TIMEOUT_SECONDS + 30,
                user=self._account.uid if other else None,
                group=self._account.gid if other else None,
                extra_groups=[] if other else None,
                check=False,
            )
            if completed.returncode != 0:
                output.seek(0)
                said = output.read().decode(errors="replace").strip()
                log = data / "log"
                if log.exists():
                    said += "\n" + "\n".join(log.read_text(errors="replace").splitlines()[-10:])
                raise RuntimeError(f"{program} failed on {data}: {said[-2000:]}")


def _programs(account: Account) -> Path:
    """The Postgres programs with Citus: pgserver's own, or as root a copy named by content."""
    installed = binaries_folder()
    lib = installed.parent / "lib" / "postgresql"
    if not (lib / "citus.so").exists():
        raise RuntimeError(f"Citus is not installed in {lib}: run scripts/citus build")
    if account.name is None:
        return installed
    site = installed.parents[2]  # bin -> pginstall -> pgserver -> site-packages
    copy = shared_copy(site, f"citus-{content_fingerprint(site)}", SHARED_PROGRAMS_ROOT)
    return copy / installed.relative_to(site)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((_HOST, 0))
        return int(probe.getsockname()[1])


def _accepts(node: Node) -> bool:
    try:
        with psycopg.connect(node.conninfo(), connect_timeout=2):
            return True
    except psycopg.OperationalError:
        return False


def wait_accepting(node: Node, timeout: float = _TIMEOUT_SECONDS) -> None:
    """Wait until ``node`` accepts connections."""
    deadline = time.monotonic() + timeout
    while not _accepts(node):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{node.name} does not accept connections")
        time.sleep(0.2)


def main(argv: list[str]) -> int:
    """``start|stop|clean FOLDER``: the command line of ``scripts/citus``."""
    if len(argv) != 2 or argv[0] not in {"start", "stop", "clean"}:
        print("usage: python -m storage.citus_cluster start|stop|clean FOLDER", file=sys.stderr)
        return 2
    cluster = Cluster(Path(argv[1]))
    if argv[0] == "start":
        print(cluster.start())
    elif argv[0] == "stop":
        cluster.stop()
    else:
        cluster.clean()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The Citus cluster of the distributed tests: one per test run.

``STRATAMEM_DATABASE_URL`` naming a Citus coordinator (Citus preloaded there) runs the tests
against it. Otherwise ``scripts/citus`` builds Citus (or reuses its cache) and starts a
coordinator and two workers in a folder of the run; the tests are skipped, saying why, only
when the build cannot run on this machine (no compiler, no source): any other failure fails.
"""

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import make_url

from storage import Database
from storage.citus_cluster import Cluster

_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "citus"
# scripts/citus exits with this code when the build cannot run here (see its build step).
_CANNOT_BUILD = 3


def _is_coordinator(url: str) -> bool:
    """Whether ``url`` names a server with Citus loaded."""
    parsed = make_url(url).set(drivername="postgresql")
    try:
        with psycopg.connect(parsed.render_as_string(hide_password=False), connect_timeout=5) as c:
            row = c.execute("SHOW shared_preload_libraries").fetchone()
    except psycopg.Error:
        return False
    return row is not None and "citus" in str(row[0])


@pytest.fixture(scope="session")
def citus_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster | None]:
    """The run's own cluster (None when ``STRATAMEM_DATABASE_URL`` names a coordinator)."""
    given = os.environ.get("STRATAMEM_DATABASE_URL")
    if given and _is_coordinator(given):
        yield None
        return
    folder = tmp_path_factory.mktemp("citus")
    started = subprocess.run(
        ["bash", str(_SCRIPT), "start", str(folder)], capture_output=True, text=True, check=False
    )
    if started.returncode == _CANNOT_BUILD:
        said = [line for line in started.stderr.splitlines() if line.startswith("scripts/")]
        pytest.skip(f"Citus cannot be built on this machine: {' '.join(said)[-500:]}")
    assert started.returncode == 0, started.stderr[-3000:]
    cluster = Cluster(folder)
    yield cluster
    cluster.clean()


@pytest.fixture(scope="session")
def citus_url(citus_cluster: Cluster | None) -> str:
    """The coordinator's URL."""
    if citus_cluster is None:
        return os.environ["STRATAMEM_DATABASE_URL"]
    return citus_cluster.url


@pytest.fixture(scope="session")
def citus_database(citus_url: str) -> Iterator[Database]:
    """The coordinator, opened (migrated and distributed) once for the run."""
    with Database.open(citus_url) as opened:
        yield opened

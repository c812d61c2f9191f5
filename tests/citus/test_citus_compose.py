"""docker-compose.citus.yml: a coordinator and workers with pgvector; only the coordinator is
published, on localhost; the password comes from the environment; the apps use the coordinator."""

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = (ROOT / "docker-compose.citus.yml").read_text()
SERVICES: dict[str, Any] = yaml.safe_load(COMPOSE)["services"]


def test_only_the_coordinator_is_published_on_localhost() -> None:
    published = {name: s.get("ports", []) for name, s in SERVICES.items() if s.get("ports")}

    assert published == {
        "coordinator": ["127.0.0.1:5432:5432"],
        "proxy": ["127.0.0.1:8765:8765"],
    }


def test_every_node_runs_citus_with_pgvector_and_logical_replication() -> None:
    dockerfile = (ROOT / "Dockerfile.citus").read_text()
    nodes = ("coordinator", "worker1", "worker2")

    assert re.search(r"^FROM citusdata/citus:[\d.]+-pg16$", dockerfile, re.M)
    assert "postgresql-16-pgvector" in dockerfile
    for node in nodes:
        assert SERVICES[node]["build"]["dockerfile"] == "Dockerfile.citus"
        assert "wal_level=logical" in SERVICES[node]["command"]
    setup = SERVICES["citus-setup"]["command"][-1]
    assert all(f"citus_add_node('{node}', 5432)" in setup for node in nodes[1:])
    assert "citus_set_coordinator_host('coordinator', 5432)" in setup


def test_the_password_is_required_and_the_apps_use_the_coordinator() -> None:
    uses = re.findall(r"\$\{POSTGRES_PASSWORD([^}]*)\}", COMPOSE)

    assert uses and all(rest.startswith(":?") for rest in uses)
    for app in ("proxy", "worker"):
        url = SERVICES[app]["environment"]["STRATAMEM_DATABASE_URL"]
        assert url.endswith("@coordinator:5432/stratamem")
        assert SERVICES[app]["depends_on"] == {
            "citus-setup": {"condition": "service_completed_successfully"}
        }

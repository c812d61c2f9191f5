"""docker-compose.yml: Postgres, the proxy and a worker; localhost only, secrets from the env."""

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = (ROOT / "docker-compose.yml").read_text()
SERVICES: dict[str, Any] = yaml.safe_load(COMPOSE)["services"]


def settings() -> list[str]:
    """The file's lines without comments."""
    return [line.split("#")[0].rstrip() for line in COMPOSE.splitlines() if line.split("#")[0]]


def test_every_port_is_published_on_localhost_only() -> None:
    ports = [line.strip() for line in settings() if re.match(r'\s+- "[\d.:]+"$', line)]

    assert ports == ['- "127.0.0.1:5432:5432"', '- "127.0.0.1:8765:8765"']
    published = [port for service in SERVICES.values() for port in service.get("ports", [])]
    assert published == ["127.0.0.1:5432:5432", "127.0.0.1:8765:8765"]


def test_the_password_comes_from_the_environment_with_no_default() -> None:
    [password] = [
        line.strip() for line in settings() if line.strip().startswith("POSTGRES_PASSWORD:")
    ]

    assert re.fullmatch(r"POSTGRES_PASSWORD: \$\{POSTGRES_PASSWORD:\?[^}]+\}", password)
    assert "stratamem:stratamem@" not in COMPOSE


def test_every_secret_is_required_from_the_environment() -> None:
    uses = re.findall(r"\$\{(POSTGRES_PASSWORD)([^}]*)\}", "\n".join(settings()))

    assert {name for name, _ in uses} == {"POSTGRES_PASSWORD"}
    assert all(rest.startswith(":?") for _, rest in uses)


def test_the_proxy_requires_keys() -> None:
    # The shared token is gone (the proxy refuses to start with it); clients bring keys.
    proxy = SERVICES["proxy"]

    assert "--no-auth" not in proxy["command"]
    assert "STRATAMEM_PROXY_TOKEN" not in COMPOSE
    assert "keys create --user" in COMPOSE


def test_the_image_is_pgvector() -> None:
    assert SERVICES["postgres"]["image"].startswith("pgvector/pgvector:")


def test_the_proxy_and_the_worker_run_the_repositorys_image_against_postgres() -> None:
    proxy, worker = SERVICES["proxy"], SERVICES["worker"]

    assert proxy["command"][:1] == ["serve"] and worker["command"] == ["worker"]
    for service in (proxy, worker):
        assert service["build"] == "." and service["image"] == proxy["image"]
        assert service["depends_on"] == {"postgres": {"condition": "service_healthy"}}
        url = service["environment"]["STRATAMEM_DATABASE_URL"]
        assert url.startswith("postgresql+psycopg://stratamem:${POSTGRES_PASSWORD:?")
        assert url.endswith("@postgres:5432/stratamem")
    assert "python -m pip install --no-cache-dir ." in (ROOT / "Dockerfile").read_text()
    assert ".venv" in (ROOT / ".dockerignore").read_text().split()

"""docker-compose.yml: Postgres on localhost only, with a password from the environment."""

import re
from pathlib import Path

COMPOSE = (Path(__file__).resolve().parents[2] / "docker-compose.yml").read_text()


def settings() -> list[str]:
    """The file's lines without comments."""
    return [line.split("#")[0].rstrip() for line in COMPOSE.splitlines() if line.split("#")[0]]


def test_the_port_is_published_on_localhost_only() -> None:
    ports = [line.strip() for line in settings() if re.match(r'\s+- "[\d.:]+"$', line)]

    assert ports == ['- "127.0.0.1:5432:5432"']


def test_the_password_comes_from_the_environment_with_no_default() -> None:
    [password] = [line.strip() for line in settings() if "POSTGRES_PASSWORD:" in line]

    assert re.fullmatch(r"POSTGRES_PASSWORD: \$\{POSTGRES_PASSWORD:\?[^}]+\}", password)
    assert "stratamem:stratamem@" not in COMPOSE


def test_the_image_is_pgvector() -> None:
    assert any(line.strip().startswith("image: pgvector/pgvector:") for line in settings())

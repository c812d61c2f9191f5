"""``stratamem doctor``: one line per check, what to fix, and an exit code."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator

import pytest
from cli_fixtures import clean_environment
from databases import own_database
from fake_openai import FakeOpenAI, Reply, Status
from sqlalchemy import text

from memory.cli import main
from memory.cli.doctor import _check_migrations, _check_pgvector, _version_tuple
from storage import MIGRATIONS, Database, JobQueue


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, database: Database) -> Iterator[str]:
    # A database of its own: the jobs check reads every user's jobs.
    with own_database(database, "doctor") as own:
        yield clean_environment(monkeypatch, own.url)


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def lines_of(output: str) -> dict[str, tuple[str, str]]:
    """Each check's line, by name: (status, the rest)."""
    found: dict[str, tuple[str, str]] = {}
    for line in output.splitlines():
        match = re.match(r"(ok|warn|fail)\s+(\S+)\s+(.*)", line)
        if match:
            found[match[2]] = (match[1], match[3])
    return found


def test_a_healthy_setup_passes_every_check_with_the_real_model(
    cli_env: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeOpenAI() as fake:
        # The fake has no GET /models: doctor falls back to a 1-token completion.
        fake.script(Reply("p"))
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-doctor-test")

        assert main(["doctor"]) == 0

        [probe] = fake.requests
    assert probe["max_tokens"] == 1
    out = capsys.readouterr().out
    checks = lines_of(out)
    assert list(checks) == [
        "database", "postgresql", "pgvector", "migrations", "jobs", "tokens", "embeddings", "llm",
    ]  # fmt: skip
    assert {status for status, _ in checks.values()} == {"ok"}
    assert checks["pgvector"][1].startswith("version 0.")
    assert "all-MiniLM-L6-v2 loads offline (384 dimensions, onnx)" in checks["embeddings"][1]
    assert "answers (a 1-token completion with gpt-4o-mini)" in checks["llm"][1]
    assert "sk-doctor-test" not in out
    assert checks["jobs"][1] == "no job waits for a worker"
    assert out.rstrip().endswith("doctor: 8 ok, 0 warn, 0 fail")


def test_an_unreachable_llm_is_a_failure_line_not_a_traceback(
    cli_env: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{closed_port()}/v1")
    monkeypatch.setenv("STRATAMEM_CARDS__EMBEDDER", "hashing")  # a warning, and no model load

    assert main(["doctor"]) == 1

    captured = capsys.readouterr()
    checks = lines_of(captured.out)
    status, rest = checks["llm"]
    assert status == "fail"
    assert "cannot reach http://127.0.0.1:" in rest
    assert "Connection refused" in rest
    assert "→ start the server or fix OPENAI_BASE_URL" in rest
    assert checks["embeddings"][0] == "warn"
    assert checks["database"][0] == "ok"
    assert "Traceback" not in captured.out + captured.err
    assert captured.out.rstrip().endswith("doctor: 6 ok, 1 warn, 1 fail")


def test_an_unreachable_database_fails_and_hides_its_password(
    cli_env: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"postgresql://stratamem:hunter2@127.0.0.1:{closed_port()}/stratamem"
    monkeypatch.setenv("STRATAMEM_DATABASE_URL", url)
    monkeypatch.setenv("STRATAMEM_CARDS__EMBEDDER", "hashing")

    assert main(["doctor"]) == 1

    captured = capsys.readouterr()
    checks = lines_of(captured.out)
    status, rest = checks["database"]
    assert status == "fail"
    assert "Connection refused" in rest
    assert "fix STRATAMEM_DATABASE_URL" in rest
    assert "hunter2" not in captured.out + captured.err
    assert checks["pgvector"] == ("fail", "skipped: no database")
    # Offline mode is a working setup, not a failure.
    assert checks["llm"][0] == "ok" and "offline mode" in checks["llm"][1]
    assert checks["tokens"][0] == "ok"
    assert "Traceback" not in captured.out + captured.err


def test_a_rejected_key_is_named(
    cli_env: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRATAMEM_CARDS__EMBEDDER", "hashing")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-revoked")
    with FakeOpenAI(responder=lambda body: Status(401, "invalid api key")) as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        assert main(["doctor"]) == 1
    status, rest = lines_of(capsys.readouterr().out)["llm"]
    assert status == "fail"
    assert "rejected the API key (HTTP 401)" in rest


def test_a_job_no_worker_claims_is_a_warning_that_says_what_to_run(
    cli_env: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRATAMEM_CARDS__EMBEDDER", "hashing")
    database = Database.open(cli_env)
    try:
        JobQueue(database).enqueue("cards", "u", "s")
        with database.transaction() as connection:
            connection.execute(text("UPDATE jobs SET run_after = now() - interval '2 minutes'"))
    finally:
        database.close()

    assert main(["doctor"]) == 0  # a warning: the setup works

    status, rest = lines_of(capsys.readouterr().out)["jobs"]
    assert status == "warn"
    assert "a job has waited 120 s for a worker" in rest
    assert "run `stratamem worker`" in rest


def test_versions_below_what_is_needed_fail() -> None:
    assert _check_pgvector("0.4.4").status == "fail"
    assert _check_pgvector(None).detail == "extension not installed"
    assert _check_pgvector("0.8.0").status == "ok"
    assert _version_tuple("16.2 (Debian 16.2-1.pgdg120+2)") == (16, 2)
    assert _version_tuple("17beta1") == (17,)


def test_migrations_the_code_does_not_know_are_a_warning() -> None:
    known = {migration.version for migration in MIGRATIONS}
    assert _check_migrations(known).status == "ok"
    assert _check_migrations(known | {999}).status == "warn"
    assert _check_migrations(known - {1}).status == "fail"


def test_a_base_url_without_a_key_is_a_working_local_server(
    cli_env: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRATAMEM_CARDS__EMBEDDER", "hashing")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with FakeOpenAI(responder=lambda body: Reply("p")) as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        main(["doctor"])
    status, rest = lines_of(capsys.readouterr().out)["llm"]
    assert status == "ok"
    assert "answers (a 1-token completion with gpt-4o-mini)" in rest

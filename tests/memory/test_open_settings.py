"""``Memory.open`` with small explicit windows and with URLs of databases it cannot use."""

from __future__ import annotations

from pathlib import Path

import pytest

from memory import Budget, ConfigurationError, Memory


def test_an_explicit_window_without_max_output_reserves_a_share_of_it(
    database_url: str, user_id: str, session_id: str
) -> None:
    with Memory.open(database_url, context_window=1_000) as mem:
        context = mem.prepare(user_id=user_id, session_id=session_id, input="hi")

    # 20% of the window for the answer, not gpt-4o-mini's 16,384 from the model table.
    assert mem.budget == Budget(1_000, 200, 64)
    assert context.report.budget == 736


@pytest.mark.parametrize(
    "url", ["sqlite:///x.db", "sqlite:///{folder}/x.db", "mysql+pymysql://u@h/x.db", "x.db"]
)
def test_a_database_other_than_postgres_is_refused_before_anything_is_touched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    monkeypatch.chdir(tmp_path)
    url = url.format(folder=tmp_path)

    with pytest.raises(ConfigurationError) as caught:
        Memory.open(url, data_dir=tmp_path / "data")

    assert "stratamem needs PostgreSQL with pgvector" in str(caught.value)
    assert "database_url" in str(caught.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("scheme", ["postgres", "postgresql", "postgresql+psycopg2"])
def test_the_common_postgres_url_schemes_are_accepted(
    database_url: str, user_id: str, session_id: str, scheme: str
) -> None:
    url = database_url.replace("postgresql+psycopg://", f"{scheme}://")

    with Memory.open(url, cards={"enabled": False}) as mem:
        mem.record(
            user_id=user_id, session_id=session_id, messages=[{"role": "user", "content": "hi"}]
        )
        assert [
            m.payload["content"] for m in mem.history(user_id=user_id, session_id=session_id)
        ] == ["hi"]


@pytest.mark.parametrize("url", ["postgresql+asyncpg://u@h/db", "postgres+pg8000://u@h/db"])
def test_a_postgres_driver_other_than_psycopg_is_refused(tmp_path: Path, url: str) -> None:
    with pytest.raises(ConfigurationError, match="through psycopg 3"):
        Memory.open(url, data_dir=tmp_path / "data")


def test_a_database_url_from_the_environment_is_checked_the_same_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("STRATAMEM_DATABASE_URL", "sqlite:///x.db")

    with pytest.raises(ConfigurationError, match="needs PostgreSQL with pgvector, not 'sqlite'"):
        Memory.open(data_dir=tmp_path / "data")

    assert list(tmp_path.iterdir()) == []

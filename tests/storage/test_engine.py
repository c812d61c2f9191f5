"""Tests of Database: opening by URL or embedded, and failing with a clear error."""

from pathlib import Path

import pytest
from sqlalchemy import text

from storage import Database, DatabaseUnavailableError, StorageError, default_data_dir


def test_open_by_url_shares_the_embedded_database(database: Database) -> None:
    with Database.open(database.url, pool_size=2) as by_url:
        assert by_url.data_folder is None
        assert by_url.engine.url.drivername == "postgresql+psycopg"
        assert by_url.url == database.url


def test_embedded_url_uses_psycopg_over_the_socket(database: Database) -> None:
    assert database.data_folder is not None
    assert database.url.startswith("postgresql+psycopg://postgres")
    socket_folder = Path(str(database.engine.url.query["host"]))
    assert (socket_folder / ".s.PGSQL.5432").is_socket()


@pytest.mark.parametrize(
    "scheme", ["postgresql", "postgres", "postgresql+psycopg2", "postgres+psycopg"]
)
def test_a_postgresql_url_of_any_common_spelling_gets_the_psycopg_driver(
    database: Database, scheme: str
) -> None:
    spelled = database.url.replace("postgresql+psycopg://", f"{scheme}://")
    with Database.open(spelled) as opened, opened.engine.connect() as connection:
        assert opened.engine.url.drivername == "postgresql+psycopg"
        assert connection.execute(text("SELECT 1")).scalar_one() == 1


def test_unreachable_url_is_database_unavailable(tmp_path: Path) -> None:
    url = f"postgresql+psycopg://nobody@/nowhere?host={tmp_path}"

    with pytest.raises(DatabaseUnavailableError, match="nowhere") as raised:
        Database.open(url)

    assert raised.value.__cause__ is not None
    assert isinstance(raised.value, StorageError)


def test_unusable_data_folder_is_database_unavailable(tmp_path: Path) -> None:
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")

    with pytest.raises(DatabaseUnavailableError, match=str(not_a_folder)):
        Database.open(None, data_dir=not_a_folder)


def test_default_data_dir_is_per_user() -> None:
    assert default_data_dir().name == "stratamem"
    assert default_data_dir().is_relative_to(Path.home())


def test_a_pooled_connection_the_server_ended_is_replaced_without_an_error(
    database: Database,
) -> None:
    # No ping before each use (a round trip): the pool looks at the socket instead.
    with Database.open(database.url, pool_size=1) as opened:
        with opened.reading() as connection:
            pid = connection.scalar(text("SELECT pg_backend_pid()"))
        with database.reading() as other:
            # Waits (up to 10 s) until the backend has exited.
            ended = other.scalar(text("SELECT pg_terminate_backend(:pid, 10000)"), {"pid": pid})
        assert ended is True

        with opened.reading() as connection:
            assert connection.scalar(text("SELECT pg_backend_pid()")) != pid

"""Tests of the migrations: idempotent, atomic per migration, and matching the ORM models."""

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, create_engine, inspect, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.exc import ProgrammingError

from storage import EMBEDDING_DIM, MIGRATIONS, Database, Migration, migrate
from storage.models import Base


@pytest.fixture
def scratch_engine(database: Database) -> Iterator[Engine]:
    """An engine on a new, empty database of the embedded server, dropped afterwards."""
    name = f"scratch_{uuid.uuid4().hex}"
    admin = create_engine(database.url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f"CREATE DATABASE {name}"))
    engine = create_engine(database.engine.url.set(database=name))
    yield engine
    engine.dispose()
    with admin.connect() as connection:
        connection.execute(text(f"DROP DATABASE {name}"))
    admin.dispose()


def versions(engine: Engine) -> list[int]:
    with engine.connect() as connection:
        return list(
            connection.execute(text("SELECT version FROM schema_migrations ORDER BY 1")).scalars()
        )


def test_versions_are_ordered_and_unique() -> None:
    numbers = [m.version for m in MIGRATIONS]
    assert numbers == sorted(set(numbers))


def test_migrate_applies_everything_once(scratch_engine: Engine) -> None:
    assert migrate(scratch_engine) == [m.version for m in MIGRATIONS]
    assert migrate(scratch_engine) == []
    assert versions(scratch_engine) == [m.version for m in MIGRATIONS]


def test_failed_migration_leaves_nothing_behind(scratch_engine: Engine) -> None:
    broken = Migration(
        MIGRATIONS[-1].version + 1,
        "broken",
        ("CREATE TABLE half_done (id int)", "SELECT * FROM missing"),
    )

    with pytest.raises(ProgrammingError):
        migrate(scratch_engine, (*MIGRATIONS, broken))

    assert versions(scratch_engine) == [m.version for m in MIGRATIONS]
    assert not inspect(scratch_engine).has_table("half_done")


def test_opened_database_is_migrated(database: Database) -> None:
    assert versions(database.engine) == [m.version for m in MIGRATIONS]


def test_models_match_the_migrated_schema(database: Database) -> None:
    inspector = inspect(database.engine)
    dialect = postgresql.dialect()  # type: ignore[no-untyped-call]
    for table in Base.metadata.sorted_tables:
        reflected = {c["name"]: c for c in inspector.get_columns(table.name)}
        assert set(reflected) == set(table.columns.keys()), table.name
        for column in table.columns:
            actual = reflected[column.name]
            where = f"{table.name}.{column.name}"
            assert actual["nullable"] == column.nullable, where
            assert actual["type"].compile(dialect=dialect) == column.type.compile(
                dialect=dialect
            ), where
            assert (actual["default"] is not None) == (
                column.server_default is not None
                or (column.primary_key and column.autoincrement is True)
            ), where

        model_indexes = {(i.name, bool(i.unique)) for i in table.indexes}
        actual_indexes = {(i["name"], bool(i["unique"])) for i in inspector.get_indexes(table.name)}
        # Unique constraints are reflected as indexes too; keep only the declared indexes.
        assert model_indexes <= actual_indexes, table.name
        model_uniques = {
            c.name for c in table.constraints if c.__class__.__name__ == "UniqueConstraint"
        }
        actual_uniques = {c["name"] for c in inspector.get_unique_constraints(table.name)}
        assert model_uniques == actual_uniques, table.name
        model_keys = {(fk.parent.name, fk.target_fullname) for fk in table.foreign_keys}
        actual_keys = {
            (fk["constrained_columns"][0], f"{fk['referred_table']}.{fk['referred_columns'][0]}")
            for fk in inspector.get_foreign_keys(table.name)
        }
        assert model_keys == actual_keys, table.name


def test_embedding_index_is_hnsw_cosine(database: Database) -> None:
    with database.engine.connect() as connection:
        definition = connection.execute(
            text("SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_cards_embedding_hnsw'")
        ).scalar_one()
        dimension = connection.execute(
            text(
                "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                "WHERE attrelid = 'cards'::regclass AND attname = 'embedding'"
            )
        ).scalar_one()

    assert "USING hnsw (embedding vector_cosine_ops)" in definition
    assert dimension == f"vector({EMBEDDING_DIM})"

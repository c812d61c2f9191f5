"""The storage package's one data-access style (docs/design.md, "Storage"): SQL text run with
``execute`` on the Connections ``Database`` yields, psycopg itself only on the request path, one
translation of database errors. Checked on the source, so a second style cannot creep back in."""

import ast
from pathlib import Path

import storage

STORAGE = Path(storage.__file__).parent
#: The modules that may use psycopg itself, and why (docs/design.md, "Storage").
DRIVER_MODULES = {
    # Lends a pooled connection as psycopg's own, for the request path's statements.
    "driver.py",
    # Runs the request path's statements on that connection.
    "messages/request_statements.py",
    # The pool's connect hook: starts the embedded server again on psycopg's refusal.
    "engine.py",
    # Builds a Citus cluster for tests and benchmarks, before any engine exists.
    "citus_cluster.py",
}


def modules() -> dict[str, ast.Module]:
    """Every module of storage, parsed, by its path inside the package."""
    return {
        path.relative_to(STORAGE).as_posix(): ast.parse(path.read_text(), str(path))
        for path in sorted(STORAGE.rglob("*.py"))
    }


def imported(tree: ast.Module) -> set[str]:
    """The modules ``tree`` imports (``from a.b import c`` counts as ``a.b`` and ``a.b.c``)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_no_module_of_storage_uses_the_orm() -> None:
    # The migrations are the schema's only source: no model declares it a second time.
    assert not (STORAGE / "models.py").exists()
    users = {
        path: sorted(name for name in imported(tree) if name.startswith("sqlalchemy.orm"))
        for path, tree in modules().items()
    }

    assert {path: names for path, names in users.items() if names} == {}


def test_psycopg_is_used_directly_only_where_sqlalchemy_cannot_do_the_job() -> None:
    users = {
        path
        for path, tree in modules().items()
        if any(name == "psycopg" or name.startswith("psycopg.") for name in imported(tree))
    }

    assert users <= DRIVER_MODULES


def test_database_errors_are_translated_in_one_place() -> None:
    # Every translation goes through storage.errors.storage_error; nothing else wraps a
    # driver error in SQLAlchemy's to reach it, or defines a translation of its own.
    translations = {
        path: sorted(
            node.name
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef)
            and isinstance(node.returns, ast.Name | ast.Constant)
            and "StorageError" in ast.unparse(node.returns)
        )
        for path, tree in modules().items()
    }
    wrapping = {
        path for path, tree in modules().items() if "DBAPIError.instance" in ast.unparse(tree)
    }

    assert {path: names for path, names in translations.items() if names} == {
        "errors.py": ["storage_error"]
    }
    assert wrapping == set()

"""Every module of ``memory``, ``retrieval`` and ``storage`` has its place in the import-linter
layers: each package has a contract ``Inside <package>: ...`` whose layers name each of its
modules and subpackages, so where a module sits is stated, never implied."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROOTS = ("memory", "retrieval", "storage")


def contracts() -> list[dict[str, object]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    found: list[dict[str, object]] = config["tool"]["importlinter"]["contracts"]
    return found


def packages() -> list[Path]:
    """The folder of every package of the three, the roots included."""
    return [init.parent for root in ROOTS for init in sorted((ROOT / root).rglob("__init__.py"))]


def dotted(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def modules_of(package: Path) -> set[str]:
    """The modules and subpackages directly in a package."""
    files = {path for path in package.glob("*.py") if path.name != "__init__.py"}
    folders = {path.parent for path in package.glob("*/__init__.py")}
    return {dotted(path) for path in files | folders}


def placed_in(package: str) -> set[str]:
    """The modules the contract ``Inside <package>: ...`` names, or nothing without one."""
    inside = [c for c in contracts() if str(c["name"]).startswith(f"Inside {package}:")]
    assert len(inside) <= 1, package
    layers: list[str] = inside[0]["layers"] if inside else []  # type: ignore[assignment]
    return {name.strip() for layer in layers for name in layer.replace(":", "|").split("|")}


def test_the_three_packages_are_layered() -> None:
    layers = next(c["layers"] for c in contracts() if str(c["name"]).startswith("Layers:"))
    assert layers == list(ROOTS)


def test_every_module_has_its_place_in_its_package() -> None:
    unplaced: dict[str, set[str]] = {}
    gone: dict[str, set[str]] = {}
    assert len(packages()) > 15  # the walk found the packages
    for folder in packages():
        package, modules = dotted(folder), modules_of(folder)
        placed = placed_in(package)
        if modules - placed:
            unplaced[package] = modules - placed
        if placed - modules:  # and no layer names a module that is gone
            gone[package] = placed - modules
    assert unplaced == {}
    assert gone == {}

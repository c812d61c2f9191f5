"""Every module of ``memory`` has its place in the import-linter layers: where it sits is stated."""

from __future__ import annotations

import pkgutil
import tomllib
from pathlib import Path

import memory

ROOT = Path(__file__).resolve().parents[1]


def test_every_memory_module_has_a_layer() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contract = next(
        contract
        for contract in config["tool"]["importlinter"]["contracts"]
        if contract["name"].startswith("Inside memory")
    )
    placed = {
        name.strip() for layer in contract["layers"] for name in layer.replace(":", "|").split("|")
    }
    modules = {f"memory.{info.name}" for info in pkgutil.iter_modules(memory.__path__)}
    assert modules - placed == set()
    assert placed - modules == set()  # and no layer names a module that is gone

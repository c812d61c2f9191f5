"""A class name means one thing: no two classes of ``memory``, ``retrieval`` and ``storage``
share a name, so an import never needs an alias to tell them apart (two ``CardDraft`` classes
once did)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_class_name_is_defined_once() -> None:
    places: dict[str, list[str]] = defaultdict(list)
    for package in ("memory", "retrieval", "storage"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ClassDef):
                    places[node.name].append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert len(places) > 100  # the walk found the classes
    assert {name: where for name, where in places.items() if len(where) > 1} == {}

"""The repository carries its own design document, and the code points at it."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs" / "design.md"


def test_the_design_document_covers_what_maintainers_need() -> None:
    text = DESIGN.read_text(encoding="utf-8")
    for heading in (
        "## Layers and packages",
        "## One request: `Memory.prepare`",
        "## The hard cap: the drop order",
        "## Storage and the job model",
    ):
        assert heading in text


def test_code_refers_to_the_design_document_in_the_repository() -> None:
    sources = [
        path
        for package in ("memory", "retrieval", "storage")
        for path in (ROOT / package).rglob("*.py")
    ]
    mentions = [path for path in sources if "DESIGN.md" in path.read_text(encoding="utf-8")]
    pointing = [path for path in sources if "docs/design.md" in path.read_text(encoding="utf-8")]

    assert mentions == []  # a design outside the repository is a dead reference
    assert {path.name for path in pointing} >= {"assembler.py", "cap.py"}

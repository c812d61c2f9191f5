"""The framework adapters come with extras and are imported only when used: the core install
pulls none of their frameworks, and importing stratamem (its command line included) imports
none of them."""

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).parent.parent
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
FRAMEWORKS = {
    "openai-agents",
    "mcp",
    "pydantic-ai",
    "pydantic-ai-slim",
    "langgraph",
    "langchain-core",
}


def names(requirements: list[str]) -> set[str]:
    return {Requirement(requirement).name for requirement in requirements}


def test_the_core_install_pulls_no_framework() -> None:
    assert names(PROJECT["dependencies"]) & FRAMEWORKS == set()


def test_each_adapter_has_its_extra_and_integrations_has_them_all() -> None:
    extras = PROJECT["optional-dependencies"]
    assert names(extras["agents"]) == {"openai-agents"}
    assert names(extras["mcp"]) == {"mcp"}
    assert names(extras["pydantic-ai"]) == {"pydantic-ai-slim"}
    assert names(extras["langgraph"]) == {"langgraph"}
    assert names(extras["langchain"]) == {"langchain-core"}
    [aggregate] = [Requirement(r) for r in extras["integrations"]]
    assert aggregate.name == "stratamem"
    assert {"agents", "mcp", "pydantic-ai", "langgraph", "langchain"} <= aggregate.extras
    assert "stratamem[integrations]" in extras["dev"]  # the tests run against the frameworks


@pytest.mark.slow
def test_importing_stratamem_imports_no_framework() -> None:
    script = (
        "import sys, memory, memory.cli, memory.integrations\n"
        "from memory.cli.app import build_parser\n"
        "build_parser().parse_args(['mcp', '--user', 'u1'])\n"
        "frameworks = ('agents', 'mcp', 'pydantic_ai', 'langgraph', 'langchain_core')\n"
        "print(sorted(m for m in frameworks if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"


@pytest.mark.slow
def test_importing_memory_imports_no_client_no_model_runtime() -> None:
    # Every process that imports memory pays for what it imports (the CLI, each worker, each
    # test child): the openai client, o200k's ranks and the model runtimes load when used.
    script = (
        "import sys, memory\n"
        "heavy = ('openai', 'bpe_openai', 'torch', 'onnxruntime', 'sentence_transformers')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"

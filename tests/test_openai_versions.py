"""stratamem installs beside the current ``openai`` major (3.x, which ``openai-agents`` needs)
and keeps the previous one (2.x): the pin admits both, and the client in use is one of them."""

import tomllib
from importlib.metadata import version
from pathlib import Path

from packaging.requirements import Requirement

PYPROJECT = Path(__file__).parent.parent / "pyproject.toml"


def openai_requirement() -> Requirement:
    dependencies = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    [openai] = [Requirement(d) for d in dependencies if Requirement(d).name == "openai"]
    return openai


def test_the_openai_pin_admits_the_current_major_and_the_previous_one() -> None:
    pin = openai_requirement().specifier
    assert pin.contains("3.57.0")  # openai-agents 0.24 requires openai>=3,<4
    assert pin.contains("2.54.0")
    assert not pin.contains("4.0.0")  # a major not tested yet


def test_the_installed_client_is_one_the_pin_admits() -> None:
    assert openai_requirement().specifier.contains(version("openai"))

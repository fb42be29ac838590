"""A tiny fake project (a module and its tests, in a git repo) for the campaign to mutate."""

import subprocess
import textwrap
from pathlib import Path

import pytest

CALC = """\
def add(a, b):
    return a + b  # ablate: add


def double(x):
    return x * 2  # ablate: double
"""

TESTS = """\
import os
import subprocess
import sys

import calc


def test_add():
    assert calc.add(2, 3) == 5


def test_double_runs():
    calc.double(1)  # runs the code, asserts nothing: a mutation of double survives it


def test_add_in_subprocess():
    # The code under test in a child process, as the runner's end-to-end tests do.
    out = subprocess.run([sys.executable, "-c", "import calc; print(calc.add(2, 3))"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "5"


def test_unrelated():
    assert calc.double(2) == 4
"""

# The fake tree has its own pytest configuration; the project's plugin is switched off
# (the fake tests need none of it).
PYPROJECT = """\
[tool.pytest.ini_options]
testpaths = ["tests"]
"""

PYTEST_ARGS = ["-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:stoplatency"]


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


@pytest.fixture
def fake_tree(tmp_path):
    """Returns make(extra_tests="", name="tree", ini="") -> Path: a committed fake project
    (``ini``: extra lines for its [tool.pytest.ini_options])."""

    def make(extra_tests: str = "", name: str = "tree", ini: str = "") -> Path:
        root = tmp_path / name
        (root / "tests").mkdir(parents=True)
        (root / "calc.py").write_text(CALC)
        (root / "tests" / "test_calc.py").write_text(TESTS + textwrap.dedent(extra_tests))
        (root / "pyproject.toml").write_text(PYPROJECT + textwrap.dedent(ini))
        git(root, "init", "-q")
        git(root, "add", ".")
        git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "fake")
        return root

    return make


def _write_config(root: Path, body: str, timeout: float = 60) -> Path:
    settings = f"[settings]\npytest_args = {PYTEST_ARGS!r}\ntimeout = {timeout}\n\n".replace("'", '"')
    path = root.parent / f"{root.name}-mutations.toml"
    path.write_text(settings + textwrap.dedent(body))
    return path


@pytest.fixture
def write_config():
    """write(root, body, timeout=60) -> Path of a mutations.toml beside the fake tree (outside
    it: the campaign copies only the tree), with the fake tree's pytest arguments."""
    return _write_config

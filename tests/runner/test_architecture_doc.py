"""docs/architecture.md's map of runner/ agrees with the code: its import directions are the
contract import-linter checks (pyproject.toml's [tool.importlinter] layers), and every
module of runner/ has its row."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"


def _layers_in_doc() -> list[str]:
    text = DOC.read_text()
    block = text.split("<!-- layers: rendered from pyproject.toml -->", 1)[1].split("<!-- /layers -->", 1)[0]
    return [line for line in block.strip().strip("`").strip().splitlines() if line]


def test_the_documented_import_directions_are_the_checked_contract():
    """Path: [tool.importlinter]'s layers contract, as `make lint` checks it. Red when a
    layer is added, removed or reordered in pyproject.toml and not in the doc (or back)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c["layers"] for c in config["contracts"] if c["type"] == "layers"]
    assert _layers_in_doc() == layers


def test_every_runner_module_has_its_row():
    """Red when a module is added to runner/ (or moved) without its row in the map."""
    documented = set(re.findall(r"^\| `([\w/]+\.py)` \|", DOC.read_text(), re.M))
    modules = {
        p.name
        for p in (ROOT / "runner").rglob("*.py")
        if p.name not in ("__init__.py", "__main__.py") and p.parent.name != "dashboard"
    }
    assert modules - documented == set()


def test_every_module_the_doc_names_exists():
    """Red when the map names a module that is not there (a row left behind by a rename
    or a removal, `engine.py` for `engine/main.py`): every `name.py` or `dir/name.py` in
    backticks is the end of a path in the repository."""
    files = [
        str(p.relative_to(ROOT))
        for top in (
            "runner",
            "pytest_stoplatency",
            "tests",
            "bench",
            "reliability",
            "docs",
            "docgen",
            "mutation",
            "examples",
        )
        for p in (ROOT / top).rglob("*.py")
    ]
    named = set(re.findall(r"`([\w/]+\.py)`", DOC.read_text()))
    missing = [n for n in sorted(named) if not any(f == n or f.endswith("/" + n) for f in files)]
    assert missing == []

"""docgen/render_pictures.py: the pictures of docs/stop-latency.md, drawn from the committed
JSON files, and `--check` (make docs-check), which holds each picture to its sources by a
stamp and needs no matplotlib."""

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


RENDER = ROOT / "docgen" / "render_pictures.py"


@pytest.fixture
def docs(tmp_path):
    """Copies of the committed JSON files and pictures. The renderer runs as a subprocess,
    as `make docs` runs it (matplotlib loaded in a process of its own)."""
    for name in ("measure.json", "bench.json", "stop-latency-measure.svg", "stop-latency-bench.svg"):
        shutil.copy(ROOT / "docs" / name, tmp_path / name)
    return tmp_path


def render(docs, *args):
    return subprocess.run(
        [sys.executable, str(RENDER), "--docs", str(docs), *args], capture_output=True, text=True, timeout=300
    )


def test_the_committed_pictures_are_current_and_a_changed_source_is_stale(docs):
    """Path: render_pictures.main(--check) against the stamp: the committed pictures pass; a
    measure.json with one sample fewer makes its picture stale (exit 1, named)."""
    assert render(docs, "--check").returncode == 0
    source = docs / "measure.json"
    doc = json.loads(source.read_text())
    doc["samples"] = doc["samples"][1:]
    source.write_text(json.dumps(doc))
    got = render(docs, "--check")
    assert got.returncode == 1
    assert "stop-latency-measure.svg is stale" in got.stderr


def test_drawing_is_reproducible_and_names_every_label(docs):
    """Path: render_pictures.draw -> pictures.samples_svg / pictures.grid: a redraw of the
    committed JSON gives the same files again (so `make docs` after `make docs` changes
    nothing), and every label of measure.json and every peer stopper of bench.json is in
    its picture."""
    if importlib.util.find_spec("matplotlib") is None:  # found, not imported: drawing runs in a subprocess
        pytest.skip("the plots extra (make venv installs it)")
    assert render(docs).returncode == 0
    first = {p.name: p.read_text() for p in docs.glob("*.svg")}
    assert render(docs).returncode == 0
    assert first == {p.name: p.read_text() for p in docs.glob("*.svg")}
    measure = first["stop-latency-measure.svg"]
    for label in json.loads((docs / "measure.json").read_text())["labels"]:
        assert label.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") in measure, label
    for stopper in json.loads((docs / "bench.json").read_text())["stoppers"]["cells"]:
        assert stopper in first["stop-latency-bench.svg"]
    assert render(docs, "--check").returncode == 0


def test_the_kit_without_matplotlib_still_draws_its_grid(tmp_path):
    """Path: kit/cli.py's --svg fallback (kit/picture.py): matplotlib hidden, the kit writes
    the plain grid and says in one line how to install the extra for the full picture."""
    hide = tmp_path / "hide"
    (hide / "matplotlib").mkdir(parents=True)
    (hide / "matplotlib" / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    got = subprocess.run(
        [sys.executable, "-m", "pytest_stoplatency", "conformance", "--stopper", "killpg", "--kinds", "cooperative"]
        + ["--bound", "60", "--svg", str(tmp_path / "g.svg")],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(hide)},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert got.returncode == 0, got.stdout + got.stderr
    assert "pip install 'pytest-stoplatency[plots]'" in got.stdout
    grid = (tmp_path / "g.svg").read_text()
    assert grid.startswith("<svg") and "cooperative" in grid

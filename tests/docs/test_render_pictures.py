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


@pytest.fixture
def mod(tmp_path, monkeypatch):
    """The renderer, its pictures and sources redirected into tmp_path (copies of the
    committed ones)."""
    spec = importlib.util.spec_from_file_location("render_pictures", ROOT / "docgen" / "render_pictures.py")
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    for name, source in m.PICTURES.items():
        shutil.copy(source, tmp_path / source.name)
        shutil.copy(m.out_path(name), tmp_path / m.out_path(name).name)
    monkeypatch.setattr(m, "PICTURES", {n: tmp_path / s.name for n, s in m.PICTURES.items()})
    monkeypatch.setattr(m, "out_path", lambda name: tmp_path / f"stop-latency-{name}.svg")
    return m


def test_the_committed_pictures_are_current_and_a_changed_source_is_stale(mod, tmp_path, capsys):
    """Path: render_pictures.main(--check) against the stamp: the committed pictures pass; a
    measure.json with one sample fewer makes its picture stale (exit 1, named)."""
    assert mod.main(["--check"]) == 0
    source = mod.PICTURES["measure"]
    doc = json.loads(source.read_text())
    doc["samples"] = doc["samples"][1:]
    source.write_text(json.dumps(doc))
    assert mod.main(["--check"]) == 1
    assert "stop-latency-measure.svg is stale" in capsys.readouterr().err


def test_drawing_is_reproducible_and_names_every_label(mod):
    """Path: render_pictures.draw -> pictures.samples_svg / pictures.grid: two renderings of
    one JSON are the same file (so a redraw after `make docs` changes nothing), and every
    label of measure.json and every peer stopper of bench.json is in its picture."""
    pytest.importorskip("matplotlib", reason="the plots extra (make venv installs it)")
    first = mod.draw("measure", mod.PICTURES["measure"])
    assert first == mod.draw("measure", mod.PICTURES["measure"])
    for label in json.loads(mod.PICTURES["measure"].read_text())["labels"]:
        assert label.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") in first, label
    bench = mod.draw("bench", mod.PICTURES["bench"])
    for stopper in json.loads(mod.PICTURES["bench"].read_text())["stoppers"]["cells"]:
        assert stopper in bench
    assert mod.main([]) == 0 and mod.main(["--check"]) == 0


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

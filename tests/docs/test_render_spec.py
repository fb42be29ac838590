"""docs/spec.md is rendered from runner/files/spec.py's SCHEMA, the table the parser reads
every key through: code and document cannot disagree, and docs-check says when they do."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from runner.files import spec

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def render_spec():
    sys.path.insert(0, str(ROOT / "docgen"))
    try:
        s = importlib.util.spec_from_file_location("render_spec", ROOT / "docgen" / "render_spec.py")
        mod = importlib.util.module_from_spec(s)
        s.loader.exec_module(mod)
        yield mod
    finally:
        sys.path.remove(str(ROOT / "docgen"))


def test_every_schema_key_has_a_row_with_its_default_and_limit(render_spec):
    """Path: spec_keys prints one row per SCHEMA key, with its default constant's name
    and its limit's. Ablation: a key left out of the renderer has no row."""
    text = render_spec.render((ROOT / "docs" / "spec.template.md").read_text(), render_spec.Context())
    assert render_spec.missing_keys(text) == []
    for key in spec.SCHEMA:
        row = next(line for line in text.splitlines() if line.startswith(f"| `{key.dotted}` |"))
        if key.default:
            assert f"(`{key.default}`)" in row, row
        if key.maximum:
            assert f"(`{key.maximum}`)" in row, row
    for name in ("hooks.post_run.command", "hooks.post_run.timeout", "output.cap_bytes"):
        assert f"| `{name}` |" in text


def test_the_committed_document_is_current():
    """Path: `make docs-check` runs this check; the committed docs/spec.md is the rendering."""
    r = subprocess.run([sys.executable, "docgen/render_spec.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_check_fails_on_a_key_missing_from_the_document(tmp_path):
    """Path: --check fails, naming the key, when the committed document has no row for a
    key the parser accepts (here: the output.cap_bytes row deleted). Ablation: a check that
    only diffs would still fail, but this one names the key first."""
    doc = (ROOT / "docs" / "spec.md").read_text()
    out = tmp_path / "spec.md"
    out.write_text("\n".join(l for l in doc.splitlines() if not l.startswith("| `output.cap_bytes` |")) + "\n")
    r = subprocess.run(
        [sys.executable, "docgen/render_spec.py", "--check", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 1
    assert "output.cap_bytes" in r.stderr and "make docs" in r.stderr, r.stderr


def test_a_new_schema_key_makes_the_document_stale(render_spec, monkeypatch):
    """Path: a key added to SCHEMA (so to the parser) is missing from the committed
    document until `make docs` renders it."""
    extra = spec.Key("output", "new_limit", "integer", "A new key.", default="MAX_COUNT", maximum="MAX_COUNT")
    monkeypatch.setattr(spec, "SCHEMA", (*spec.SCHEMA, extra))
    assert render_spec.missing_keys((ROOT / "docs" / "spec.md").read_text()) == ["output.new_limit"]


def test_the_example_sets_every_key_and_loads():
    """Path: examples/spec/every-key.toml (printed in docs/spec.md) loads, and sets every key."""
    path = ROOT / "examples" / "spec" / "every-key.toml"
    loaded = spec.load(path)
    assert loaded.post_run and loaded.post_session and loaded.verify
    text = path.read_text()
    for key in spec.SCHEMA:
        assert f"\n{key.name} = " in text, key.dotted

"""The stop-latency document's renderer, loaded from its file (docs/ is not a package)."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def render_mod():
    spec = importlib.util.spec_from_file_location("render_stop_latency", ROOT / "docs" / "render_stop_latency.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def measure_json(tmp_path):
    """A measure.json in the plugin's schema, with fixed figures so the renderer's
    formatting can be asserted exactly. That the real writer produces this schema is
    shown by test_render.py::test_renders_a_json_the_plugin_itself_wrote."""
    data = {
        "schema": 1,
        "machine": {"kernel": "6.1.0-test", "python": "3.11.7", "cpus": 2, "hostname": "ci-box"},
        "time": "2025-01-02T03:04:05+00:00",
        "git_commit": "0123abc",
        "samples": [
            {
                "label": "group route / trap-term",
                "nodeid": "tests/runner/test_reaper.py::test_group_trap_term",
                "latency": 1.013,
                "returned": 1.013,
                "bound": 3.0,
                "ok": True,
                "worker": None,
            },
        ],
        "labels": {
            "group route / trap-term": {
                "n": 20,
                "min": 1.004,
                "median": 1.013,
                "p95": 1.031,
                "max": 1.047,
                "bound": 3.0,
                "verdict": "pass",
            },
            "plugin / own label": {
                "n": 3,
                "min": 0.002,
                "median": 0.003,
                "p95": 0.004,
                "max": 0.004,
                "bound": 1.0,
                "verdict": "pass",
            },
        },
        "missing_workers": [],
        "swept": 0,
    }
    path = tmp_path / "measure.json"
    path.write_text(json.dumps(data))
    return path

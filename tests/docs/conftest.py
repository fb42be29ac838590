"""The stop-latency document's renderer, loaded from its file (docs/ is not a package)."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def render_mod():
    spec = importlib.util.spec_from_file_location("render_stop_latency", ROOT / "docgen" / "render_stop_latency.py")
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


def _matrix_cell(latencies, left=()):
    """A cell's samples, summarised by the benchmark's own code (pytest_stoplatency.kit.measure)."""
    from pytest_stoplatency.kit import measure as matrix

    samples = [{"stopped": True, "latency_s": x, "returned_s": x, "processes": 2, "left": 0} for x in latencies]
    samples += [{"stopped": False, "latency_s": None, "returned_s": 1.0, "processes": 2, "left": n} for n in left]
    return {**matrix.cell_summary(samples), "samples": samples}


@pytest.fixture
def bench_json(tmp_path):
    """A docs/bench.json in the benchmark's schema (python -m bench.stoppers), with fixed
    samples summarised by the benchmark's own functions, so the renderer's formatting can
    be asserted exactly. That the real benchmark writes this schema is shown by
    test_render.py::test_renders_a_json_the_bench_itself_wrote."""
    from bench import load, scale

    def scale_side(seconds, **extra):
        return [{"processes": 1000, "stopped": True, "seconds": x, "left": 0, **extra} for x in seconds]

    load_samples = [{"stopped": True, "latency_s": 1.0 + i / 100, "left": 0} for i in range(50)]
    data = {
        "schema": 1,
        "machine": {
            "hostname": "bench-box",
            "kernel": "6.1.0-test",
            "cpus": 2,
            "python": "3.11.7",
            "loadavg_at_start": [0.25, 0.5, 0.75],
        },
        "date": "2025-02-03T04:05:06Z",
        "git_commit": "4567def",
        "kill_grace": 1.0,
        "ci": False,
        "stoppers": {
            "n": 3,
            "settle_s": 0.5,
            "victims": [
                {"id": "cooperative", "label": "cooperative", "kind": "cooperative", "lang": "python"},
                {"id": "setsid-escapee", "label": "setsid escapee", "kind": "escapee", "lang": "python"},
            ],
            "stoppers": [
                {
                    "id": "killpg",
                    "label": "killpg TERM, sleep, killpg KILL",
                    "how": "killpg, sleep, killpg",
                    "runner": False,
                    "skipped": None,
                },
                {
                    "id": "tini",
                    "label": "tini -g",
                    "how": "tini",
                    "runner": False,
                    "skipped": "`tini` is not installed",
                },
                {
                    "id": "runner-stop-now",
                    "label": "`runner stop --now`",
                    "how": "runner stop --now",
                    "runner": True,
                    "skipped": None,
                },
            ],
            "cells": {
                "killpg": {
                    "cooperative": _matrix_cell([1.004, 1.006, 1.011]),
                    "setsid-escapee": _matrix_cell([], left=(1, 1, 1)),
                },
                "runner-stop-now": {
                    "cooperative": _matrix_cell([0.031, 0.035, 0.052]),
                    "setsid-escapee": _matrix_cell([1.021, 1.027, 1.043]),
                },
            },
        },
        "scale": {
            "n": 3,
            "kill_grace": 1.0,
            "tree": "bash forker",
            "rows": [
                scale.row(
                    1000,
                    scale_side([0.120, 0.122, 0.130]),
                    scale_side([1.31, 1.33, 1.35], forced_s=1.146, code=0, output=""),
                    1.0,
                )
            ],
        },
        "load": {
            "runs": 50,
            "kill_grace": 1.0,
            "tree": "bash trap-term",
            "modes": [
                {"mode": "stop", **load.summarize(load_samples, [1.4] * 50, [0] * 50)},
                {"mode": "stop --all", "skipped": "this runner has no `runner stop --all`"},
            ],
        },
    }
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(data))
    return path

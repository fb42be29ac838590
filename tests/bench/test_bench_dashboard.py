"""The dashboard benchmark's harness (bench/dashboard.py): its three sides measure what
they say (the page-like client gets 304s, the unconditional one 200s with the body,
the previous commit's dashboard is really served), and it leaves no run alive."""

import subprocess

from bench import dashboard


def test_three_sides_on_real_runs_and_nothing_left(monkeypatch):
    """Path: bench.dashboard.run with ten runs and short windows: every side polled,
    the conditional side answered 304 every time with no bytes, the unconditional side
    200 with the body; the live runs are stopped at the end."""
    monkeypatch.setattr(dashboard, "WARMUP", 0.5)
    part = dashboard.run(10, 1.5)
    sides = part["sides"]
    assert sides["conditional"]["polls"] >= 3 and sides["conditional"]["not_modified"] == sides["conditional"]["polls"]
    assert sides["conditional"]["bytes_per_poll"] == 0
    unconditional = sides["unconditional"]
    assert unconditional["not_modified"] == 0 and unconditional["bytes_per_poll"] > 1000
    has_reference = subprocess.run(["git", "cat-file", "-e", dashboard.REFERENCE_COMMIT], capture_output=True)
    if has_reference.returncode == 0:
        assert sides["previous"]["polls"] >= 3 and sides["previous"]["bytes_per_poll"] > 1000, sides["previous"]
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert "dash-bench-" not in ps, [line for line in ps.splitlines() if "dash-bench-" in line]

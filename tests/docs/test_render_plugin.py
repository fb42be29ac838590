"""docs/plugin.md is rendered from the code, docs/measure.json and the leak benchmark, never by hand."""

import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_stoplatency import _leaks, _options
from pytest_stoplatency.victim import KINDS

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "docs" / "plugin.template.md"


@pytest.fixture(scope="module")
def mod():
    sys.path.insert(0, str(ROOT / "docgen"))  # render_plugin imports its sibling renderer
    try:
        spec = importlib.util.spec_from_file_location("render_plugin", ROOT / "docgen" / "render_plugin.py")
        m = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(m)
        yield m
    finally:
        sys.path.remove(str(ROOT / "docgen"))


def ctx(mod, bench=None, measure=None):
    return mod.Context(measure, bench, "docs/process-leaks-bench.json", ROOT / "examples")


BENCH = {
    "n_tests": 400,
    "rounds": 3,
    "cgroup": False,
    "machine": {"kernel": "6.1.0-test", "python": "3.11.7", "cpus": 2},
    "time": "2025-01-02T03:04:05+00:00",
    "load_before": 0.5,
    "kinds": {
        "quiet": {
            "n": 200,
            "median_protocol_ms_without": 0.5,
            "median_protocol_ms_with": 0.55,
            "median_overhead_ms": 0.05,
            "median_tracker_ms": 0.04,
        }
    },
}


def test_texts_and_constants_come_from_the_code(mod):
    """Path: option help, routes and constants are the plugin's own, with their provenance."""
    doc = mod.render(TEMPLATE.read_text(), ctx(mod, BENCH))
    assert _options.HELP_LEAKS in doc and _options.NO_CGROUP_LINE in doc
    assert ", ".join(f'"{r}"' for r in _leaks.ROUTES) in doc
    assert f"{_leaks.ROUNDS:g} (DERIVED: `pytest_stoplatency/_leaks.py: ROUNDS`)" in doc
    assert "| quiet | 200 x 3 | 0.500 ms | 0.550 ms | 0.050 ms | 0.040 ms |" in doc
    for f in (ROOT / "examples").glob("test_*.py"):
        assert f"`examples/{f.name}`" in doc


def test_without_a_benchmark_it_says_not_measured(mod):
    doc = mod.render(TEMPLATE.read_text(), ctx(mod, None))
    assert "*Not measured: `docs/process-leaks-bench.json` is absent (run `make bench`).*" in doc


def test_every_victim_kind_must_be_described(mod):
    """Path: a kind of victim.KINDS the template does not describe is a render error."""
    template = TEMPLATE.read_text().replace(f"{{{{kind:{KINDS[-1]}}}}}", "`gone`")
    with pytest.raises(mod.RenderError, match=KINDS[-1]):
        mod.render(template, ctx(mod, BENCH))


@pytest.mark.parametrize("bad", ["{{help:NO_SUCH}}", "{{const:_leaks.NO_SUCH}}", "{{kind:nope}}", "{{whatever}}"])
def test_unknown_names_are_render_errors(mod, bad):
    with pytest.raises(mod.RenderError):
        mod.render(TEMPLATE.read_text() + bad, ctx(mod, BENCH))


def test_committed_document_is_current():
    """Path: `make docs-check` for docs/plugin.md: the committed file is what the renderer makes now."""
    r = subprocess.run([sys.executable, str(ROOT / "docgen" / "render_plugin.py"), "--check"], capture_output=True)
    assert r.returncode == 0, r.stdout.decode()[-2000:] + r.stderr.decode()


def test_the_cgroup_route_gets_its_own_columns(mod):
    """Path: a benchmark measured with --process-leaks-cgroup adds its figures beside the others."""
    k = dict(BENCH["kinds"]["quiet"])
    k.update(median_protocol_ms_with_cgroup=0.9, median_overhead_ms_cgroup=0.4, median_tracker_ms_cgroup=0.3)
    bench = {**BENCH, "cgroup": True, "pace_s": 0.05, "kinds": {"quiet": k}}
    doc = mod.render(TEMPLATE.read_text(), ctx(mod, bench))
    assert "| quiet | 200 x 3 | 0.500 ms | 0.550 ms | 0.050 ms | 0.040 ms | 0.900 ms | 0.400 ms | 0.300 ms |" in doc
    assert "with and without a cgroup" in doc and "`paced` ones sleeping 0.05 s" in doc
    # The option's help, less its pointer to this very guide (the guide never sends its
    # reader to itself).
    assert _options.HELP_LEAKS_CGROUP.split(" (the plugin guide")[0] in doc
    assert "docs/plugin.md" in _options.HELP_LEAKS_CGROUP and "docs/plugin.md" not in doc


def test_the_opening_report_is_pasted_from_a_real_run(mod, tmp_path):
    """Path: docgen/leak_demo.py runs docgen/leak_demo/test_app.py under --process-leaks (a real pytest,
    a real plugin) and keeps what the terminal showed; the guide opens with exactly those lines.
    The report shows each culprit with its route: a child never waited for, a shell's background
    job (re-parented), and a session fixture's server (own session), found at the teardown of
    the last test."""
    out = tmp_path / "demo.json"
    r = subprocess.run([sys.executable, str(ROOT / "docgen" / "leak_demo.py"), "--out", str(out)], capture_output=True)
    assert r.returncode == 0, r.stderr.decode()
    demo = json.loads(out.read_text())
    assert demo["exit_status"] == 1 and demo["command"] == "pytest --process-leaks test_app.py"
    report = "\n".join(demo["report"])
    for line in (
        f"{_options.PROCESS_LEAKS_HEADER}: test_app.py::test_forgets_its_child left 1 process(es)",
        "escaped: still a child: sleep 600",
        "escaped: re-parented: sleep 600",
        "escaped: own session: sleep 600",
        "  fixture 'server' (session scope, test_app.py): 1 process(es) (own session), "
        "found at the teardown of test_app.py::test_clean",
        "4 passed, 3 errors",
    ):
        assert line in report, report
    doc = mod.render(TEMPLATE.read_text(), mod.Context(None, BENCH, "b.json", ROOT / "examples", demo, "d.json"))
    assert report in doc and "MEASURED: pasted by `docgen/leak_demo.py` (`d.json`" in doc


def test_without_the_leak_demo_it_says_not_run(mod):
    doc = mod.render(TEMPLATE.read_text(), ctx(mod, BENCH))
    assert "*Not run: `docs/process-leaks-demo.json` is absent (run `make leak-demo`).*" in doc


def test_the_checks_time_under_load_is_rendered_from_the_benchmark(mod):
    """Path: {{leak_load}}: the "load" part of docs/process-leaks-bench.json, per test kind, with how it
    was loaded; without it, "not measured"."""
    load = {
        "live": 500,
        "hogs": 2,
        "processes_on_machine": 731,
        "load_start": 2.5,
        "load_end": 3.5,
        "wall_s": 40.0,
        "grace_s": 0.25,
        "kinds": {"leaks": {"n": 20, "median_check_ms": 260.5, "p95_check_ms": 280.25, "max_check_ms": 300.125}},
    }
    doc = mod.render(TEMPLATE.read_text(), ctx(mod, {**BENCH, "load": load}))
    assert "| leaks | 20 | 260.500 ms | 280.250 ms | 300.125 ms |" in doc
    assert "731 processes on the machine during the session, 2 CPU hogs" in doc
    bare = mod.render(TEMPLATE.read_text(), ctx(mod, BENCH))
    assert "*Not measured: `docs/process-leaks-bench.json` has no load part (run `make bench`).*" in bare


def _part(cost):
    return {
        "installed": {"cpu_median_s": 0.8 + cost},
        "disabled": {"cpu_median_s": 0.8},
        "cost_cpu_s": cost,
        "cost_wall_s": cost,
        "noise_cpu_s": 0.01,
    }


def test_the_unused_plugins_cost_is_rendered_with_and_without_writable_byte_code(mod):
    """Path: {{idle_cost}}: docs/bench.json's plugin part, one row per byte-code mode."""
    plugin = {
        "command": "python -m pytest -q -p no:cacheprovider",
        "rounds": 30,
        "date": "2025-01-02T03:04:05Z",
        "git_commit": "abcdef0123",
        "loadavg_at_start": [0.5, 0.4, 0.3],
        "bytecode": {"writable": _part(0.002), "not_writable": _part(0.003)},
    }
    c = mod.Context(None, BENCH, "b.json", ROOT / "examples", stop_bench={"plugin": plugin})
    doc = mod.render(TEMPLATE.read_text(), c)
    assert "| writable | 802.0 ms | 800.0 ms | 2.0 ms | 2.0 ms | ±10.0 ms |" in doc
    assert "| not writable (`PYTHONDONTWRITEBYTECODE=1`) | 803.0 ms | 800.0 ms | 3.0 ms | 3.0 ms | ±10.0 ms |" in doc
    bare = mod.render(TEMPLATE.read_text(), ctx(mod, BENCH))
    assert "*Not measured: `docs/bench.json` has no byte-code part (run `make bench`).*" in bare


def test_the_strangers_table_is_rendered_from_its_json(mod):
    """Path: {{leak_strangers}}: one row per suite and mode of docs/leaks-strangers.json."""
    row = {
        "suite": "execnet",
        "version": "2.1.2",
        "mode": "xdist",
        "tests": 1094,
        "outcome_changes": 0,
        "flaky": 3,
        "reported": 13,
        "verified": 13,
        "misses": 0,
        "outlived_plain": 2,
        "outlived_check": 0,
        "wall_s": {"plain": 90.5, "check": 95.25, "plain-again": 91.0},
    }
    strangers = {"rows": [row], "time": "2025-01-02T03:04:05+00:00", "git_commit": "abc1234", "pytest": "9.2.0"}
    c = mod.Context(None, BENCH, "b.json", ROOT / "examples", strangers=strangers)
    doc = mod.render(TEMPLATE.read_text(), c)
    assert "| execnet 2.1.2 | -n 2 | 1094 | 0 | 3 | 13 | 13 | 0 | 2 / 0 | 90.5 s / 95.25 s |" in doc
    bare = mod.render(TEMPLATE.read_text(), ctx(mod, BENCH))
    assert "*Not run: `docs/leaks-strangers.json` is absent (run `make leaks-strangers`).*" in bare


def test_a_merged_strangers_table_names_each_rows_run(mod):
    """Path: {{leak_strangers}} of a document merged from several runs (`--merge`): each row says
    when and at which commit it was measured (a row from before per-row commits says it has none),
    and the header names the last run as the last, not as the whole table's."""
    row = {
        "suite": "sh",
        "version": "2.4.0",
        "mode": "serial",
        "tests": 190,
        "outcome_changes": 0,
        "flaky": 0,
        "reported": 2,
        "verified": 2,
        "misses": 0,
        "outlived_plain": 0,
        "outlived_check": 0,
        "wall_s": {"plain": 100.0, "check": 90.0, "plain-again": 91.0},
        "time": "2025-01-02T03:04:05+00:00",
    }
    strangers = {
        "rows": [{**row, "git_commit": "abc1234"}, {**row, "mode": "xdist"}],
        "time": "2025-01-02T03:04:05+00:00",
        "git_commit": "abc1234",
        "total_s": 300.0,
        "merged": True,
    }
    c = mod.Context(None, BENCH, "b.json", ROOT / "examples", strangers=strangers)
    doc = mod.render(TEMPLATE.read_text(), c)
    assert "| 100 s / 90 s | 2025-01-02 03:04, abc1234 |" in doc
    assert "| -n 2 | 190 | 0 | 0 | 2 | 2 | 0 | 0 / 0 | 100 s / 90 s | 2025-01-02 03:04, commit not recorded |" in doc
    assert "rows merged from several runs, the last 2025-01-02T03:04:05+00:00, commit abc1234" in doc
    assert "300.0 s for it" in doc


def test_the_strangers_rule_numbers_come_from_the_harness(mod):
    """Path: {{strangers_rule:NAME}}: a number of bench/strangers/__main__.py, DERIVED; a name it
    does not set to a number is a render error."""
    harness = (ROOT / "bench" / "strangers" / "__main__.py").read_text()
    values = {
        n.targets[0].id: n.value.value
        for n in ast.parse(harness).body
        if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name) and isinstance(n.value, ast.Constant)
    }
    c = ctx(mod, BENCH)
    for name in ("RECHECK", "RECHECK_MAX", "MORE_PLAIN"):
        assert c.strangers_rule(name) == f"{values[name]} (DERIVED: `bench/strangers/__main__.py: {name}`)"
    with pytest.raises(mod.RenderError):
        c.strangers_rule("ROOT")

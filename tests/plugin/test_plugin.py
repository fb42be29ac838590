"""The plugin's own behaviour, through real inner pytest processes (runpytest_subprocess)."""

import json
import subprocess

import pytest

from pytest_stoplatency import _options, _procs, _report

LATENCY_TESTS = """
import json, os, signal, pytest

@pytest.mark.stop_latency(bound=5, label="killpg SIGKILL / forker")
def test_killpg(victim, stop_latency):
    v = victim("forker")
    with stop_latency.measure(None, v) as m:
        os.killpg(v.pgid, signal.SIGKILL)
    assert m.latency is not None and m.latency >= m.returned

@pytest.mark.stop_latency(bound=5)
def test_explicit_label(victim, stop_latency):
    v = victim("trap-term", lang="bash")
    with stop_latency.measure("explicit / trap-term", v):
        os.killpg(v.pgid, signal.SIGKILL)
"""


def run(pytester, *args, timeout=60):
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=timeout)


def test_marked_tests_skip_without_the_flag(pytester):
    """Path: no --stop-latency, no ini key -> marked tests skip with the reason naming how to enable them."""
    pytester.makepyfile(LATENCY_TESTS)
    result = run(pytester, "-rs", "-p", "no:xdist")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines([f"*{_options.SKIP_REASON}*"])


def test_ini_key_enables_them(pytester):
    """Path: the ini key `stop_latency = true` means the same as --stop-latency."""
    pytester.makeini("[pytest]\nstop_latency = true\n")
    pytester.makepyfile(LATENCY_TESTS)
    run(pytester, "-p", "no:xdist").assert_outcomes(passed=2)


def test_marker_registered_and_help_texts(pytester):
    """Path: the marker is registered (clean under --strict-markers) and option/ini help come from the constants."""
    pytester.makepyfile(LATENCY_TESTS)
    run(pytester, "--strict-markers", "-p", "no:xdist").assert_outcomes(skipped=2)
    markers = run(pytester, "--markers")
    assert _options.MARKER_LINE in markers.stdout.str()
    helptext = " ".join(run(pytester, "--help").stdout.str().split())
    for text in (_options.HELP_ENABLE, _options.HELP_JSON, _options.HELP_REPEAT, _options.HELP_INI):
        assert " ".join(text.split()) in helptext


def test_table_and_json_with_repeat(pytester):
    """Path: --stop-latency-repeat N runs each marked test N times; the table and the JSON hold every sample."""
    pytester.makepyfile(LATENCY_TESTS)
    result = run(
        pytester,
        "--stop-latency",
        "-p",
        "no:xdist",
        "--stop-latency-repeat",
        "3",
        "--stop-latency-json",
        "out/lat.json",
    )
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(
        [
            "*= stop latency =*",
            "label*n*min*median*p95*max*bound*verdict",
            "explicit / trap-term*3*pass",
            "killpg SIGKILL / forker*3*pass",
            _report.P95_FOOTNOTE,
            "stoplatency: swept * ownerless victim process(es)",
        ]
    )
    # n=3: the p95 column says "-" (a nearest-rank p95 of 3 samples is the max), the JSON keeps it.
    row = next(l for l in result.outlines if l.startswith("killpg SIGKILL / forker"))
    assert row.split()[-4] == "-", row
    doc = json.loads((pytester.path / "out" / "lat.json").read_text())
    assert doc["schema"] == _report.SCHEMA == 2
    assert set(doc) == {
        "schema",
        "machine",
        "time",
        "git_commit",
        "git_dirty",
        "samples",
        "labels",
        "missing_workers",
        "swept",
    }
    assert doc["git_commit"] is None and doc["git_dirty"] is None  # pytester's directory is no git tree
    assert set(doc["machine"]) == {"kernel", "python", "cpus", "hostname"}
    assert len(doc["samples"]) == 6
    for s in doc["samples"]:
        assert set(s) == {"label", "nodeid", "latency", "returned", "bound", "ok", "stopped", "worker"}
        assert s["ok"] and s["stopped"] and s["worker"] is None and 0 <= s["returned"] <= s["latency"] < 5
    lab = doc["labels"]["killpg SIGKILL / forker"]
    assert lab["n"] == 3 and lab["failed"] == 0 and lab["bound"] == 5 and lab["verdict"] == "pass"
    assert lab["min"] <= lab["median"] <= lab["p95"] <= lab["max"]
    assert doc["missing_workers"] == []


def test_bound_fails_names_and_kills_survivors(pytester):
    """Path: a stop that cannot reach the tree (SIGTERM vs trap-term) fails at the bound, naming the
    survivors (pid, command line, state), and kills them; the sample is recorded as failed
    ("stopped": false): it has no stop time (its latency is the bound it outlived), so it is counted
    in its label's "failed" column and left out of min, median, p95 and max, which are the stopped
    sample's alone.

    Ablations: drop the kill_lineage call in the recorder -> the per-test cleanup reports a leak
    (errors=1); `report-failed-apart` (failed samples in the statistics) -> the label's max is the
    failed sample's."""
    pytester.makepyfile("""
import json, os, signal, pytest

@pytest.mark.stop_latency(bound=1, label="SIGTERM only / trap-term")
def test_too_slow(victim, stop_latency):
    v = victim("forker")
    json.dump(v.members(), open("members.json", "w"))
    with stop_latency.measure(None, v):
        os.killpg(v.pgid, signal.SIGTERM)

@pytest.mark.stop_latency(bound=30, label="SIGTERM only / trap-term")
def test_stops(victim, stop_latency):
    v = victim("forker")
    with stop_latency.measure(None, v):
        os.killpg(v.pgid, signal.SIGKILL)
""")
    result = run(pytester, "--stop-latency", "-p", "no:xdist", "--stop-latency-json", "lat.json")
    result.assert_outcomes(failed=1, passed=1)
    members = json.loads((pytester.path / "members.json").read_text())
    assert len(members) == 3
    assert not [m for m in members if _procs.is_alive(*m)]
    out = result.stdout.str()
    assert "3 process(es) still alive at the bound" in out
    for pid, _ in members:
        assert f"pid {pid} [S] " in out
    assert "pytest_stoplatency.victim forker" in out
    result.stdout.fnmatch_lines(["SIGTERM only / trap-term*2*1*fail", _report.FAILED_FOOTNOTE])
    doc = json.loads((pytester.path / "lat.json").read_text())
    failed, stopped = sorted(doc["samples"], key=lambda s: s["stopped"])
    assert failed["ok"] is False and failed["stopped"] is False and failed["latency"] >= 1.0
    assert stopped["stopped"] is True
    lab = doc["labels"]["SIGTERM only / trap-term"]
    assert (lab["n"], lab["failed"], lab["verdict"]) == (2, 1, "fail")
    assert lab["min"] == lab["median"] == lab["max"] == stopped["latency"]


def test_xdist_merges_both_workers(pytester):
    """Path: under -n 2 each worker hands its samples over workeroutput; the controller merges and alone writes."""
    pytester.makepyfile(LATENCY_TESTS)
    result = run(pytester, "--stop-latency", "-n", "2", "--dist", "each", "--stop-latency-json", "lat.json")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["explicit / trap-term*2*pass", "killpg SIGKILL / forker*2*pass"])
    doc = json.loads((pytester.path / "lat.json").read_text())
    assert {s["worker"] for s in doc["samples"]} == {"gw0", "gw1"}
    assert doc["labels"]["killpg SIGKILL / forker"]["n"] == 2
    assert doc["missing_workers"] == []
    assert [p.name for p in pytester.path.iterdir() if p.name.startswith(".lat.json")] == []


def test_xdist_names_a_worker_that_returned_nothing(pytester):
    """Path: a worker that dies hands over no workeroutput; the controller names it in the summary and JSON."""
    pytester.makepyfile("""
import os, pytest

def test_crash():
    os._exit(3)
""")
    result = run(pytester, "--stop-latency", "-n", "2", "--max-worker-restart", "0", "--stop-latency-json", "lat.json")
    result.stdout.fnmatch_lines(["*stoplatency: workers that returned no samples: gw*"])
    doc = json.loads((pytester.path / "lat.json").read_text())
    assert doc["missing_workers"] and all(w.startswith("gw") for w in doc["missing_workers"])


def _git(cwd, *args):
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def test_p95_shown_from_20_samples_and_json_records_a_clean_tree(pytester):
    """Path: with n >= 20 the table prints the p95 (no footnote); in a committed tree the JSON
    names the commit and git_dirty is false (the JSON it writes is under docs/, which does not count).

    Ablation: print "-" whatever n is, or compute git_dirty over docs too, and this goes red.
    """
    pytester.makepyfile(LATENCY_TESTS)
    (pytester.path / ".gitignore").write_text("__pycache__/\nrunpytest-*\nstdout\nstderr\n")  # pytester's own files
    _git(pytester.path, "init", "-q")
    _git(pytester.path, "add", ".")
    _git(pytester.path, "commit", "-qm", "tests")
    result = run(
        pytester,
        "--stop-latency",
        "-p",
        "no:xdist",
        "--stop-latency-repeat",
        "20",
        "-k",
        "killpg",
        "--stop-latency-json",
        "docs/lat.json",
    )
    result.assert_outcomes(passed=20, deselected=20)
    row = next(l for l in result.outlines if l.startswith("killpg SIGKILL / forker"))
    doc = json.loads((pytester.path / "docs" / "lat.json").read_text())
    lab = doc["labels"]["killpg SIGKILL / forker"]
    assert lab["n"] == 20 and row.split()[-4] == f"{lab['p95']:.4f}", row
    assert _report.P95_FOOTNOTE not in result.stdout.str()
    assert doc["git_commit"] == _git(pytester.path, "rev-parse", "HEAD")
    assert doc["git_dirty"] is False, _git(pytester.path, "status", "--porcelain")


def test_git_dirty_counts_code_not_docs(tmp_path):
    """Path: git_dirty is None outside git, false for a clean tree or an edit under docs/ only,
    true for a changed or new code file.

    Ablation: drop the ':!docs' pathspec and the docs-only edit reads dirty.
    """
    assert _report.git_dirty(tmp_path) is None
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "measure.json").write_text("{}\n")
    (tmp_path / "mod.py").write_text("X = 1\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "c")
    assert _report.git_dirty(tmp_path) is False
    (tmp_path / "docs" / "measure.json").write_text('{"new": 1}\n')
    (tmp_path / "docs" / "mutate.json").write_text("{}\n")
    assert _report.git_dirty(tmp_path) is False
    (tmp_path / "new_module.py").write_text("Y = 2\n")
    assert _report.git_dirty(tmp_path) is True
    (tmp_path / "new_module.py").unlink()
    (tmp_path / "mod.py").write_text("X = 2\n")
    assert _report.git_dirty(tmp_path) is True


BAD_ARGUMENTS = {
    "bound-minus-one": (
        "@pytest.mark.stop_latency(bound=-1)\ndef test_x(victim, stop_latency):\n"
        '    v = victim("cooperative")\n    with stop_latency.measure(None, v):\n        v.kill()\n',
        "bound",
    ),
    "bound-zero": (
        'def test_x(victim, stop_latency):\n    v = victim("cooperative")\n'
        '    with stop_latency.measure("x", v, bound=0):\n        v.kill()\n',
        "bound",
    ),
    "bound-nan": (
        'def test_x(victim, stop_latency):\n    v = victim("cooperative")\n'
        '    with stop_latency.measure("x", v, bound=float("nan")):\n        v.kill()\n',
        "bound",
    ),
    "bound-soon": (
        '@pytest.mark.stop_latency(bound="soon")\ndef test_x(victim, stop_latency):\n'
        '    v = victim("cooperative")\n    with stop_latency.measure(None, v):\n        v.kill()\n',
        "bound",
    ),
    "sleep-nan": ('def test_x(victim):\n    victim("cooperative", sleep=float("nan"))\n', "sleep"),
    "children-minus-three": ('def test_x(victim):\n    victim("forker", children=-3)\n', "children"),
    "no-victims": (
        'def test_x(stop_latency):\n    with stop_latency.measure("x", bound=1.0):\n        pass\n',
        "at least one victim",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_ARGUMENTS))
def test_bad_plugin_arguments_are_usage_errors_naming_the_argument(pytester, case):
    """Path: _handle.check_seconds and the children check (victim), and the recorder's
    bound and victim checks (measure): a bound of -1, 0, NaN or "soon", sleep=NaN,
    children=-3 and a measure() timing no victim are pytest.UsageErrors naming the
    argument; nothing is measured, nothing leaks, no raw ValueError."""
    body, needle = BAD_ARGUMENTS[case]
    pytester.makepyfile(test_bad="import pytest\n\n" + body)
    result = run(pytester, "--stop-latency")
    out = result.stdout.str()
    errors = [line for line in out.splitlines() if line.startswith("E ") and "Error" in line]
    assert errors and all("UsageError" in line for line in errors), errors
    assert needle in out, out
    assert result.parseoutcomes().get("failed") == 1, out

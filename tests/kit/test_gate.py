"""The kit's gate (`--compare`, `--compare-fail`, `--compare-allow-new`; kit/gate.py): its
refusals, its codes, and the one JSON format that the kit and `pytest --stop-conformance`
share, each a baseline for the other."""

import json
import os
import subprocess
import sys

import pytest

from pytest_stoplatency.kit import gate, verdict

KIT = [sys.executable, "-m", "pytest_stoplatency", "conformance"]
FAST = ["--stopper", "popen", "--kinds", "cooperative"]  # one quick sample: the gate is under test


@pytest.fixture
def kit(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "TMPDIR": str(work)}

    def run(*args):
        return subprocess.run([*KIT, *map(str, args)], env=env, capture_output=True, text=True, timeout=300,
                              cwd=tmp_path)  # fmt: skip

    run.work = work
    return run


def _other_labels(path, **machine):
    doc = {"machine": machine, "labels": {"other / cooperative": {"n": 1, "failed": 0, "median": 0.01}}}
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize(
    "text, percent, seconds, old, limit",
    [
        ("median:20%", 20.0, None, 1.0, 1.2),
        ("median:5ms", None, 0.005, 1.0, 1.005),
        ("max:+50ms", None, 0.05, 0.1, 0.15),
        ("p95:0.2s", None, 0.2, 1.0, 1.2),
        ("min:300us", None, 0.0003, 0.001, 0.0013),
        ("median:0%", 0.0, None, 1.0, 1.0),
    ],
)
def test_a_threshold_is_relative_or_absolute_by_its_unit(text, percent, seconds, old, limit):
    """Path: gate.parse_rule and Rule.limit: % is relative, us/ms/s absolute (with or without
    its +). Ablation threshold-absolute-unit (an absolute threshold read as a percentage)
    turns it red."""
    rule = gate.parse_rule(text, "--compare-fail")
    assert (rule.percent, rule.seconds) == (percent, seconds)
    assert rule.limit(old) == pytest.approx(limit)
    assert rule.regressed(old, limit * 1.001 + 1e-9) and not rule.regressed(old, limit * 0.999)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--compare-fail", "median:20%"], "--compare-fail needs --compare"),
        (["--compare", "base.json", "--compare-fail", "median:0.001"], "say its unit"),
        (["--compare", "base.json", "--compare-fail", "max:1e309"], "a finite number"),
        (["--compare", "base.json", "--compare-fail", "median:nan%"], "a finite number"),
        (["--compare", "base.json", "--compare-fail", "median:-5ms"], "a finite number"),
        (["--compare", "base.json", "--compare-fail", "mean:5%"], "STAT:THRESH"),
        (["--compare", "nosuch.json"], "--compare nosuch.json"),
        (["--compare", "junk.json"], "no 'labels'"),
        (["--compare-allow-new"], "--compare-allow-new needs --compare"),
    ],
)
def test_a_bad_gate_is_a_usage_error_before_any_sample(kit, tmp_path, args, message):
    """Path: cli.parse through gate.parse_rule and gate.load: exit 2, one line naming the
    fault, nothing started (the work directory stays empty)."""
    _other_labels(tmp_path / "base.json")
    (tmp_path / "junk.json").write_text(json.dumps({"samples": []}))
    got = kit(*FAST, *args)
    assert got.returncode == 2 and message in got.stderr, got.stderr
    assert "Traceback" not in got.stderr
    assert list(kit.work.iterdir()) == []


def test_no_label_in_common_exits_6_unless_allowed_and_names_the_other_machine(kit, tmp_path):
    """Path: gate.compare's no-label-in-common refusal and report.gated's code: exit 6 with
    the reason; --compare-allow-new passes (exit 0, the label 'new'); the baseline's machine
    named with both fingerprints on one line. Ablation no-label-in-common-refused turns it red."""
    _other_labels(tmp_path / "base.json", kernel="9.9.9-other", cpus=8, python="3.99.0")
    refused = kit(*FAST, "--compare", "base.json", "--json", "r.json")
    assert refused.returncode == gate.NO_LABEL_IN_COMMON, refused.stdout + refused.stderr
    assert "gate failed: no label in common with the baseline" in refused.stdout
    assert json.loads((tmp_path / "r.json").read_text())["exit_code"] == gate.NO_LABEL_IN_COMMON
    machine = [line for line in refused.stdout.splitlines() if "another machine" in line]
    assert len(machine) == 1 and "baseline kernel 9.9.9-other, 8 CPUs, Python 3.99.0; this run kernel" in machine[0]
    allowed = kit(*FAST, "--compare", "base.json", "--compare-allow-new")
    assert allowed.returncode == verdict.OK, allowed.stdout + allowed.stderr
    assert any(line.split()[:3] == ["popen", "/", "cooperative"] and line.endswith("new")
               for line in allowed.stdout.splitlines())  # fmt: skip


def test_a_label_slower_than_an_absolute_threshold_exits_5(kit, tmp_path):
    """Path: the kit's gate on its own --json: a baseline whose median is 0 (edited) makes any
    real stop slower than +0ms: exit 5, the label and both medians named. Ablation
    compare-threshold turns it red."""
    first = kit(*FAST, "--json", "base.json")
    assert first.returncode == verdict.OK, first.stdout + first.stderr
    doc = json.loads((tmp_path / "base.json").read_text())
    assert set(doc["labels"]) == {"popen / cooperative"} and doc["machine"] == gate.machine()
    doc["labels"]["popen / cooperative"]["median"] = 0.0
    (tmp_path / "base.json").write_text(json.dumps(doc))
    got = kit(*FAST, "--compare", "base.json", "--compare-fail", "median:0ms", "--markdown", "t.md")
    assert got.returncode == gate.GATE_FAILED, got.stdout + got.stderr
    assert "gate failed: popen / cooperative: median 0.0000 ->" in got.stdout
    assert "gate failed: popen / cooperative: median 0.0000 ->" in (tmp_path / "t.md").read_text()
    lenient = kit(*FAST, "--compare", "base.json", "--compare-fail", "median:+60s")
    assert lenient.returncode == verdict.OK, lenient.stdout + lenient.stderr


def test_the_kit_and_pytest_take_each_others_json_as_baseline(kit, tmp_path, pytester):
    """Path: one label format (`STOPPER / KIND`, kit/gate.kit_labels) and one `labels` key:
    the kit's --json is pytest --stop-conformance's baseline, and pytest's --stop-latency-json
    (with --stop-latency-repeat 2, honoured: n = 2) is the kit's."""
    assert kit(*FAST, "--json", "kit.json").returncode == verdict.OK
    pytester.makepyfile(test_own="def test_own():\n    pass\n")
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:xdist", "--stop-conformance", "popen", "-k", "cooperative",
        "--stop-latency-repeat", "2", "--stop-latency-json", "lat.json",
        "--stop-latency-compare", tmp_path / "kit.json", "--stop-latency-compare-fail", "median:+60s", timeout=300,
    )  # fmt: skip
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    rows = [line for line in result.stdout.lines if line.strip().startswith("popen / cooperative")]
    assert rows and "new" not in rows[-1] and "-" not in rows[-1].split()[3:5], rows
    labels = json.loads((pytester.path / "lat.json").read_text())["labels"]
    assert labels["popen / cooperative"]["n"] == 2
    back = kit(*FAST, "--compare", pytester.path / "lat.json", "--compare-fail", "median:+60s")
    assert back.returncode == verdict.OK, back.stdout + back.stderr
    assert any(line.split()[:3] == ["popen", "/", "cooperative"] and not line.endswith("new")
               for line in back.stdout.splitlines())  # fmt: skip


needs_plots = pytest.mark.skipif(
    __import__("importlib").util.find_spec("matplotlib") is None, reason="the plots extra (make venv installs it)"
)


def test_a_cell_shows_the_statistic_its_colour_comes_from_with_n():
    """Path: pictures.cell_text and kit/picture._cell_text: an over-bound cell (its max over a
    3 s bound, its median under it: the issue's orange cell reading 2.81 s) shows its max; an
    orphaned cell says how many of its n samples were not stopped, not a bare sum."""
    from pytest_stoplatency import pictures
    from pytest_stoplatency.kit import picture

    over = {"verdict": "over-bound", "n": 5, "stopped": 5, "orphans": 0, "errors": [], "median_s": 2.81, "max_s": 3.4}
    orphaned = {"verdict": "orphaned", "n": 5, "stopped": 1, "orphans": 4, "errors": [], "median_s": 0.1, "max_s": 0.1}
    for text in (pictures.cell_text, picture._cell_text):
        assert "3.4" in text(over) and "2.81" not in text(over) and "n=5" in text(over)
        assert text(orphaned).startswith("4/5 orphaned")


@needs_plots
def test_the_kit_picture_names_the_command_marks_orphans_and_shows_the_gate(kit, tmp_path):
    """Path: pictures.kit_svg: the --stop column is named by its command, every strip has its n,
    a kind with orphans stays in the latency panel marked ORPHANED, and with --compare the
    gate's panel shows the baseline beside this run."""
    stop = ["--stop", "kill -KILL {pid}", "--kinds", "cooperative,setsid-escapee"]
    assert kit(*stop, "--json", "base.json").returncode == verdict.ORPHANED
    got = kit(*stop, "--compare", "base.json", "--svg", "p.svg", "--json", "now.json")
    assert got.returncode == verdict.ORPHANED, got.stdout + got.stderr
    svg = (tmp_path / "p.svg").read_text()
    assert "stop: kill -KILL {pid}" in svg
    assert "stop: kill -KILL {pid} / cooperative (n=1)" in svg
    assert "stop: kill -KILL {pid} / setsid-escapee (n=0 stopped; 1/1 ORPHANED)" in svg
    rows = {r["kind"]: r for r in json.loads((tmp_path / "now.json").read_text())["stoppers"][0]["rows"]}
    assert pictures_max(rows["cooperative"]["max_s"]) in svg
    assert "baseline " in svg and "this run " in svg and "the gate" in svg


def pictures_max(seconds):
    from pytest_stoplatency import pictures

    return f"max {pictures._t(seconds)} n=1"


@needs_plots
def test_the_plugin_picture_shows_the_gate_beside_its_strips():
    """Path: pictures.samples_svg with the gate's series (as _linux passes it under
    --stop-latency-compare): n on each label, and baseline and this run side by side."""
    from pytest_stoplatency import pictures

    samples = [
        {"label": "a", "latency": 0.2, "bound": 1, "stopped": True},
        {"label": "a", "latency": 1, "bound": 1, "stopped": False},
    ]
    series = pictures.compare_series({"a": {"median": 0.1, "n": 5}}, {"a": {"median": 0.2, "n": 2}}, "median", ["a: x"])
    svg = pictures.samples_svg(samples, "t", series)
    assert "a (n=2; 1 NOT STOPPED)" in svg and "baseline 100 ms" in svg and "this run 200 ms" in svg
    assert "a (n=5 / 2)" in svg  # the gate panel's label: n of the baseline and of this run

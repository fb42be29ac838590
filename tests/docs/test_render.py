"""docs/stop-latency.md is rendered from measurements and the code's defaults, never by hand."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import runner.defaults
from mutation import load
from mutation.campaign import Outcome, Result
from mutation.report import to_json
from mutation.verdict import KILLED, Verdict

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "docs" / "stop-latency.template.md"


def render(render_mod, measure=None, mutate=None, template=TEMPLATE):
    return render_mod.render_files(template, measure, mutate)


def test_measured_label_printed_with_its_provenance(render_mod, measure_json):
    """Path: a label present in measure.json is printed with test, n, median, p95, max, machine, date."""
    doc = render(render_mod, measure_json)
    line = next(l for l in doc.splitlines() if "group route, trapping group" in l)
    for part in (
        "median 1.013 s",
        "p95 1.031 s",
        "max 1.047 s",
        "MEASURED",
        "n=20",
        "tests/runner/test_reaper.py::test_group_trap_term",
        "ci-box",
        "2025-01-02T03:04:05",
    ):
        assert part in line, part
    # The plugin's own label has no slot in the prose: the generic table carries it.
    assert "| plugin / own label |" in doc


def test_absent_label_is_not_printed_as_a_number(render_mod, measure_json):
    """Path: a label missing from the run says so instead of printing a figure."""
    doc = render(render_mod, measure_json)
    line = next(l for l in doc.splitlines() if "pid route alone" in l)
    assert "not measured" in line and "MEASURED" not in line
    assert not any(ch.isdigit() for ch in line.split("not measured")[0].replace("pid route", ""))


def test_no_measure_run_at_all(render_mod, tmp_path):
    """Path: without measure.json every measured slot says 'not measured', and nothing breaks."""
    doc = render(render_mod, tmp_path / "absent.json")
    assert "MEASURED:" not in doc
    assert doc.count("not measured in the recorded run") >= 9


def test_graceful_worst_case_is_derived_from_defaults(render_mod, monkeypatch):
    """Path: the graceful worst case is CALL_TIMEOUT + HOOK_TIMEOUT + VERIFY_TIMEOUT, read from the code.
    Ablation: a number typed into the template would not move with the default."""
    d = runner.defaults
    expected = d.CALL_TIMEOUT + d.HOOK_TIMEOUT + d.VERIFY_TIMEOUT
    assert f"= {expected:g} s" in render(render_mod)
    monkeypatch.setattr(runner.defaults, "CALL_TIMEOUT", 600.0)
    doc = render(render_mod)
    assert f"= {600.0 + d.HOOK_TIMEOUT + d.VERIFY_TIMEOUT:g} s" in doc
    assert f"= {expected:g} s" not in doc


def test_changed_default_changes_the_output(render_mod, monkeypatch):
    """Path: every DERIVED figure is imported at render time, with its name and file."""
    before = render(render_mod)
    monkeypatch.setattr(runner.defaults, "WATCHDOG_POLL", 0.037)
    after = render(render_mod)
    assert before != after
    assert "`WATCHDOG_POLL` = 37 ms (DERIVED: `runner/defaults.py: WATCHDOG_POLL`)" in after


def test_unknown_constant_or_placeholder_is_refused(render_mod, tmp_path):
    """Path: a template naming a constant the code lacks fails instead of printing a guess."""
    for text, msg in (
        ("{{derived:NO_SUCH}}", "does not define"),
        ("{{mystery}}", "unknown placeholder"),
        ("{{exitcode:NOPE}}", "does not define"),
    ):
        t = tmp_path / "t.md"
        t.write_text(text)
        with pytest.raises(render_mod.RenderError, match=msg):
            render(render_mod, template=t)


def test_ablation_table_from_the_campaigns_json(render_mod, tmp_path):
    """Path: the ablation table renders what mutation.report.to_json writes (every mutation,
    its path, its killer, its documented survivors)."""
    campaign = load(ROOT / "mutation" / "mutations.toml")
    results = [Result(m, Verdict(KILLED, "", [m.killers[0]], []), 1.0) for m in campaign.mutations]
    out = Outcome(results, 1.0, 2.0, "2025-01-02T00:00:00+00:00", "abc", {"hostname": "h"})
    mutate = tmp_path / "mutate.json"
    mutate.write_text(json.dumps(to_json(out)))
    doc = render(render_mod, mutate=mutate)
    for m in campaign.mutations:
        row = next(l for l in doc.splitlines() if l.startswith(f"| `{m.id}` |"))
        assert "| killed |" in row and m.killers[0] in row
        for s in m.survivors:
            assert s in row
    assert f"{len(campaign.mutations)} of {len(campaign.mutations)} mutations killed" in doc


def test_docs_check_fails_on_a_stale_doc(render_mod, measure_json, tmp_path, monkeypatch, capsys):
    """Path: --check passes on a fresh rendering, fails with a diff after a hand edit or a
    changed default (what CI's `make docs-check` runs)."""
    out = tmp_path / "stop-latency.md"
    args = ["--measure", str(measure_json), "--mutate", str(tmp_path / "none.json"), "--out", str(out)]
    assert render_mod.main(args) == 0
    assert render_mod.main(args + ["--check"]) == 0
    out.write_text(out.read_text().replace("median 1.013 s", "median 0.500 s"))
    capsys.readouterr()
    assert render_mod.main(args + ["--check"]) == 1
    assert "+" in capsys.readouterr().out
    assert render_mod.main(args) == 0
    monkeypatch.setattr(runner.defaults, "CALL_TIMEOUT", 60.0)
    assert render_mod.main(args + ["--check"]) == 1


def test_cli_check_in_a_subprocess(tmp_path):
    """Path: the script as make runs it; exit 0 fresh, 1 stale."""
    out = tmp_path / "doc.md"
    cmd = [
        sys.executable,
        str(ROOT / "docs" / "render_stop_latency.py"),
        "--measure",
        str(tmp_path / "none.json"),
        "--mutate",
        str(tmp_path / "none2.json"),
        "--out",
        str(out),
    ]
    subprocess.run(cmd, check=True, timeout=60)
    assert subprocess.run(cmd + ["--check"], capture_output=True, timeout=60).returncode == 0
    out.write_text(out.read_text() + "hand edit\n")
    stale = subprocess.run(cmd + ["--check"], capture_output=True, text=True, timeout=60)
    assert stale.returncode == 1 and "hand edit" in stale.stdout and "make docs" in stale.stderr


INNER_STOP_TEST = """
import os, signal
import pytest

@pytest.mark.stop_latency(bound=3.0, label="inner killpg / trap-term")
def test_killpg(victim, stop_latency):
    v = victim("trap-term")
    with stop_latency.measure(None, v):
        os.killpg(v.pgid, signal.SIGKILL)
"""


def test_renders_a_json_the_plugin_itself_wrote(render_mod, pytester, tmp_path):
    """Path: the plugin's real JSON writer (an inner `pytest --stop-latency
    --stop-latency-repeat 3 --stop-latency-json`) feeds the renderer: the label is printed
    as MEASURED with n=3, and its repeats name one test, not three."""
    pytester.makepyfile(test_inner=INNER_STOP_TEST)
    out = tmp_path / "measure.json"
    result = pytester.runpytest_subprocess(
        "--stop-latency", "--stop-latency-repeat", "3", "-p", "no:xdist", f"--stop-latency-json={out}"
    )
    result.assert_outcomes(passed=3)
    template = tmp_path / "t.md"
    template.write_text("{{measured:inner killpg / trap-term}}\n")
    doc = render_mod.render_files(template, out, None)
    assert "MEASURED" in doc and "n=3" in doc
    assert doc.count("test_inner.py::test_killpg") == 1 and "rep" not in doc


def test_derived_figures_carry_their_unit_and_follow_the_defaults(render_mod, tmp_path, monkeypatch):
    """Path: DERIVED figures are read from runner/defaults.py at render time, each in its
    own unit (seconds, bytes, a count), and the short version's graceful sum follows a
    changed default instead of staying "hours"."""
    template = tmp_path / "t.md"
    template.write_text(
        "{{derived:OUTPUT_CAP_BYTES}}|{{derived:REPAIR_MAX_ATTEMPTS}}|{{derived:KILL_GRACE}}|{{graceful_sum}}\n"
    )
    monkeypatch.setattr(runner.defaults, "CALL_TIMEOUT", 60.0)
    monkeypatch.setattr(runner.defaults, "HOOK_TIMEOUT", 10.0)
    monkeypatch.setattr(runner.defaults, "VERIFY_TIMEOUT", 30.0)
    cap, attempts, grace, total = render_mod.render_files(template, None, None).strip().split("|")
    assert cap.startswith(f"{runner.defaults.OUTPUT_CAP_BYTES:,} bytes")
    assert attempts.startswith(f"{runner.defaults.REPAIR_MAX_ATTEMPTS} (DERIVED")
    assert grace.startswith("1.00 s (DERIVED: `runner/defaults.py: KILL_GRACE`)")
    assert total.startswith("100 s (") and "CALL_TIMEOUT + HOOK_TIMEOUT + VERIFY_TIMEOUT" in total

"""docs/stop-latency.md is rendered from measurements and the code's defaults, never by hand."""

import json
import os
import shutil
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
        str(ROOT / "docgen" / "render_stop_latency.py"),
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


def _section(doc, heading):
    """The text of one `## heading` section."""
    return doc.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]


def test_bench_stoppers_table(render_mod, bench_json):
    """Path: "Against other stoppers" prints every cell of docs/bench.json with n, median and
    max (MEASURED, with machine, date, commit and kill grace), the orphans left in bold,
    and a stopper that was not installed as a row saying so, never as figures."""
    doc = render_mod.render_files(TEMPLATE, None, None, None, bench_json)
    part = _section(doc, "Against other stoppers")
    tags = ("MEASURED by `make bench`", "bench-box", "2025-02-03T04:05:06Z", "`4567def`", "kill grace 1 s", "n=3")
    for tag in tags + ("load average 0.25 at start",):
        assert tag in part, tag
    row = next(l for l in part.splitlines() if l.startswith("| killpg TERM"))
    assert "| 3/3 stopped, median 1.006 s, max 1.011 s |" in row
    assert "| 0/3 stopped; **3 orphans left** |" in row
    row = next(l for l in part.splitlines() if l.startswith("| `runner stop --now`"))
    assert "3/3 stopped, median 35 ms, max 52 ms" in row and "3/3 stopped, median 1.027 s, max 1.043 s" in row
    assert "orphan" not in row
    row = next(l for l in part.splitlines() if l.startswith("| tini -g"))
    assert "not measured: `tini` is not installed" in row and not any(c.isdigit() for c in row)
    assert "- `runner stop --now`: runner stop --now" in part  # what each stopper does


def test_bench_scale_and_load(render_mod, bench_json):
    """Path: "At scale and under load": the raw kill, the runner's forced phase minus the
    kill grace, end to end, and their ratio, per tree size; then each load mode with n,
    median, p95, max and the slowest command; a mode this runner lacks says so."""
    doc = render_mod.render_files(TEMPLATE, None, None, None, bench_json)
    part = _section(doc, "At scale and under load")
    assert "MEASURED by `make bench`" in part and "bench-box" in part
    row = next(l for l in part.splitlines() if l.startswith("| 1,000 |"))
    for cell in (
        "median 122 ms, max 130 ms (n=3)",
        "median 146 ms, max 146 ms (n=3)",
        "median 1.330 s, max 1.350 s (n=3)",
        "| 1.20× |",
        "| 0, 0 |",
    ):
        assert cell in row, cell
    row = next(l for l in part.splitlines() if l.startswith("| `runner stop` (one command per run)"))
    assert "| 50/50 | median 1.245 s, max 1.490 s (n=50 runs, one command each) | 1.470 s | 1.400 s | [0] | 0 |" in row
    row = next(l for l in part.splitlines() if l.startswith("| `runner stop --all`"))
    assert "not measured: this runner has no `runner stop --all`" in row


def test_no_bench_run_renders_not_measured(render_mod, tmp_path, bench_json):
    """Path: without docs/bench.json both sections say "not measured" (and how to measure)
    instead of failing; a run without one part says that part was not measured."""
    doc = render_mod.render_files(TEMPLATE, None, None, None, tmp_path / "absent.json")
    for heading in ("Against other stoppers", "At scale and under load"):
        part = _section(doc, heading)
        assert "not measured: no benchmark run recorded" in part and "make bench" in part
        assert "MEASURED" not in part and "|" not in part
    data = json.loads(bench_json.read_text())
    del data["scale"], data["stoppers"]
    bench_json.write_text(json.dumps(data))
    doc = render_mod.render_files(TEMPLATE, None, None, None, bench_json)
    assert "not measured: the run recorded in" in _section(doc, "Against other stoppers")
    part = _section(doc, "At scale and under load")
    assert "At scale: not measured" in part and "| `runner stop` (one command per run) | 50/50 |" in part


BENCH_RUN_LIMIT = 300
"""A hang guard for a reduced benchmark run inside a test (about 25 s on a quiet 2-core
machine; over 90 s, the suite's default, beside other work at load 25): not a speed."""


@pytest.mark.timeout(BENCH_RUN_LIMIT + 60)
def test_renders_a_json_the_bench_itself_wrote(render_mod, tmp_path):
    """Path: the benchmark's real writer (`python -m bench.stoppers`, a reduced run: one
    victim under `runner stop --now`, a tree of 2 processes, 2 runs at once) feeds the
    renderer: every part is MEASURED, the runner's cell stopped its tree with no orphan,
    and the command's own --check passes."""
    out = tmp_path / "bench.json"
    args = ["--stoppers", "runner-stop-now", "--victims", "cooperative", "--n", "1"]
    args += ["--sizes", "2", "--scale-n", "1", "--load-runs", "2", "--kill-grace", "0.2"]
    proc = subprocess.run(
        [sys.executable, "-m", "bench.stoppers", *args, "--json", str(out), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=BENCH_RUN_LIMIT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = render_mod.render_files(TEMPLATE, None, None, None, out)
    stoppers = _section(doc, "Against other stoppers")
    row = next(l for l in stoppers.splitlines() if l.startswith("| `runner stop --now`"))
    assert "| 1/1 stopped, median " in row and "orphan" not in row
    assert "kill grace 0.2 s" in stoppers and "n=1 per cell" in stoppers
    scale_load = _section(doc, "At scale and under load")
    assert "| 2 | median " in scale_load
    assert "| `runner stop` (one command per run) | 2/2 |" in scale_load
    assert "| `runner stop --now` (one command per run) | 2/2 |" in scale_load


@pytest.mark.timeout(BENCH_RUN_LIMIT + 60)
def test_renders_the_size_parts_the_bench_itself_wrote(render_mod, tmp_path):
    """Path: the benchmark's real writer of the items and journal parts (bench/sizes.py
    through `python -m bench.stoppers --parts items,journal`, reduced: 5 items, a 2 MiB
    journal) feeds the renderer: both tables MEASURED, every stop and status exited 0
    (the command's own --check)."""
    out = tmp_path / "bench.json"
    args = ["--parts", "items,journal", "--item-counts", "5", "--items-window", "5", "--journal-mib", "2"]
    proc = subprocess.run(
        [sys.executable, "-m", "bench.stoppers", *args, "--json", str(out), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=BENCH_RUN_LIMIT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = render_mod.render_files(TEMPLATE, None, None, None, out)
    sizes = _section(doc, "Costs against the size of a run")
    assert "**Items.** MEASURED" in sizes and "| 5 | 5 (all) |" in sizes
    items = json.loads(out.read_text())["items"]
    bare = items["bare_loop_per_second"]
    assert bare > 0 and f"nothing else spawned {bare:g} a second" in sizes  # the physical limit beside it
    row = next(line for line in sizes.splitlines() if line.startswith("| 5 | 5 (all) |"))
    assert f"| {items['rows'][0]['of_bare_loop']:.0%} |" in row, row  # the items' rate over the bare loop's
    assert "**Journal size.** MEASURED" in sizes and "journal of 2 MiB" in sizes
    row = next(line for line in sizes.splitlines() if line.startswith("| `runner status --json` |"))
    assert row.count("exit 0") == 2, row


@pytest.mark.timeout(BENCH_RUN_LIMIT + 60)
def test_renders_the_runs_part_the_bench_itself_wrote(render_mod, tmp_path):
    """Path: the benchmark's real writer of the runs part (bench/many_runs.py through
    `python -m bench.stoppers --parts runs`, reduced: 2 runs, 20 polls) feeds the renderer:
    `runner list`, `stop --all` (exit 6, nothing live), the first `/api/runs` and the
    server's memory over the polls, MEASURED, for this runner and (where git has it) the
    runner before issue 32; `list` exits 0 on both sides and the page's polls are answered
    304 once the first gave the ETag."""
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.stoppers", "--parts", "runs", "--run-counts", "2", "--polls", "20"]
        + ["--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=BENCH_RUN_LIMIT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    part = json.loads(out.read_text())["runs"]
    sides = part["rows"][0]["sides"]
    assert part["rows"][0]["runs"] == 2 and "now" in sides
    for side in sides.values():
        assert side["list"]["rc"] == 0 and side["stop_all"]["rc"] == 6  # NO_LIVE_RUN: nothing live
        assert side["memory_page"]["not_modified"] == 19 and side["memory_unconditional"]["not_modified"] == 0
        assert side["first_poll"]["bytes"] > 0
    doc = _section(render_mod.render_files(TEMPLATE, None, None, None, out), "Costs against the number of runs")
    assert "MEASURED by `make bench`" in doc and "over 20 polls" in doc
    now = next(line for line in doc.splitlines() if line.startswith("| 2 | now |"))
    assert now.count(" CPU)") == 3 and now.count(" MB (range ") == 2, now
    if "reference_missing" not in part:
        assert any(line.startswith("| 2 | before (commit `") for line in doc.splitlines()), doc


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare")
def test_renders_the_container_pid1_part_the_bench_itself_wrote(render_mod, tmp_path):
    """Path: the benchmark's real writer of the pid1 part (bench/pid1_window.py through
    `python -m bench.stoppers --parts pid1`, one sample each) feeds the renderer: how long
    `runner` as PID 1 is deaf to SIGTERM, MEASURED, quiet and beside two CPU hogs, and
    tini's rows where it is installed (else why not)."""
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.stoppers", "--parts", "pid1", "--pid1-n", "1", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = _section(render_mod.render_files(TEMPLATE, None, None, None, out), "A container's PID 1")
    assert "MEASURED by `make bench`" in doc and "bench/pid1_window.py" in doc
    for beside in ("nothing", "two CPU hogs"):
        assert f"| `runner` (no init) | {beside} | 1 | " in doc
    tini = "| `tini` (the recipe's) | "
    assert tini + ("nothing | 1 | " if shutil.which("tini") else "not measured") in doc


def test_renders_the_stoppers_cost_part_the_bench_itself_wrote(render_mod, tmp_path):
    """Path: the benchmark's real writer of the cost part (bench/stopper_cost.py through
    `python -m bench.stoppers --parts cost`, one sample each) feeds the renderer: the bare
    start-up, the stop's start-up and imports alone, and the whole `runner stop --now` of a
    cooperative run (exit 0), MEASURED, with the ratio in start-ups in wall and CPU time;
    then the same sample split at its request lodged and its engine gone (both seen: the
    archived request and the bench's pidfd on the engine), and the floor (the minimal
    imports plus the engine's own stop)."""
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.stoppers", "--parts", "cost", "--cost-n", "1", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    part = json.loads(out.read_text())["cost"]
    assert part["codes"] == [0] and part["startups"] > 0 and part["startups_cpu"] > 0
    doc = _section(render_mod.render_files(TEMPLATE, None, None, None, out), "The stopper's own cost")
    assert "MEASURED: n=1 each" in doc
    for row in ("| `python -c pass` | ", "| its start-up and imports alone (nothing run) | "):
        assert row in doc
    assert f"| `{part['command']} stop --now`, cooperative run | " in doc
    assert f"| in Python start-ups | {part['startups']:.2f} | {part['startups_cpu']:.2f} |" in doc
    assert "goal 2" not in doc and "goal of 2" not in doc  # the retired goal (issue 42, item 8)
    split = part["split"]
    assert split["n"] == 1
    lodged, engine, after = split["samples"][0]
    assert lodged > 0 and engine > 0 and after >= 0
    assert abs(lodged + engine + after - part["samples"]["stop_now"][0][0]) < 1e-6
    assert "| the request lodged to the engine gone (the engine's own stop) | " in doc
    assert f"(the floor) | {part['floor_startups']:.2f} |" in doc


STOP_MODES = (
    "`runner stop`",
    "`runner stop --now`",
    "`runner stop --graceful`",
    "`runner stop --graceful --wait`",
    "`runner stop --all`",
    "`runner stop --all --now`",
    "the STOP file",
    "`touch RUNDIR/PAUSE`",
    "Ctrl-C once",
    "Ctrl-C twice",
    'dashboard "Stop"',
    'dashboard "Stop now"',
    'dashboard "Stop gracefully"',
    "SIGTERM to the engine",
)


def _mode_row(doc, mode):
    return next(line for line in doc.splitlines() if line.startswith(f"| {mode}"))


def test_stop_modes_table_has_every_mode_with_a_derived_worst_case(render_mod, measure_json, monkeypatch):
    """Path: {{stop_modes}} renders every way to stop a run from runner/events.py's WAYS,
    each with its StopKind's worst case added up from runner/defaults.py, lock waits
    named, the hard stop's as StopSpec.hard_worst_case, moving with the defaults.
    Ablation: a typed 12 s stays put."""
    monkeypatch.setattr(runner.defaults, "STOP_GRACE", 20.0)
    doc = render(render_mod, measure_json)
    for mode in STOP_MODES:
        assert _mode_row(doc, mode)
    hard = _mode_row(doc, "`runner stop`")
    assert (
        "**23.50 s** = `REQUEST_LOCK_WAIT` 500 ms (lock wait) + `STOP_GRACE` 20.00 s + `KILL_GRACE` 1.00 s"
        " + `CONFIRM_TIMEOUT` 1.00 s + `LOCK_WAIT` 1.00 s (lock wait)"
    ) in hard
    assert "`OK` 0" in hard and "`STOP_FORCED` 8" in hard
    assert "**3.50 s**" in _mode_row(doc, "`runner stop --now`")
    assert "(lock wait)" in _mode_row(doc, 'dashboard "Stop now"')
    assert "2 h 32 min" in _mode_row(doc, "the STOP file")
    assert "not measured" in _mode_row(doc, "`runner stop --now`")  # absent from this measure.json


def test_stop_modes_exit_codes_must_be_documented_for_the_command(render_mod, monkeypatch):
    """Path: a row's exit codes are checked against the command's row of
    docs/exit-codes.md: a code the command does not return is a RenderError."""
    ctx = render_mod.Context(None, None)
    ways = dict(ctx._WAYS)
    what, measured, _, resumable = ways["runner stop --now"]
    ways["runner stop --now"] = (what, measured, ("stop --now", ("OK", "STOP_FORCED")), resumable)  # never falls back
    monkeypatch.setattr(render_mod.Context, "_WAYS", ways)
    with pytest.raises(render_mod.RenderError, match="stop --now.*STOP_FORCED"):
        ctx.stop_modes()


def test_one_all_command_is_one_sample(render_mod, bench_json):
    """Path: a `--all` load row, one command for every run, says n=1 (its runs all end
    when it returns), not n=<runs>, in the load table and in the stop-modes table."""
    from bench import load

    data = json.loads(bench_json.read_text())
    samples = [{"stopped": True, "latency_s": 1.7, "left": 0} for _ in range(50)]
    data["load"]["modes"][1] = {"mode": "stop --all", **load.summarize(samples, [1.7], [0])}
    bench_json.write_text(json.dumps(data))
    doc = render_mod.render_files(TEMPLATE, None, None, None, bench_json)
    row = next(l for l in doc.splitlines() if l.startswith("| `runner stop --all` (one command)"))
    assert "1.700 s (n=1: one command for 50 runs" in row and "n=50" not in row
    assert "`stop --all`: 1.700 s for 50 runs (n=1: one command)" in _mode_row(doc, "`runner stop --all`")


def test_a_duration_typed_into_the_template_is_refused(render_mod, tmp_path):
    """Path: render() refuses a template whose prose types a duration (`make docs-check`
    exits 2): a target is stated through {{bound:...}} or not at all. Code, inline code
    and placeholders are not prose. Ablation: drop refuse_typed_durations and the
    dashboard's old "within 1 s" renders again."""
    assert render_mod.typed_durations("click to run-stop within 1 s of it, plus 200 ms") == ["1 s", "200 ms"]
    assert render_mod.typed_durations("```\nsleep 600s\n```\n`sleep 7200` and {{derived:KILL_GRACE}}") == []
    bad = tmp_path / "t.md"
    bad.write_text(TEMPLATE.read_text() + "\nThe page shows it within 1 s.\n")
    with pytest.raises(render_mod.RenderError, match="types a duration.*'1 s'"):
        render(render_mod, template=bad)
    r = subprocess.run(
        [sys.executable, "docgen/render_stop_latency.py", "--check", "--template", str(bad)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert r.returncode != 0 and "types a duration" in r.stderr


def test_a_stated_bound_is_the_constant_a_test_asserts(render_mod, tmp_path):
    """Path: {{bound:FILE:NAME}} renders the test file's own constant, and only one the
    file uses as `bound=` or in an assert; a constant no test asserts is refused."""
    assert render_mod.asserted_bound("tests/runner/test_dashboard_browser.py", "PAGE_BOUND") == 3.0
    assert (
        render_mod.asserted_bound("tests/runner/test_dashboard_browser.py", "BOUND") == runner.defaults.KILL_GRACE + 4
    )
    doc = render(render_mod)
    assert "3.00 s (ASSERTED: `tests/runner/test_dashboard_browser.py: PAGE_BOUND`)" in doc
    with pytest.raises(render_mod.RenderError, match="no numeric constant ARTIFACTS"):
        render_mod.asserted_bound("tests/runner/test_dashboard_browser.py", "ARTIFACTS")  # a Path, used elsewhere
    with pytest.raises(render_mod.RenderError, match="no test of .* asserts KILL_GRACE"):
        render_mod.asserted_bound("tests/runner/test_dashboard_browser.py", "KILL_GRACE")  # a spec value
    with pytest.raises(render_mod.RenderError, match="no test file"):
        render_mod.asserted_bound("docgen/render_stop_latency.py", "HERE")


@pytest.mark.timeout(BENCH_RUN_LIMIT + 60)
def test_renders_the_goals_section_the_bench_itself_wrote(render_mod, tmp_path):
    """Path: the benchmark's real writer of the SIGTERM-to-the-engine stopper
    (contenders.RunnerEngineSigterm) and of the plugin part (bench/plugin_idle.py),
    reduced (n=1, 2 sessions a side), feeds the goals section: the engine's SIGTERM stops
    the cooperative tree with no orphan and sits beside `runner stop` in the column
    table; each goal row says met or not met against a measured figure; the unused
    plugin's sessions all passed (exit 0) on both sides."""
    out = tmp_path / "bench.json"
    args = ["--parts", "stoppers,plugin", "--stoppers", "runner-engine-sigterm,runner-stop"]
    args += ["--victims", "cooperative", "--n", "1", "--plugin-rounds", "2", "--kill-grace", "0.2"]
    proc = subprocess.run(
        [sys.executable, "-m", "bench.stoppers", *args, "--json", str(out), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=BENCH_RUN_LIMIT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = render_mod.render_files(TEMPLATE, None, None, None, out)
    goals = _section(doc, "The stop at the kernel's speed, and costs against their goals")
    row = next(line for line in goals.splitlines() if line.startswith("| cooperative |"))
    assert row.count("1/1 stopped, median ") == 2 and "orphan" not in row
    goal = next(line for line in goals.splitlines() if line.startswith("| SIGTERM to the engine, cooperative"))
    assert "within 5.0 ms" in goal and ("· met" in goal or "· **not met**" in goal)
    assert "| plugin installed, unused |" in goals and "| `-p no:stoplatency` |" in goals
    data = json.loads(out.read_text())
    assert data["plugin"]["installed"]["codes"] == [0] and data["plugin"]["disabled"]["codes"] == [0]
    assert data["goals"]["engine_sigterm_cooperative_s"] == 0.005


@pytest.mark.timeout(120)
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (the soak's runs are in cgroups)")
def test_renders_the_seam_rows_the_soak_itself_wrote(render_mod, tmp_path):
    """Path: the soak's real writer of the faults at the seams (reliability/soak_seams.py's
    tally, one trial of a `cp -al` backup of a live run, then `runner stop`) feeds the
    Reliability section beside the committed soak's other figures: one row per fault
    with its trials, the processes and cgroups left, every exit code and how many
    docs/exit-codes.md does not list for the command, and the fault's own figure; a
    fault the soak skipped is a row that says why, never figures."""
    from reliability import soak, soak_seams

    tally = soak_seams._Tally()
    work = tmp_path / "seams"
    work.mkdir()
    try:
        soak_seams.hard_link_backup(work, tally, True, 0)
    finally:
        soak.cleanup(work)
    assert not tally.problems, tally.problems
    doc = json.loads((ROOT / "docs" / "soak.json").read_text())
    doc["seam_faults"] = {"faults": tally.faults, "skipped": {"lazy unmount": "no root here"}, "problems": []}
    path = tmp_path / "soak.json"
    path.write_text(json.dumps(doc))
    text = render_mod.render_files(TEMPLATE, None, None, path)
    row = next(line for line in text.splitlines() if line.startswith("| `cp -al` backup of a live run, then `stop` |"))
    assert row == "| `cp -al` backup of a live run, then `stop` | 1 | 0 | 0 | [0] (0) | backups changed 0 |", row
    assert "| lazy unmount | skipped: no root here | | | | |" in text


@pytest.mark.timeout(120)
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (the soak's runs are in cgroups)")
def test_renders_the_seam_part_merged_into_the_committed_soak(render_mod, tmp_path):
    """Path: the soak's `--parts seams --merge` (soak.merged): the seam part, measured
    alone by its real writer (one trial of `rm -rf` during `runner stop --now`,
    soak_seams.rm_during_stop, whose rm runs once), merged into the committed soak: the
    other parts keep their figures and the soak's stamp, the seam part carries its own,
    and the Reliability section says when and on which commit the seam rows were
    measured, with the rm's own figure (how often the one `rm -rf` failed)."""
    import random

    from reliability import soak, soak_seams

    tally = soak_seams._Tally()
    work = tmp_path / "seams"
    work.mkdir()
    try:
        soak_seams.rm_during_stop(work, tally, "now", 0, random.Random(0))
    finally:
        soak.cleanup(work)
    assert not tally.problems, tally.problems
    kept = json.loads((ROOT / "docs" / "soak.json").read_text())
    now = {
        "seed": 7,
        "machine": "here",
        "cpus": 2,
        "date": "2026-01-02T03:04:05Z",
        "git_commit": "abc1234",
        "seconds": 1.5,
        "seam_faults": {"faults": tally.faults, "problems": []},
    }
    doc = soak.merged(now, kept, ["seams"])
    assert (doc["date"], doc["git_commit"]) == (kept["date"], kept["git_commit"])
    assert doc["crash_and_resume"] == kept["crash_and_resume"] and doc["merged"] == ["seams"]
    assert doc["seam_faults"]["stamp"]["git_commit"] == "abc1234"
    path = tmp_path / "soak.json"
    path.write_text(json.dumps(doc))
    text = render_mod.render_files(TEMPLATE, None, None, path)
    stamp = "measured on its own (`--parts seams --merge`, 2026-01-02T03:04:05Z, 2 CPUs, seed 7, commit `abc1234`)"
    assert stamp in text
    head = "| `rm -rf` of the run directory during `runner stop --now` | 1 | 0 | 0 | "
    row = next(line for line in text.splitlines() if line.startswith(head))
    assert "(0) |" in row and "the one `rm -rf` failed " in row and "not one line 0" in row, row

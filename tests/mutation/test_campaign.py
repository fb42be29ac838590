"""The ablation runner against a fake tree: every verdict, and the provenance proof."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from mutation import BaselineFailed, inner, load, run
from mutation import campaign as campaign_mod
from mutation.report import render_table
from mutation.verdict import INVALID, KILLED, STALE, SURVIVED, TIMEOUT

ADD_TO_SUB = """
[[mutation]]
id = "add-sub"
path = "addition"
why = "add must add"
file = "calc.py"
marker = "add"
replace = "return a - b"
killers = ["tests/test_calc.py::test_add"]
survivors = ["tests/test_calc.py::test_unrelated"]
"""


@pytest.fixture
def campaign(write_config, tmp_path):
    def go(tree, body, **kw):
        cfg = write_config(tree, body, **kw)
        return run(load(cfg), tree, jobs=2, artifacts=tmp_path / "artifacts")

    return go


def one(outcome):
    assert len(outcome.results) == 1
    return outcome.results[0].verdict


def test_killed_mutation_and_working_tree_untouched(fake_tree, campaign, tmp_path):
    """Path: the marked line replaced in a scratch copy, killer fails -> killed; the working tree keeps its text.
    Ablation: applying the edit in the working tree, or not at all, turns it red."""
    tree = fake_tree()
    before = (tree / "calc.py").read_text()
    out = campaign(tree, ADD_TO_SUB)
    v = one(out)
    assert v.verdict == KILLED, v
    assert v.killed_by == ["tests/test_calc.py::test_add"]
    assert v.survivors_red == []
    assert out.ok
    assert (tree / "calc.py").read_text() == before
    # The probe saw the mutated module imported from the scratch copy only.
    imports = [json.loads(l) for l in (tmp_path / "artifacts" / "add-sub" / "imports.jsonl").read_text().splitlines()]
    assert imports and all("/mutate-add-sub-" in r["file"] for r in imports)


def test_a_kill_by_the_first_killer_skips_the_others_unless_survivors_are_named(fake_tree, campaign, tmp_path):
    """Path: a mutation naming no survivors stops at its first kill (`--maxfail=1`, the
    campaign's heaviest cost is killers waiting out their bounds); one naming survivors runs
    them all, so a survivor gone red is still seen. Ablation: dropping `--maxfail` runs the
    second killer (two kills); applying it with survivors leaves the survivor unrun."""
    tree = fake_tree()
    both = 'killers = ["tests/test_calc.py::test_add", "tests/test_calc.py::test_add_in_subprocess"]'
    body = ADD_TO_SUB.replace('killers = ["tests/test_calc.py::test_add"]', both)
    alone = one(campaign(tree, body.replace('survivors = ["tests/test_calc.py::test_unrelated"]', "")))
    assert alone.verdict == KILLED and alone.killed_by == ["tests/test_calc.py::test_add"], alone
    probe = json.loads((tmp_path / "artifacts" / "add-sub" / "pytest.json").read_text())
    assert "tests/test_calc.py::test_add_in_subprocess" not in probe["outcomes"]
    with_survivor = one(campaign(tree, body))
    assert with_survivor.verdict == KILLED
    assert with_survivor.killed_by == ["tests/test_calc.py::test_add", "tests/test_calc.py::test_add_in_subprocess"]
    probe = json.loads((tmp_path / "artifacts" / "add-sub" / "pytest.json").read_text())
    assert probe["outcomes"]["tests/test_calc.py::test_unrelated"] == "passed"


def test_survivor_and_killer_in_a_subprocess(fake_tree, campaign, tmp_path):
    """Path: the mutated module imported in a child process is recorded there too and a
    killer that only fails through the child kills the mutation."""
    tree = fake_tree()
    body = ADD_TO_SUB.replace(
        'killers = ["tests/test_calc.py::test_add"]', 'killers = ["tests/test_calc.py::test_add_in_subprocess"]'
    )
    out = campaign(tree, body)
    assert one(out).verdict == KILLED
    pids = {
        json.loads(l)["pid"] for l in (tmp_path / "artifacts" / "add-sub" / "imports.jsonl").read_text().splitlines()
    }
    assert len(pids) >= 2  # the pytest process and its child


def test_survived(fake_tree, campaign, tmp_path):
    """Path: a mutation no killer notices -> survived, and the campaign is not ok."""
    tree = fake_tree()
    body = """
    [[mutation]]
    id = "double-triple"
    path = "doubling"
    why = "only a weak test runs it"
    file = "calc.py"
    marker = "double"
    replace = "return x * 3"
    killers = ["tests/test_calc.py::test_double_runs"]
    """
    out = campaign(tree, body)
    assert one(out).verdict == SURVIVED
    assert not out.ok
    # A CI log is read from its tail: the count line itself names what is not ok.
    count = [l for l in render_table(out).splitlines() if " mutations: " in l]
    assert count and count[0].endswith("; double-triple: survived"), count


@pytest.mark.parametrize("marker", ["mul", "twice"], ids=["no-marker", "two-markers"])
def test_stale(fake_tree, campaign, tmp_path, marker):
    """Path: an `# ablate:` marker found 0 or 2 times -> stale, nothing run (reformatting
    the code can never make a mutation apply elsewhere, or nowhere, silently)."""
    tree = fake_tree()
    with open(tree / "calc.py", "a") as f:  # uncommitted: the scratch copy takes the working tree
        f.write("\n\ndef twice():  # ablate: twice\n    pass  # ablate: twice\n")
    body = ADD_TO_SUB.replace('marker = "add"', f'marker = "{marker}"')
    out = campaign(tree, body)
    v = one(out)
    assert v.verdict == STALE and "found" in v.detail and marker in v.detail
    assert not out.ok


def test_killer_not_collected_is_invalid_not_killed(fake_tree, campaign, tmp_path):
    """Path: a killer that exists on the baseline but is gone in the mutated copy (the
    mutation breaks its collection) is invalid, never a kill."""
    tree = fake_tree("\n\nif calc.add(0, 0) == 0:\n    def test_zero():\n        assert calc.add(0, 0) == 0\n")
    body = ADD_TO_SUB.replace('replace = "return a - b"', 'replace = "return a + b + 1"').replace(
        'killers = ["tests/test_calc.py::test_add"]',
        'killers = ["tests/test_calc.py::test_zero", "tests/test_calc.py::test_add"]',
    )
    out = campaign(tree, body)
    v = one(out)
    assert v.verdict == INVALID and "not collected" in v.detail and "tests/test_calc.py::test_zero" in v.detail, v


def test_collection_error_is_invalid(fake_tree, campaign, tmp_path):
    """Path: a mutation that compiles but breaks import (a module-level import of nothing)
    -> invalid (an import error is not a kill)."""
    tree = fake_tree()
    body = ADD_TO_SUB.replace('replace = "return a - b"', 'replace = "return a + b\\nimport no_such_module_anywhere"')
    v = one(campaign(tree, body))
    assert v.verdict == INVALID and "collection error" in v.detail, v


def test_mutation_that_does_not_compile_is_invalid(fake_tree, campaign, tmp_path):
    """Path: the replace text leaves a syntax error -> invalid ("does not compile"), without running
    the killers (any test of it would fail, which proves nothing).
    Ablation: drop the compile() check in scratch.apply and this reads "killed" (the killer
    imports the module in its body, as the runner's tests do through a subprocess, so the
    SyntaxError is a call-phase failure)."""
    tree = fake_tree("\n\ndef test_add_late_import():\n    import calc as c\n    assert c.add(2, 3) == 5\n")
    # Only the killer's body imports the module: take the module-level import out (the scratch
    # copy is made from the working tree as it is, uncommitted edits included).
    test_file = tree / "tests" / "test_calc.py"
    test_file.write_text(test_file.read_text().replace("import calc\n", "", 1))
    body = (
        ADD_TO_SUB.replace('replace = "return a - b"', 'replace = "return a +"')
        .replace('::test_add"]', '::test_add_late_import"]')
        .replace('survivors = ["tests/test_calc.py::test_unrelated"]', "")
    )
    out = campaign(tree, body)
    v = one(out)
    assert v.verdict == INVALID and "does not compile" in v.detail and "calc.py" in v.detail, v
    assert not (tmp_path / "artifacts" / "add-sub.log").exists()  # no inner run was wasted on it
    assert not out.ok


FIXTURE_TESTS = """

import pytest


@pytest.fixture
def add_checked_in_setup():
    assert calc.add(1, 1) == 2


@pytest.fixture
def add_checked_in_teardown():
    yield
    assert calc.add(1, 1) == 2


def test_setup_fixture(add_checked_in_setup):
    pass


def test_teardown_fixture(add_checked_in_teardown):
    pass
"""


@pytest.mark.parametrize("phase", ["setup", "teardown"])
def test_killer_failing_outside_its_body_is_invalid(fake_tree, campaign, tmp_path, phase):
    """Path: the killer's failure is in a fixture's setup or teardown, not in the test body ->
    invalid, naming the phase (a broken fixture does not show the test noticed the mutation).
    Ablation: count any failure ("failed:*") as a kill and this reads "killed"."""
    tree = fake_tree(FIXTURE_TESTS)
    body = ADD_TO_SUB.replace('::test_add"]', f'::test_{phase}_fixture"]')
    v = one(campaign(tree, body))
    assert v.verdict == INVALID, v
    assert f"tests/test_calc.py::test_{phase}_fixture ({phase})" in v.detail and "not a kill" in v.detail, v


def test_pytest_timeout_in_the_killer_is_timeout_not_killed(fake_tree, campaign, tmp_path):
    """Path: the tree's own pytest-timeout (2 s here, 90 s in the project) ends a hanging killer
    well before the campaign's limit; the probe records that the failure was pytest-timeout's
    -> verdict timeout, not killed.
    Ablation: drop the probe's timeout record (or the verdict's use of it) and this reads "killed"."""
    tree = fake_tree(ini='timeout = 2\ntimeout_method = "signal"\n')
    body = ADD_TO_SUB.replace('replace = "return a - b"', "replace = \"__import__('time').sleep(3600)\"")
    out = campaign(tree, body, timeout=60)
    v = one(out)
    assert v.verdict == TIMEOUT and "pytest-timeout" in v.detail, v
    assert "tests/test_calc.py::test_add" in v.detail
    assert out.results[0].duration < 30  # pytest-timeout's 2 s ended it, not the campaign's 60 s
    assert not out.ok


def test_timeout(fake_tree, campaign, tmp_path):
    """Path: a mutation that hangs the killer -> its own verdict, timeout, within the limit
    (the mutation's own `timeout`, then inner.INTERRUPT_GRACE for the SIGINTed pytest and
    inner.LEFTOVER_GRACE for what it left), not the hour. Only the mutation's run has
    the short limit: the baseline keeps the campaign's, which a loaded machine's pytest
    start-up alone can outlast."""
    tree = fake_tree()
    limit = 3
    body = ADD_TO_SUB.replace(
        'replace = "return a - b"', f"replace = \"__import__('time').sleep(3600)\"\ntimeout = {limit}"
    )
    out = campaign(tree, body)
    v = one(out)
    assert v.verdict == TIMEOUT, v
    assert out.results[0].duration < limit + inner.INTERRUPT_GRACE + inner.LEFTOVER_GRACE


def test_not_the_scratch_copy_is_invalid(fake_tree, campaign, tmp_path):
    """Path: a test that imports the module from the working tree (as an editable install
    would) -> invalid, even though the killer 'passes or fails'.
    Ablation: dropping the provenance check turns this into a false 'survived'."""
    tree = fake_tree()
    (tree / "tests" / "conftest.py").write_text(f"import sys\nsys.path.insert(0, {str(tree)!r})\n")
    subprocess.run(["git", "add", "."], cwd=tree, check=True)
    v = one(campaign(tree, ADD_TO_SUB))
    assert v.verdict == INVALID and "not the scratch copy" in v.detail and str(tree) in v.detail, v


def test_not_the_scratch_copy_in_a_subprocess(fake_tree, campaign, tmp_path):
    """Path: only a child process imports the working tree's module -> invalid."""
    extra = f"""

    def test_child_from_working_tree():
        env = dict(os.environ, PYTHONPATH={str(tmp_path / "tree")!r} + os.pathsep + os.environ["PYTHONPATH"])
        subprocess.run([sys.executable, "-c", "import calc"], env=env, cwd="/", check=True)
    """
    tree = fake_tree(extra)
    body = ADD_TO_SUB.replace(
        'survivors = ["tests/test_calc.py::test_unrelated"]',
        'survivors = ["tests/test_calc.py::test_child_from_working_tree"]',
    )
    v = one(campaign(tree, body))
    assert v.verdict == INVALID and "not the scratch copy" in v.detail, v


def test_survivor_gone_red_fails_the_campaign(fake_tree, campaign, tmp_path):
    """Path: a killed mutation whose documented survivor fails -> not ok."""
    tree = fake_tree()
    body = ADD_TO_SUB.replace(
        'survivors = ["tests/test_calc.py::test_unrelated"]',
        'survivors = ["tests/test_calc.py::test_add_in_subprocess"]',
    )
    out = campaign(tree, body)
    v = one(out)
    assert v.verdict == KILLED and v.survivors_red == ["tests/test_calc.py::test_add_in_subprocess"]
    assert not out.ok


def test_baseline_must_be_green(fake_tree, campaign, tmp_path):
    """Path: a killer that fails on the unmutated tree stops the campaign before any mutation."""
    tree = fake_tree("\n\ndef test_broken():\n    assert calc.add(1, 1) == 3\n")
    body = ADD_TO_SUB.replace(
        'killers = ["tests/test_calc.py::test_add"]', 'killers = ["tests/test_calc.py::test_broken"]'
    )
    with pytest.raises(BaselineFailed, match="not green: tests/test_calc.py::test_broken"):
        campaign(tree, body)


def test_a_baseline_shard_gets_the_limits_of_the_mutations_it_runs_at_once(
    fake_tree, write_config, tmp_path, monkeypatch
):
    """Path: campaign.baseline_limit, as the baseline's inner runs get it. Four mutations,
    one killer each, each mutation's run within the campaign's limit; the baseline (one
    job: one shard) runs the four killers at once and gets four limits, not one (with one,
    a green baseline of 58 tests timed out beside two CPU hogs). Recorded, not timed:
    the limit each inner run is given."""
    tree = fake_tree()
    body = "".join(
        ADD_TO_SUB.replace('id = "add-sub"', f'id = "add-sub-{n}"')
        .replace('killers = ["tests/test_calc.py::test_add"]', f'killers = ["{killer}"]')
        .replace('survivors = ["tests/test_calc.py::test_unrelated"]\n', "")
        for n, killer in enumerate(
            [
                "tests/test_calc.py::test_add",
                "tests/test_calc.py::test_add_in_subprocess",
                "tests/test_calc.py::test_unrelated",
                "tests/test_calc.py::test_double_runs",
            ]
        )
    )
    limits = []
    real = campaign_mod.inner.run

    def recorded(scratch, node_ids, pytest_args, probe_dir, log_path, timeout, target):
        limits.append((target is None, len(node_ids), timeout))
        return real(scratch, node_ids, pytest_args, probe_dir, log_path, timeout, target)

    monkeypatch.setattr(campaign_mod.inner, "run", recorded)
    run(load(write_config(tree, body, timeout=60)), tree, jobs=1, artifacts=tmp_path / "artifacts")
    assert limits[0] == (True, 4, 4 * 60), limits  # the baseline: four mutations' worth
    assert {limit for baseline, _, limit in limits[1:] if not baseline} == {60}, limits


def _recorded_limits(monkeypatch) -> list:
    """(is the baseline, time limit) of each inner run, in order, the runs going ahead."""
    limits = []
    real = campaign_mod.inner.run

    def recorded(scratch, node_ids, pytest_args, probe_dir, log_path, timeout, target):
        limits.append((target is None, timeout))
        return real(scratch, node_ids, pytest_args, probe_dir, log_path, timeout, target)

    monkeypatch.setattr(campaign_mod.inner, "run", recorded)
    return limits


def test_a_mutation_given_more_time_gives_it_to_its_baseline_too(fake_tree, write_config, tmp_path, monkeypatch):
    """Path: campaign.baseline_limit takes the largest limit a mutation has: one mutation
    whose killer needs more than the campaign's limit (`timeout = 90`, beside 60) gets 90
    s in the baseline too, not the campaign's 60 (dashboard-compact's 300 real runs
    timed out there). Recorded, not timed: the limit each inner run is given."""
    tree = fake_tree()
    body = ADD_TO_SUB.replace('survivors = ["tests/test_calc.py::test_unrelated"]\n', "timeout = 90\n")
    limits = _recorded_limits(monkeypatch)
    run(load(write_config(tree, body, timeout=60)), tree, jobs=1, artifacts=tmp_path / "artifacts")
    assert limits == [(True, 90), (False, 90)], limits


def _suite_run(tree, probe_dir, *args):
    """The fake tree's own suite, as `make test` runs the project's: with the probe loaded."""
    env = {**os.environ, "MUTATION_PROBE_DIR": str(probe_dir)}
    argv = [sys.executable, "-m", "pytest", "-p", "mutation._pytest_probe", "-p", "no:cacheprovider"]
    argv += ["-p", "no:stoplatency", "-q", *args]
    subprocess.run(argv, cwd=tree, env=env, capture_output=True, timeout=120)
    return probe_dir / "pytest.json"


def test_the_baseline_is_read_from_the_suites_own_run_under_xdist(fake_tree, write_config, tmp_path, monkeypatch):
    """Path: campaign._suite_baseline (`--baseline-from`, CI's campaign): the suite's own run
    of the tree under xdist, its controller's probe report, stands for the baseline; no
    baseline run is started, and the mutation is judged as before. Ablation: the campaign
    running the baseline anyway turns it red."""
    tree = fake_tree()
    report = _suite_run(tree, tmp_path / "suite", "-n", "2", "tests")
    assert set(json.loads(report.read_text())["outcomes"]) >= {
        "tests/test_calc.py::test_add",
        "tests/test_calc.py::test_unrelated",
        "tests/test_calc.py::test_add_in_subprocess",
    }
    runs = []
    real = campaign_mod.inner.run
    monkeypatch.setattr(campaign_mod.inner, "run", lambda *a: runs.append(a[6]) or real(*a))
    out = run(load(write_config(tree, ADD_TO_SUB)), tree, jobs=2, artifacts=tmp_path / "a", baseline_from=[report])
    assert runs == ["calc"]  # the mutation's run only: no baseline run (target None)
    assert one(out).verdict == KILLED and out.ok
    assert out.baseline_from == [str(report)]


@pytest.mark.parametrize("case", ["red", "not-run", "other-tree", "missing"])
def test_a_suite_baseline_that_does_not_show_every_killer_green_here_is_refused(
    fake_tree, write_config, tmp_path, case
):
    """Path: verdict.suite_baseline_problems: a killer red in the suite's run, a killer it did
    not run, a report of another tree (a copy, another checkout) or no report at all is no
    baseline: the campaign stops before any mutation. Ablation: accepting any of them
    judges mutations against code never shown green."""
    tree = fake_tree("\n\ndef test_broken():\n    assert calc.add(1, 1) == 3\n")
    killer = {"red": "test_broken", "not-run": "test_add"}.get(case, "test_add")
    body = ADD_TO_SUB.replace('::test_add"]', f'::{killer}"]')
    if case == "other-tree":
        other = fake_tree(name="other")
        report = _suite_run(other, tmp_path / "suite", "tests")
    elif case == "missing":
        report = tmp_path / "nowhere" / "pytest.json"
    else:
        only = "tests/test_calc.py::test_unrelated" if case == "not-run" else "tests"
        report = _suite_run(tree, tmp_path / "suite", only)
    expected = {
        "red": "not green in the suite: tests/test_calc.py::test_broken",
        "not-run": "not run by the suite: tests/test_calc.py::test_add",
        "other-tree": "a run of .*other, not of",
        "missing": "not a probe report",
    }[case]
    with pytest.raises(BaselineFailed, match=expected):
        run(load(write_config(tree, body)), tree, jobs=2, artifacts=tmp_path / "a", baseline_from=[report])
    assert not (tmp_path / "a" / "add-sub").exists()  # no mutation ran


def test_a_mutation_given_less_time_leaves_its_baseline_the_campaigns(fake_tree, write_config, tmp_path, monkeypatch):
    """Path: campaign.baseline_limit never goes below the campaign's limit: a mutation that
    hangs by design with a 3 s limit of its own (test_timeout) left its baseline 3 s, which
    a busy machine's pytest start-up outlasted (BaselineFailed). Recorded, not timed: the
    limit each inner run is given."""
    tree = fake_tree()
    body = ADD_TO_SUB.replace('survivors = ["tests/test_calc.py::test_unrelated"]\n', "timeout = 3\n")
    limits = _recorded_limits(monkeypatch)
    run(load(write_config(tree, body, timeout=60)), tree, jobs=1, artifacts=tmp_path / "artifacts")
    assert limits == [(True, 60), (False, 3)], limits


def test_removed_killer_fails_the_baseline(fake_tree, campaign, tmp_path):
    """Path: a killer removed from the suite is caught by the baseline (not collected)."""
    tree = fake_tree()
    body = ADD_TO_SUB.replace('::test_add"]', '::test_gone"]')
    with pytest.raises(BaselineFailed, match="not found .*: tests/test_calc.py::test_gone"):
        campaign(tree, body)


def test_cli_writes_json_and_table_and_exits_nonzero_on_survivor(fake_tree, write_config, tmp_path):
    """Path: `python -m mutation`: table on stdout, JSON written, exit 1 when one survived."""
    tree = fake_tree()
    body = ADD_TO_SUB + ADD_TO_SUB.replace('id = "add-sub"', 'id = "double-weak"').replace(
        'marker = "add"', 'marker = "double"'
    ).replace('replace = "return a - b"', 'replace = "return x * 5"').replace('::test_add"]', '::test_double_runs"]')
    cfg = write_config(tree, body)
    out_json = tmp_path / "mutate.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mutation",
            "--config",
            str(cfg),
            "--root",
            str(tree),
            "--json",
            str(out_json),
            "--artifacts",
            str(tmp_path / "art"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    data = json.loads(out_json.read_text())
    assert {m["id"]: m["verdict"] for m in data["mutations"]} == {"add-sub": "killed", "double-weak": "survived"}
    assert data["ok"] is False
    assert "add-sub" in proc.stdout and "survived" in proc.stdout
    assert (tmp_path / "mutate.txt").read_text().strip() == proc.stdout.strip()


HANG = """
[[mutation]]
id = "hang-{n}"
path = "addition"
why = "a mutation that hangs its killer"
file = "calc.py"
marker = "add"
replace = "__import__('pathlib').Path(__import__('os').environ['HANG_DIR'], str(__import__('os').getpid())).touch(); \
__import__('time').sleep(3600)"
killers = ["tests/test_calc.py::test_add_in_subprocess"]
"""


def test_sigterm_ends_inner_runs_and_removes_scratch_copies(fake_tree, write_config, tmp_path):
    """Path: SIGTERM to `python -m mutation` (as CI's `timeout` sends) while a mutation's killer
    hangs in a child process: the handler kills every live inner run's group (own sessions, which
    the signal never reaches), cancels the queued mutations, removes the scratch copies, and exits
    128+SIGTERM at once, not after the queue.
    Ablation: without the handler the inner pytest and its child outlive the campaign and the
    scratch copy stays on disk; without cancel_futures the exit waits for the other two."""
    psutil = pytest.importorskip("psutil")
    tree = fake_tree()
    cfg = write_config(tree, "".join(HANG.format(n=n) for n in (1, 2, 3)), timeout=120)
    scratch_tmp, hang_dir = tmp_path / "tmp", tmp_path / "hang"
    scratch_tmp.mkdir()
    hang_dir.mkdir()
    env = dict(os.environ, TMPDIR=str(scratch_tmp), HANG_DIR=str(hang_dir))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mutation",
            "--config",
            str(cfg),
            "--root",
            str(tree),
            "--jobs",
            "1",
            "--json",
            str(tmp_path / "mutate.json"),
            "--artifacts",
            str(tmp_path / "art"),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: list = []
    try:
        deadline = time.monotonic() + 60
        while not any(hang_dir.iterdir()) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # polls another process's progress, not a latency
        assert any(hang_dir.iterdir()), "the hanging killer never started"
        seen = psutil.Process(proc.pid).children(recursive=True)
        hung = [int(p.name) for p in hang_dir.iterdir()]
        assert set(hung) <= {p.pid for p in seen}
        assert any(d.name.startswith("mutate-hang-1-") for d in scratch_tmp.iterdir())
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        elapsed = time.monotonic() - t0
        assert proc.returncode == 128 + signal.SIGTERM, err
        assert "interrupted by SIGTERM" in err
        assert elapsed < 15, f"the exit took {elapsed:.1f} s"
        _, alive = psutil.wait_procs(seen, timeout=2)
        assert not alive, f"inner processes outlived the campaign: {alive}"
        assert [d.name for d in scratch_tmp.iterdir() if d.name.startswith("mutate-")] == []
        assert not (tmp_path / "art" / "hang-2.log").exists()  # cancelled, never started
        assert not (tmp_path / "mutate.json").exists()
    finally:
        for p in seen:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        if proc.poll() is None:
            proc.kill()
        proc.communicate()

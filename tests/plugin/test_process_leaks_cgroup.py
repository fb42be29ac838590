"""--process-leaks-cgroup: each test, and each wider fixture, runs in a cgroup v2 of its own, the
one route that sees a process which dropped its environment (no tag) AND left pytest's tree.

pytest is no subreaper here (the default), so `env -i setsid -f` leaves the tree for good, as a
process handed to a daemon outside pytest would: only the cgroup can see it. Skipped, with the
reason, where cgroup v2 is not writable.
"""

import json
import subprocess
import time

import pytest
from plugin_helpers import all_marked, kill_identified, sleep_marks, sleepers
from test_process_leaks import CLEAN_SUITE, MARK_NAMES, run_acceptance

from pytest_stoplatency import _cgroup, _leaks, _options
from pytest_stoplatency._guardian import ENV_DISABLE as ENV_NO_GUARDIAN

pytestmark = pytest.mark.skipif(
    not _cgroup.probe(), reason="cgroup v2 is not writable here (or has no cgroup.kill): no cgroup route to test"
)


@pytest.fixture(autouse=True)
def _no_guardian(monkeypatch):
    """No guardian sweeping when an inner pytest exits: the sweep test proves the next
    session's sweep alone."""
    monkeypatch.setenv(ENV_NO_GUARDIAN, "1")


@pytest.fixture
def marks():
    m = sleep_marks("sentinel", "scrubber", "fixture", "child", "dead")
    yield m
    kill_identified(all_marked(m))


SUITE = """
import os, subprocess, time, pytest
from pytest_stoplatency import _cgroup

N = {marks!r}

def record(name):
    # Where pytest (and so what it starts) is while this runs: its cgroup, its pid.
    with open(name + ".cg", "w") as f:
        f.write(f"{{os.getpid()}} {{_cgroup.cgroup_of(os.getpid())}}")

def scrub(name):
    # No tag (env -i), no parent in pytest's tree (setsid -f forks, its parent exits).
    subprocess.run(["env", "-i", "setsid", "-f", "sleep", N[name]], check=True)

@pytest.fixture(scope="session")
def server():
    record("fixture")
    scrub("fixture")
    yield

def test_scrubber():
    record("scrubber")
    scrub("scrubber")

def test_child(server):
    record("child")
    subprocess.Popen(["sleep", N["child"]])

def test_clean():
    record("clean")
    subprocess.run(["true"], check=True)
"""


def _cgroups(pytester) -> dict[str, tuple[int, str]]:
    out = {}
    for f in pytester.path.glob("*.cg"):
        pid, rel = f.read_text().split()
        out[f.stem] = (int(pid), rel)
    return out


def _session_dir(rel: str):
    """The session cgroup of a scope cgroup /…/stoplatency/<pid>.<ticks>/<n>."""
    root = _cgroup.root()
    assert root is not None
    return (root / rel.lstrip("/")).parent


def _run(pytester, marks, *args):
    pytester.makepyfile(test_suite=SUITE.format(marks=marks))
    sentinel = subprocess.Popen(["env", "-i", "sleep", marks["sentinel"]], start_new_session=True)
    try:
        result = pytester.runpytest_subprocess(
            "-p", "no:cacheprovider", *args, "--process-leaks-json", "leaks.json", timeout=120
        )
        alive = sleepers(marks)
    finally:
        sentinel_alive = sentinel.poll() is None
        sentinel.kill()
        sentinel.wait()
    assert sentinel_alive, "a process outside the inner pytest was touched"
    return result, alive, json.loads((pytester.path / "leaks.json").read_text())


@pytest.mark.parametrize("xdist", [("-p", "no:xdist"), ("-n", "2")], ids=["serial", "xdist"])
def test_cgroup_finds_what_dropped_its_environment_and_left_the_tree(pytester, marks, xdist):
    """Path: the per-scope cgroup alone: with pytest no subreaper, `env -i setsid -f sleep` has no
    tag and is outside pytest's tree; only because pytest ran the test (and the session fixture)
    from inside a cgroup of its own is it found there: reported ("no run tag, left the tree
    (found by cgroup)", against the test, or the fixture's scope), killed. A sentinel started
    beforehand (no tag, its own session) survives. Each pytest process that runs tests (each xdist
    worker) has its own session cgroup, and none is left behind.

    Ablations: `leak-cgroup` (the cgroup's members are not read: the leaks go unreported) and
    `leak-cgroup-enter` (pytest never enters the cgroup: nothing is in it) turn this red.
    """
    result, alive, doc = _run(pytester, marks, *xdist, "--process-leaks-cgroup")
    assert "scrubber" not in alive and "fixture" not in alive and "child" not in alive, alive
    got = {(x["scope"], x["route"], x["cmdline"].split()[-1], x["killed"]) for x in doc["leaks"]}
    assert got == {
        ("test_suite.py::test_scrubber", _leaks.ROUTE_LEFT_TREE, marks["scrubber"], True),
        ("fixture 'server' (session scope, test_suite.py)", _leaks.ROUTE_LEFT_TREE, marks["fixture"], True),
        ("test_suite.py::test_child", _leaks.ROUTE_CHILD, marks["child"], True),
    }, doc["leaks"]
    result.stdout.fnmatch_lines(
        [f"*{_options.CGROUP_LINE}*", f"*escaped: {_leaks.ROUTE_LEFT_TREE}: *{marks['scrubber']}*"]
    )
    assert _options.NO_CGROUP_LINE not in result.stdout.str()
    # pytest ran each test inside a cgroup of that test's own, in its own session cgroup.
    cgroups = _cgroups(pytester)
    assert set(cgroups) == {"scrubber", "child", "clean", "fixture"}
    assert len({rel for _, rel in cgroups.values()}) == 4, cgroups
    for pid, rel in cgroups.values():
        assert f"/{_cgroup.SUBDIR}/" in rel
        assert _session_dir(rel).name.split(".")[0] == str(pid), (rel, pid)  # this process's own
        assert not _session_dir(rel).exists(), f"{_session_dir(rel)} left behind"
    outcomes = result.parseoutcomes()
    # The fixture's leak is reported at the teardown of whichever test tore it down.
    assert outcomes["passed"] == 3 and outcomes["errors"] in (2, 3) and "failed" not in outcomes, outcomes


def test_without_the_cgroup_route_that_leak_is_missed_and_the_note_says_so(pytester, marks):
    """Path: the control: the same suite with --process-leaks alone misses the scrubbed processes
    that left the tree (the test's and the session fixture's: they survive, until this test kills
    them), still finds the plain child, and says once, in the header, what it cannot see."""
    result, alive, doc = _run(pytester, marks, "-p", "no:xdist", "--process-leaks")
    assert {"scrubber", "fixture"} <= set(alive) and "child" not in alive, alive
    assert [x["cmdline"] for x in doc["leaks"]] == [f"sleep {marks['child']}"]
    assert result.stdout.str().count(_options.NO_CGROUP_LINE) == 1
    assert all(f"/{_cgroup.SUBDIR}/" not in rel for _, rel in _cgroups(pytester).values())


DIES = """
import os, subprocess, time

def test_dies():
    subprocess.run(["env", "-i", "setsid", "-f", "sleep", "{n}"], check=True)
    with open("cg", "w") as f:
        f.write(open("/proc/self/cgroup").read())
    os._exit(3)  # no teardown: the test's cgroup stays, holding the scrubbed sleep
"""


def test_a_dead_sessions_cgroup_is_killed_and_removed_by_the_next_session(pytester, marks):
    """Path: the sweep of session cgroups: a pytest that dies in a test (os._exit, as
    pytest-timeout's thread method does) leaves its session cgroup, holding a process with no
    tag and no parent in any tree; the next session's start-up sweep (_cleanup.sweep_ownerless)
    kills it by cgroup.kill and removes the dead session's cgroup (or another concurrent
    session's sweep does: not an attribution test between sweepers)."""
    pytester.makepyfile(test_dies=DIES.format(n=marks["dead"]))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "--process-leaks-cgroup")
    assert result.ret == 3
    rel = next(line[3:] for line in (pytester.path / "cg").read_text().splitlines() if line.startswith("0::"))
    session = _session_dir(rel)
    # Not asserted alive here: any concurrent session of this plugin sweeps at its start too,
    # and may get there first. Only a sweep of dead session cgroups can end it either way: it
    # has no tag and no parent in any pytest's tree.
    (pytester.path / "test_dies.py").unlink()
    pytester.makepyfile(test_next="def test_ok():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "--process-leaks-cgroup")
    result.assert_outcomes(passed=1)
    deadline = time.monotonic() + 5
    while "dead" in sleepers(marks) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "dead" not in sleepers(marks)
    assert not session.exists(), f"{session} left behind"


def test_help_text_states_the_cost(pytester):
    """Path: --process-leaks-cgroup and its ini key document themselves with the plugin's
    constants, the cost of the route included."""
    result = pytester.runpytest_subprocess("--help")
    assert "RCU grace period" in _options.HELP_LEAKS_CGROUP
    words = " ".join(result.stdout.str().split())  # argparse wraps the help text
    assert f"--process-leaks-cgroup {_options.HELP_LEAKS_CGROUP}" in words
    assert f"process_leaks_cgroup (bool): {_options.HELP_LEAKS_CGROUP_INI}" in words


def test_kill_refuses_a_cgroup_that_holds_pytest():
    """Path: the identity rule of the cgroup kill: a cgroup.kill never reaches pytest itself."""
    home = _cgroup.own()
    assert home is not None
    session = _cgroup.Session.create()
    assert session is not None
    try:
        scope = session.scope_dir("refuse")
        session.enter(scope)
        try:
            with pytest.raises(RuntimeError, match="holds this pytest process"):
                _cgroup.kill(scope)
        finally:
            session.enter(None)
        assert _cgroup.own() == home
    finally:
        session.close()
    assert not session.path.exists()


HELPER_SUITE = """
import multiprocessing, os

def test_a_starts_the_resource_tracker():
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        assert pool.apply(abs, (-1,)) == 1

def test_b_the_resource_tracker_still_serves():
    from multiprocessing import resource_tracker
    pid = resource_tracker._resource_tracker._pid
    assert pid is not None
    assert os.waitpid(pid, os.WNOHANG) == (0, 0), "pytest's resource tracker was killed"
"""


@pytest.mark.parametrize("xdist", [("-p", "no:xdist"), ("-n", "2", "--dist", "loadfile")], ids=["serial", "xdist"])
def test_pytests_own_helpers_started_in_a_test_are_moved_out_not_killed(pytester, xdist):
    """Path: the eviction before the cgroup kill: multiprocessing's resource tracker, started by
    the first test inside its cgroup, serves pytest (not the test): it is moved out of the cgroup
    before the cgroup.kill, so it is neither reported nor killed, and still serves the next test."""
    pytester.makepyfile(test_helpers=HELPER_SUITE)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", *xdist, "--process-leaks-cgroup", "--process-leaks-json", "leaks.json", timeout=120
    )
    doc = json.loads((pytester.path / "leaks.json").read_text())
    assert doc["leaks"] == [] and doc["checked"] == 2, doc
    result.assert_outcomes(passed=2)


@pytest.fixture
def acceptance_marks():
    m = sleep_marks(*MARK_NAMES)
    yield m
    kill_identified(all_marked(m))


def test_acceptance_suite_finds_the_same_under_the_cgroup_route(pytester, acceptance_marks):
    """Path: no false positive and nothing touched under --process-leaks-cgroup: the acceptance
    suite of test_process_leaks.py (-n 2) reports every leak with its route and scope (the scan
    finds them first; the cgroup adds what it alone sees: the env scrubbers that left the tree),
    kills them, and leaves the sentinels and the disabled test's process alive."""
    run_acceptance(pytester, acceptance_marks, "--process-leaks-cgroup")


def test_clean_suite_reports_no_leak_under_the_cgroup_route(pytester):
    """Path: no false positive from the cgroup: a clean suite (waited subprocesses, a session
    server stopped at its teardown, a victim, asyncio and multiprocessing children, a double fork
    that exits) under -n 2 reports no leak."""
    pytester.makepyfile(CLEAN_SUITE)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-n", "2", "--process-leaks-cgroup", "--process-leaks-json", "leaks.json", timeout=120
    )
    doc = json.loads((pytester.path / "leaks.json").read_text())
    assert doc["leaks"] == [] and doc["checked"] == 11, doc
    result.assert_outcomes(passed=10, skipped=2, xfailed=1)


NOT_WRITABLE = """
from pathlib import Path
import pytest_stoplatency._cgroup as cgroup

cgroup.own = lambda: Path("/proc/self/no-cgroup-here")  # where no cgroup can ever be made
"""


def test_where_no_cgroup_can_be_made_it_says_so_once_and_checks_as_before(pytester, marks):
    """Path: the fallback: --process-leaks-cgroup where pytest cannot make a cgroup says so once,
    in the header (the note of --process-leaks, and why), and still finds what the other routes
    see."""
    pytester.makeconftest(NOT_WRITABLE)
    pytester.makepyfile(f"import subprocess\ndef test_child():\n    subprocess.Popen(['sleep', '{marks['child']}'])\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "--process-leaks-cgroup")
    assert "child" not in sleepers(marks)
    assert result.stdout.str().count(f"{_options.NO_CGROUP_LINE} {_options.CGROUP_UNAVAILABLE}") == 1
    result.stdout.fnmatch_lines([f"*escaped: {_leaks.ROUTE_CHILD}: sleep {marks['child']}*"])
    result.assert_outcomes(passed=1, errors=1)

"""--process-leaks never changes a suite's outcome (issue 28): a leak is reported at the teardown
of the test that leaked it, once, and killed when the session ends; a process already on its way
out gets a grace; the check's own time is not the test's.

Each inner suite's processes carry a number unique to the run (plugin_helpers.sleep_marks), so
that the outer test finds whatever survived by its command line and kills it itself: a red run
leaks nothing.
"""

import json
import time

import pytest
from plugin_helpers import all_marked, kill_identified, sleep_marks, sleepers

from pytest_stoplatency import _options
from pytest_stoplatency._guardian import ENV_DISABLE as ENV_NO_GUARDIAN

MARK_NAMES = ("gateway", "spawned", "leak", "exiting", "excluded", "timed", "kept", "scrubbed")


@pytest.fixture
def marks():
    m = sleep_marks(*MARK_NAMES)
    yield m
    kill_identified(all_marked(m))


@pytest.fixture(autouse=True)
def _no_guardian_unless_needed(request, monkeypatch):
    """A guardian would kill what a session left as soon as its pytest exits: the tests that
    prove the session's own end kill run without one, so that only that kill can have done it."""
    if "guardian" not in request.node.name:
        monkeypatch.setenv(ENV_NO_GUARDIAN, "1")


def _run(pytester, *args, timeout=120):
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=timeout)


def _json(pytester, name="leaks.json"):
    return json.loads((pytester.path / name).read_text())


# -- execnet's pattern: a function fixture's process, cached in a session-scoped object ----------

GATEWAY_CONFTEST = """
import subprocess, sys, pytest

N = {marks!r}

# As execnet's popen gateway: a python process that serves requests on its stdin until it is told
# to exit. Its argv carries the run's mark, so that the outer test can find it.
SERVE = (
    "import subprocess, sys\\n"
    "for line in sys.stdin:\\n"
    "    if line.startswith('spawn '):\\n"
    "        subprocess.Popen(['env', '-i', 'sleep', line.split()[1]])\\n"
    "    sys.stdout.write(line)\\n"
    "    sys.stdout.flush()\\n"
)

class Group:
    # As execnet's Group: the gateways, cached for the session; this one never terminates them.
    def __init__(self):
        self.gateways = {{}}

@pytest.fixture(scope="session")
def group():
    return Group()

@pytest.fixture
def gw(group):
    # As execnet's `gw` fixture: function-scoped, makes the gateway at its first use only.
    if "popen" not in group.gateways:
        group.gateways["popen"] = subprocess.Popen(
            [sys.executable, "-c", SERVE, N["gateway"]], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
    return group.gateways["popen"]

def ask(gw, line):
    gw.stdin.write(line + "\\n")
    gw.stdin.flush()
    return gw.stdout.readline().strip()
"""

GATEWAY_SUITE = """
import pytest
from conftest import N, ask

@pytest.mark.parametrize("i", range(4))
def test_uses_the_gateway(gw, i):
    assert ask(gw, f"ping {{i}}") == f"ping {{i}}"

def test_z_the_gateway_starts_a_process_without_a_tag(gw):
    # What a kept process starts is its, not this test's: not reported, killed with it.
    assert ask(gw, f"spawn {{N['spawned']}}") == f"spawn {{N['spawned']}}"
    for _ in range(500):  # the gateway's child execs at its own pace
        if any(open(f"/proc/{{p}}/cmdline", "rb").read() == f"sleep\\0{{N['spawned']}}\\0".encode()
               for p in __import__("os").listdir("/proc") if p.isdigit() and _readable(p)):
            return
        __import__("time").sleep(0.01)
    raise AssertionError("the gateway's child never started")

def _readable(pid):
    try:
        open(f"/proc/{{pid}}/cmdline", "rb").close()
        return True
    except OSError:
        return False
"""


@pytest.mark.parametrize("xdist", [("-p", "no:xdist"), ("-n", "2")], ids=["serial", "xdist"])
def test_a_cached_gateway_is_reported_once_every_later_test_passes_and_it_dies_with_the_session(pytester, marks, xdist):
    """Path: report now, kill at the end (the default): execnet's pattern, a function fixture whose
    process is cached in a session-scoped object and reused by later tests. The first test to use
    it reports it at its teardown (an error, naming the fixture whose set-up started it), and the
    process is kept: every later test talks to it and passes; what it starts during a later test
    (without the run tag) is its own, blamed on no test. The suite never stops it; the session's
    end kills it and what it started (no guardian runs: only that kill can have done it), and the
    summary says so. Reported once: with xdist, once per worker that made one.

    Ablations: `leak-kill-at-end` (the kept gateway outlives pytest), `leak-reported-once` (it is
    reported again at the session's end, as started after its test's check), both red [serial]."""
    pytester.makeconftest(GATEWAY_CONFTEST.format(marks=marks))
    pytester.makepyfile(test_gateway=GATEWAY_SUITE.format())
    result = _run(pytester, *xdist, "--process-leaks", "--process-leaks-json", "leaks.json")
    alive = sleepers(marks) | {k: v for k, v in _gateways(marks).items()}
    doc = _json(pytester)
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == 5 and "failed" not in outcomes, result.stdout.str()
    leaks = doc["leaks"]
    workers = {x["worker"] for x in leaks}
    assert len(leaks) == len(workers) == outcomes.get("errors"), leaks  # once per gateway made
    for leak in leaks:
        assert marks["gateway"] in leak["cmdline"] and leak["kind"] == "test", leak
        assert leak["started_by"] == "set-up of fixture 'gw' (function scope, conftest.py)", leak
        assert (leak["kept"], leak["alive_at_end"], leak["killed"]) == (True, True, True), leak
    assert not alive, f"outlived the session: {alive}"
    result.stdout.fnmatch_lines(
        [
            f"*left 1 process(es) alive after its teardown; {_options.KEPT_NOTE}:",
            f"*escaped: still a child: *{marks['gateway']}*(started in the set-up of fixture 'gw'*",
            f"stoplatency: reported process(es) still alive at the session's end, killed then: {len(leaks)} of the "
            f"{len(leaks)} kept alive after their report*",
        ]
    )


def _gateways(marks) -> dict[str, tuple[int, int]]:
    return {f"gateway{i}": key for i, key in enumerate(all_marked({"gateway": marks["gateway"]}))}


def test_with_kill_at_teardown_a_leak_is_killed_at_once(pytester, marks):
    """Path: --process-leaks-kill=teardown keeps the immediate kill: the cached gateway is killed at
    the teardown that reports it, and the next test that uses it finds it dead (as execnet's suite
    did before issue 28); the report says killed."""
    pytester.makeconftest(GATEWAY_CONFTEST.format(marks=marks))
    pytester.makepyfile(
        test_gateway="""
def test_a(gw):
    assert gw.poll() is None

def test_b_finds_it_killed(gw):
    assert gw.wait(timeout=30) == -9
"""
    )
    result = _run(pytester, "-p", "no:xdist", "--process-leaks", "--process-leaks-kill", "teardown")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*test_gateway.py::test_a left 1 process(es) alive after its teardown; killed:"])
    assert not _gateways(marks)


# -- the grace ----------------------------------------------------------------------------------

GRACE_SUITE = """
import subprocess

N = {marks!r}

def test_tells_its_child_to_exit():
    # The child ends 50 ms after it is told to (its stdin closed as the test returns).
    p = subprocess.Popen(["sh", "-c", f"read x; sleep 0.05; : {{N['exiting']}}"], stdin=subprocess.PIPE)
    p.stdin.close()

def test_forgets_its_child():
    subprocess.Popen(["sleep", N["leak"]])
"""


def test_a_process_told_to_exit_that_ends_50ms_after_its_test_returns_is_not_reported(pytester, marks):
    """Path: the grace (process_leaks_grace, by default _options.GRACE): a child told to exit as its
    test returns, which ends 50 ms later, is waited for and is no leak; a child nobody told is
    reported (the control: the check looks). The default grace, no option.

    Ablation: `leak-grace` (no wait) turns this red: the exiting child is reported."""
    pytester.makepyfile(test_grace=GRACE_SUITE.format(marks=marks))
    result = _run(pytester, "-p", "no:xdist", "--process-leaks", "--process-leaks-json", "leaks.json")
    got = [(x["scope"], x["cmdline"]) for x in _json(pytester)["leaks"]]
    assert got == [("test_grace.py::test_forgets_its_child", f"sleep {marks['leak']}")], got
    result.assert_outcomes(passed=2, errors=1)
    assert not sleepers(marks)


# -- warn, exclude --------------------------------------------------------------------------------

WARN_SUITE = """
import subprocess

def test_forgets_its_child():
    subprocess.Popen(["sleep", "{leak}"])

def test_after():
    pass
"""


@pytest.mark.parametrize("how", ["option", "ini"])
def test_warn_mode_reports_a_warning_and_changes_no_outcome(pytester, marks, how):
    """Path: --process-leaks=warn (ini `process_leaks = warn`): the leak is a ProcessLeakWarning in
    pytest's warnings summary, the session's outcome and exit status are as without the check, and
    the process is killed at the session's end. `-W error::pytest_stoplatency.ProcessLeakWarning`
    makes it an error again (pytest's own way of making a warning loud)."""
    pytester.makepyfile(test_warn=WARN_SUITE.format(leak=marks["leak"]))
    args = ["--process-leaks=warn"] if how == "option" else ["-o", "process_leaks=warn"]
    result = _run(pytester, "-p", "no:xdist", *args)
    result.assert_outcomes(passed=2, warnings=1)
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        ["*ProcessLeakWarning: stoplatency: process leaks: test_warn.py::test_forgets_its_child left 1 process*"]
    )
    assert not sleepers(marks)
    loud = _run(pytester, "-p", "no:xdist", *args, "-W", "error::pytest_stoplatency.ProcessLeakWarning")
    loud.assert_outcomes(passed=2, errors=1)
    assert not sleepers(marks)


def test_exclude_keeps_a_command_line_from_the_report_and_still_kills_it_at_the_end(pytester, marks):
    """Path: process_leaks_exclude, a regular expression searched in a leftover's command line: the
    matching process is not reported (nor is its test an error), the summary lists it, and the
    session's end kills it; one that does not match is reported. A pattern that does not compile
    is a usage error."""
    pytester.makeini(f"[pytest]\nprocess_leaks_exclude = ^sleep {marks['excluded']}$\n")
    pytester.makepyfile(
        test_exclude=f"""
import subprocess

def test_expected():
    subprocess.Popen(["sleep", "{marks["excluded"]}"])

def test_forgets():
    subprocess.Popen(["sleep", "{marks["leak"]}"])
"""
    )
    result = _run(pytester, "-p", "no:xdist", "--process-leaks", "--process-leaks-json", "leaks.json")
    doc = _json(pytester)
    assert [x["cmdline"] for x in doc["leaks"]] == [f"sleep {marks['leak']}"]
    assert [(x["cmdline"], x["killed"], x["alive_at_end"]) for x in doc["excluded"]] == [
        (f"sleep {marks['excluded']}", True, True)
    ]
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["stoplatency: 1 leftover process(es) matched process_leaks_exclude*"])
    assert not sleepers(marks)
    pytester.makeini("[pytest]\nprocess_leaks_exclude = (\n")
    bad = _run(pytester, "-p", "no:xdist", "--process-leaks")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*process_leaks_exclude = '(' (ini file): no regular expression*"])


# -- the check's time is not the test's -----------------------------------------------------------

TIMED_SUITE = """
import subprocess

def test_quick():
    # Exits on its own 6 s from now: the check's grace (30 s here) waits for it, past the
    # test's 3 s timeout.
    subprocess.Popen(["sh", "-c", "sleep 6; : {timed}"])
"""


def test_the_checks_time_does_not_count_against_pytest_timeout(pytester, marks):
    """Path: the check stops pytest-timeout's timer of the test (stop_timeout) before it begins: a
    test that returns at once, whose check waits for a leftover to exit (6 s, within a 30 s grace),
    passes under a 3 s timeout (pytest-timeout's default signal method, timing setup, call and
    teardown), and the process, gone within its grace, is no leak.

    Ablation: `leak-check-untimed` (the timer runs on through the check) turns this red: the
    timeout fires inside the check, an error at the test's teardown."""
    pytester.makeini("[pytest]\ntimeout = 3\nprocess_leaks_grace = 30\n")
    pytester.makepyfile(test_timed=TIMED_SUITE.format(timed=marks["timed"]))
    result = _run(pytester, "-p", "no:xdist", "--process-leaks")
    result.assert_outcomes(passed=1)
    assert "Timeout" not in result.stdout.str()


# -- when pytest dies -----------------------------------------------------------------------------

DYING_SUITE = """
import os, subprocess, time

def test_a_leaks():
    subprocess.Popen(["sleep", "{kept}"])
    subprocess.Popen(["env", "-i", "sleep", "{scrubbed}"])  # no tag: only the records name it
    time.sleep(0.2)  # env execs sleep

def test_b_dies():
    os._exit(3)
"""


def test_kept_leaks_die_with_a_pytest_that_dies_through_its_guardian(pytester, marks):
    """Path: "or at once if the session dies": the leaks a session keeps alive after their report are
    recorded in its record directory (a tagged one is found by its tag too); when pytest ends
    without teardown (os._exit, as pytest-timeout's thread method does), its guardian's sweep
    kills them, the one without a tag included. Not an attribution test for the guardian (another
    session's start-up sweep may get there first)."""
    pytester.makepyfile(test_dying=DYING_SUITE.format(**marks))
    result = _run(pytester, "-p", "no:xdist", "--process-leaks")
    assert result.ret == 3, result.stdout.str()
    deadline = time.monotonic() + 30
    while sleepers(marks) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not sleepers(marks)


def test_a_fixture_turns_the_check_off_for_the_tests_that_use_it(pytester, marks):
    """Path: the per-fixture opt-out the guide names: a fixture that applies the process_leaks marker
    (request.applymarker) turns the check off for every test that uses it, as the marker on the test
    would; a test without it is checked."""
    pytester.makeconftest(
        """
import pytest

@pytest.fixture
def keeps_its_processes(request):
    request.applymarker(pytest.mark.process_leaks(enabled=False))
"""
    )
    pytester.makepyfile(
        test_optout=f"""
import subprocess

def test_opted_out(keeps_its_processes):
    subprocess.Popen(["sleep", "{marks["kept"]}"])

def test_checked():
    subprocess.Popen(["sleep", "{marks["leak"]}"])
"""
    )
    result = _run(pytester, "-p", "no:xdist", "--process-leaks", "--process-leaks-json", "leaks.json")
    assert [x["cmdline"] for x in _json(pytester)["leaks"]] == [f"sleep {marks['leak']}"]
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["stoplatency: * leaked process(es) from 1 scope(s)*(1 test(s) checked):"])


@pytest.mark.parametrize(
    "args, says",
    [
        (["-o", "process_leaks=loud"], "process_leaks = 'loud' (ini file): expected true, error, warn or false"),
        (["--process-leaks", "-o", "process_leaks_kill=never"], "process_leaks_kill = 'never' (ini file)"),
        (["--process-leaks", "--process-leaks-grace", "-1"], "--process-leaks-grace: expected a number of seconds"),
        (["--process-leaks", "-o", "process_leaks_grace=soon"], "process_leaks_grace (ini file): expected a number"),
        (["--process-leaks=loud"], "argument --process-leaks: ignored explicit argument 'loud'"),
    ],
    ids=["mode-ini", "kill-ini", "grace-option", "grace-ini", "mode-option"],
)
def test_a_setting_that_makes_no_sense_is_a_usage_error(pytester, args, says):
    """Path: _options' readers: a value of --process-leaks, its ini key, process_leaks_kill or
    process_leaks_grace that means nothing is a usage error naming it, before any test runs."""
    pytester.makepyfile(test_plain="def test_a():\n    pass\n")
    result = _run(pytester, "-p", "no:xdist", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    result.stderr.fnmatch_lines([f"*{says}*"])


def test_bare_process_leaks_before_a_path_takes_no_value(pytester, marks):
    """Path: `--process-leaks=warn` is an option string of its own: a bare --process-leaks followed by
    a path (`pytest --process-leaks test_x.py`) still checks, and collects that path."""
    pytester.makepyfile(
        test_x=f"import subprocess\ndef test_a():\n    subprocess.Popen(['sleep', '{marks['leak']}'])\n"
    )
    pytester.makepyfile(test_other="def test_not_collected():\n    pass\n")
    result = _run(pytester, "-p", "no:xdist", "--process-leaks", "test_x.py")
    result.assert_outcomes(passed=1, errors=1)

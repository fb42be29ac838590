"""`make leaks-strangers`' independent oracle (bench/strangers/checker.py and its probe) on real
processes, through the harness's own session (a pytest session with --process-leaks, the
checker beside it): what it counts a leak, and what it does not (issue 39).

- Told to stop is not leaked: a process a test told to stop (Popen.terminate(), a stop signal
  pytest's own process sent), or whose parent was (a server stopping its own worker), that
  exits within the plugin's default stop grace is no leak of the oracle's either
  (supervisor's test_issue_565: supervisord after its SIGINT, and its listener).
- A session inside a test (pytester's runpytest(), in process or as a child) is part of that
  test: what its tests leave is the outer test's, a leak only if it outlives the outer test
  (pytest-xprocess's test_functional_work_flow, whose last inner session kills the server
  its first one left).
- And the oracle stays red on a real leak: a forgotten process, a told one that ignores its
  stop, an inner session's process that outlives the outer test; each the plugin reports too.
"""

import os
import random
import sys
from pathlib import Path

import pytest

from bench.strangers.__main__ import Suite, session
from pytest_stoplatency import _leaks, _options, _procs

SUITE = """
import os, signal, subprocess, sys

# A server whose stop takes a while: its handler spends 0.8 s cleaning up, then exits.
SERVER = (
    "import signal, sys, time\\n"
    "def stop(*a):\\n"
    "    print('stopping', flush=True)\\n"
    "    time.sleep(0.8)\\n"
    "    sys.exit(0)\\n"
    "signal.signal(signal.SIGTERM, stop)\\n"
    "print('ready', flush=True)\\n"
    "time.sleep({mark}1)\\n"
)
# One that ignores its stop.
DEAF = (
    "import signal, time\\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
    "print('ready', flush=True)\\n"
    "time.sleep({mark}2)\\n"
)
# One that stops its worker itself (a signal pytest never sends): the worker is SERVER.
PARENT = (
    "import os, signal, subprocess, sys\\n"
    "w = subprocess.Popen([sys.executable, '-c', os.environ['WORKER']], stdout=subprocess.PIPE)\\n"
    "assert w.stdout.readline() == b'ready\\\\n'\\n"
    "def stop(*a):\\n"
    "    w.terminate()\\n"
    "    w.wait()\\n"
    "    sys.exit(0)\\n"
    "signal.signal(signal.SIGTERM, stop)\\n"
    "print('ready', flush=True)\\n"
    "signal.pause()\\n"
)
INNER = '''
import subprocess
def test_inner():
    p = subprocess.Popen(["sleep", "{mark}3"])
    with open("inner.pid", "w") as f:
        f.write(str(p.pid))
'''

def _start(code, **env):
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, env={{**os.environ, **env}})
    assert child.stdout.readline() == b"ready\\n"
    return child

def test_a_terminates_its_server():
    child = _start(SERVER)
    child.terminate()
    assert child.stdout.readline() == b"stopping\\n"  # in its handler: nothing left pending

def test_b_forgets_its_server():
    subprocess.Popen(["sleep", "{mark}4"])

def test_c_terminates_a_server_that_ignores_it():
    _start(DEAF).terminate()

def test_d_terminates_a_server_that_stops_its_worker():
    _start(PARENT, WORKER=SERVER).terminate()

def test_e_stops_what_its_inner_session_left(pytester):
    pytester.makepyfile(test_inner=INNER)
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)
    os.kill(int((pytester.path / "inner.pid").read_text()), signal.SIGKILL)

def test_f_stops_what_its_inner_subprocess_session_left(pytester):
    pytester.makepyfile(test_inner=INNER)
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)
    os.kill(int((pytester.path / "inner.pid").read_text()), signal.SIGKILL)

def test_g_leaves_what_its_inner_session_left(pytester):
    pytester.makepyfile(test_inner=INNER)
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)
"""


def _marked(mark: str) -> list[tuple[int, int]]:
    out = []
    for entry in os.listdir("/proc"):
        pid = int(entry) if entry.isdigit() else 0
        if pid and pid != os.getpid() and mark in _procs.cmdline(pid):
            ticks = _procs.start_ticks(pid)
            if ticks is not None and _procs.is_alive(pid, ticks):
                out.append((pid, ticks))
    return out


@pytest.fixture
def mark():
    m = str(random.randrange(10**6, 10**7))
    yield m
    left = _marked(m)
    for pid, ticks in left:
        _procs.signal_identified(pid, ticks, 9)
    _leaks.wait_dead(left, 5.0)


def test_the_oracle_spares_what_was_told_to_stop_and_inner_sessions_and_counts_real_leaks(tmp_path, mark):
    """Paths: checker.Checker._told (a stop signal the probe's audit hook saw pytest send, or a
    told ancestry), the stop grace it then gets (the plugin's STOP_GRACE, passed by the
    harness), and leakcheck_probe._watched (only the outermost session of a process that no
    test started is watched). The plugin and the oracle must agree on every process: the
    three real leaks (forgotten; told and deaf to it; an inner session's that outlives the
    outer test, the outer test's) and nothing else; the tests counted are the outer ones.

    Ablations: oracle-told-signals, oracle-told-ancestry, oracle-outer-session-only,
    oracle-inner-process (each: a false leak of the oracle, red)."""
    src = tmp_path / "suite"
    src.mkdir()
    (src / "test_suite.py").write_text(SUITE.format(mark=mark))
    (src / "pytest.ini").write_text("[pytest]\n")
    suite = Suite("oracle", "0", ("test_suite.py",), options=("-p", "pytester", "-p", "no:xdist"))
    got = session(Path(sys.executable), suite, src, "serial", "check", tmp_path / "out", timeout=300)
    log = (tmp_path / "out" / "pytest.log").read_text()
    assert sorted(got["outcomes"]) == [
        f"test_suite.py::test_{x}"
        for x in (
            "a_terminates_its_server",
            "b_forgets_its_server",
            "c_terminates_a_server_that_ignores_it",
            "d_terminates_a_server_that_stops_its_worker",
            "e_stops_what_its_inner_session_left",
            "f_stops_what_its_inner_subprocess_session_left",
            "g_leaves_what_its_inner_session_left",
        )
    ], log
    oracle = {(x["pid"], x["start_ticks"]): x for x in got["checker"]["leaks"]}
    plugin = {(x["pid"], x["start_ticks"]): x for x in got["plugin"]["leaks"]}
    # By the test whose leak each is: each of those tests starts one process that stays. (Not
    # by command line: Popen returns once the exec has begun, and on a busy machine a snapshot
    # at the test's end can read the child's command line before the exec has set it: empty.)
    assert sorted(x["scope"].split("::")[-1] for x in oracle.values()) == [
        "test_b_forgets_its_server",
        "test_c_terminates_a_server_that_ignores_it",
        "test_g_leaves_what_its_inner_session_left",
    ], got["checker"]["leaks"]
    assert set(plugin) == set(oracle), (got["plugin"]["leaks"], got["checker"]["leaks"])
    assert (got["checker"]["grace_s"], got["checker"]["stop_grace_s"]) == (_options.GRACE, _options.STOP_GRACE)
    assert got["checker"]["outlived_session"] == []


def test_the_probe_watches_the_outermost_session_of_a_process_no_test_started(monkeypatch):
    """Path: nesting.configured / watched, the rule alone (the test above runs it inside real
    sessions): a session configured inside another (pytester's runpytest(), in process) is not
    watched, the outer one is again once it is gone; a pytest whose environment carries a
    test's or a fixture's scope (runpytest_subprocess()) is not watched at all; one that
    carries a gap's (an xdist worker replaced between tests) or none is.

    Ablations: oracle-outer-session-only, oracle-inner-process."""
    from bench.strangers import nesting

    monkeypatch.setattr(nesting, "_configs", [])
    monkeypatch.setattr(nesting, "_inner", [False])
    outer, inner = object(), object()
    nesting.configured(outer, "")
    assert nesting.watched()
    nesting.configured(inner, "")
    assert not nesting.watched()
    nesting.unconfigured(inner)
    assert nesting.watched()
    nesting.unconfigured(outer)
    for inherited, watched in (("lc1x2.main.t7", False), ("lc1x2.gw0.f3", False), ("lc1x2.gw1.g9", True)):
        nesting.configured(outer, inherited)
        assert nesting.watched() is watched, inherited
        nesting.unconfigured(outer)


def test_what_a_test_leaked_and_outlived_the_session_is_counted_both_ways(tmp_path, mark):
    """Path: the checker's last look (op final, _candidates(every=True)) takes what it already
    counted as a test's leak too: a plain session (no check to kill it) whose test leaves a
    process has that leak, and the same process outlived the session, and the harness kills
    it. (The last look skipped counted processes: supervisor's plain sessions left three
    test_1231.py processes for about 400 s each, while the rows said 0 outlived.)"""
    src = tmp_path / "suite"
    src.mkdir()
    (src / "test_left.py").write_text(
        f"import subprocess\n\ndef test_left():\n    subprocess.Popen(['sleep', '{mark}5'])\n"
    )
    (src / "pytest.ini").write_text("[pytest]\n")
    suite = Suite("oracle", "0", ("test_left.py",), options=("-p", "no:xdist"))
    got = session(Path(sys.executable), suite, src, "serial", "plain", tmp_path / "out", timeout=300)
    [leak] = got["checker"]["leaks"]
    [outlived] = got["checker"]["outlived_session"]
    assert (outlived["pid"], outlived["start_ticks"]) == (leak["pid"], leak["start_ticks"])
    assert got["killed_after"] == 1
    assert not _leaks.wait_dead([(leak["pid"], leak["start_ticks"])], 10.0)  # the harness's SIGKILL took it

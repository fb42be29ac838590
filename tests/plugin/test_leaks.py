"""Leak-proofing: no victim outlives its test, nor a session that died without teardown.

Each inner pytest writes what it started (pid, start ticks, token, extras, taken from
the real handles) to a JSON file; the outer test checks those processes afterwards,
and kills whatever it finds so that a red run still leaks nothing.
"""

import json
import signal

from pytest_stoplatency import _procs

INNER_PRELUDE = '''
import json, os, time, pytest

def record(v, path="victims.json"):
    try:
        known = json.load(open(path))
    except FileNotFoundError:
        known = []
    known.append({"pid": v.pid, "start_ticks": v.start_ticks, "token": str(v.token),
                  "extras": [[e["pid"], e["start_ticks"]] for e in v.extras],
                  "members": v.members()})
    with open(path + ".tmp", "w") as f:
        json.dump(known, f)
    os.replace(path + ".tmp", path)
'''


def recorded(pytester):
    path = pytester.path / "victims.json"
    return json.loads(path.read_text()) if path.exists() else []


def living(pytester):
    """Every recorded process (victims, members, extras) still alive, by pid + start ticks."""
    out = set()
    for v in recorded(pytester):
        for pid, ticks in [(v["pid"], v["start_ticks"])] + [tuple(m) for m in v["members"]] + [tuple(e) for e in v["extras"]]:
            if _procs.is_alive(pid, ticks):
                out.add((pid, ticks))
        out.update(_procs.lineage([v["token"]]))
    return out


def kill_all(procs):
    for pid, ticks in procs:
        _procs.signal_identified(pid, ticks, signal.SIGKILL)
    _procs.wait_gone([], list(procs), timeout=5.0)


def run_inner(pytester, *args, timeout=60):
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", *args, timeout=timeout)


def test_cleanup_kills_and_reports_a_leaking_test(pytester):
    """Path: the per-test cleanup SIGKILLs a victim the test left alive and reports the test as an error.

    Ablation: delete the line `_procs.signal_identified(pid, ticks, signal.SIGKILL)  # stoplatency: per-test cleanup SIGKILL`
    in pytest_stoplatency/_cleanup.py and this test goes red (the victims are alive after the inner run).
    """
    pytester.makepyfile(INNER_PRELUDE + '''
def test_leaves_them(victim):
    record(victim("trap-term"))
    record(victim("forker", lang="bash"))
''')
    result = run_inner(pytester)
    left = living(pytester)
    kill_all(left)
    assert len(recorded(pytester)) == 2
    assert not left, f"the per-test cleanup left {left} alive"
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*ERROR at teardown of test_leaves_them*",
                                 "*stoplatency: test leaked victim processes*"])


def test_a_victim_the_test_sigkilled_is_not_reported_as_a_leak(pytester):
    """Path: a test SIGKILLs its victims' group and returns at once; members still exiting when the
    cleanup looks are given the settle window and are not reported as leaks (20 runs in one session).

    Ablation: report what the cleanup's first, immediate scan finds (no settle before judging) and
    this test goes red (a forker's children are often still exiting: about 3 runs in 4 were reported).
    """
    pytester.makepyfile(INNER_PRELUDE + '''
import signal

@pytest.mark.parametrize("i", range(20))
def test_kills_and_returns(victim, i):
    v = victim("forker", children=4)
    record(v)
    os.killpg(v.pgid, signal.SIGKILL)
''')
    result = run_inner(pytester, timeout=120)
    left = living(pytester)
    kill_all(left)
    assert len(recorded(pytester)) == 20
    assert not left
    assert "stoplatency: test leaked" not in result.stdout.str()
    result.assert_outcomes(passed=20)


def test_a_test_failing_midway_leaks_nothing(pytester):
    """Path: a test that fails between starting victims and stopping them; the cleanup still kills all, extras too."""
    pytester.makepyfile(INNER_PRELUDE + '''
def test_fails(victim):
    record(victim("env-scrubber"))
    record(victim("respawner", lang="bash"))
    assert False, "midway"
''')
    result = run_inner(pytester)
    left = living(pytester)
    kill_all(left)
    assert not left
    result.assert_outcomes(failed=1, errors=1)


def test_pytest_timeout_signal_method_leaks_nothing(pytester):
    """Path: pytest-timeout's signal method raises in the test; teardown runs and kills the victims."""
    pytester.makepyfile(INNER_PRELUDE + '''
@pytest.mark.timeout(1, method="signal")
def test_hangs(victim):
    record(victim("trap-term"))
    time.sleep(60)
''')
    result = run_inner(pytester)
    left = living(pytester)
    kill_all(left)
    assert not left
    result.assert_outcomes(failed=1, errors=1)


def test_pytest_timeout_thread_method_is_swept_by_the_next_session(pytester):
    """Path: pytest-timeout's thread method ends the process without teardown; the victims outlive their
    owner (the env-scrubber's grandchild too, token-less), and the next session's sweep kills them.

    Ablation: skip the sweep in pytest_sessionstart/pytest_sessionfinish and the orphans stay alive.
    """
    pytester.makepyfile(test_hang=INNER_PRELUDE + '''
@pytest.mark.timeout(1, method="thread")
def test_hangs(victim):
    record(victim("trap-term"))
    record(victim("env-scrubber", lang="bash"))
    time.sleep(60)
''')
    run_inner(pytester, "test_hang.py")
    orphans = living(pytester)
    try:
        assert len(recorded(pytester)) == 2
        pytester.makepyfile(test_next="def test_nothing():\n    pass\n")
        result = run_inner(pytester, "test_next.py", "--stop-latency")
        left = living(pytester)
    finally:
        kill_all(living(pytester))
    assert not left, f"the next session's sweep left {left} alive"
    result.stdout.fnmatch_lines(["*stoplatency: swept * ownerless victim process(es)*"])
    # Others' sessions may sweep our orphans first; when they were still ours to sweep, count them.
    if orphans:
        swept = int(next(l for l in result.outlines if "stoplatency: swept" in l).split()[2])
        assert swept >= 1 or not any(_procs.is_alive(*p) for p in orphans)


def test_a_live_sessions_victims_survive_another_sessions_sweep(victim, pytester):
    """Path: the sweep checks the owner (pid + start ticks) and never touches a live owner's victims or extras."""
    mine = victim("trap-term")
    scrubber = victim("env-scrubber")
    pytester.makepyfile("def test_nothing():\n    pass\n")
    run_inner(pytester).assert_outcomes(passed=1)
    assert mine.alive() and scrubber.alive()
    assert _procs.is_alive(scrubber.extras[0]["pid"], scrubber.extras[0]["start_ticks"])
    mine.kill()
    scrubber.kill()
    assert mine.wait_gone(5.0) and scrubber.wait_gone(5.0)

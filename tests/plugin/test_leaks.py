"""Leak-proofing: no victim outlives its test, nor a session that died without teardown.

Each inner pytest writes what it started (pid, start ticks, token, extras, taken from
the real handles) to a JSON file; the outer test checks those processes afterwards,
and kills whatever it finds so that a red run still leaks nothing.
"""

import json
import signal
import time

import pytest

from pytest_stoplatency import _procs
from pytest_stoplatency._guardian import ENV_DISABLE as ENV_NO_GUARDIAN
from pytest_stoplatency._guardian import ENV_LOG as ENV_GUARDIAN_LOG

INNER_PRELUDE = """
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
"""


@pytest.fixture(autouse=True)
def _no_guardian_unless_tested(request, monkeypatch):
    """Attribution: an inner session's guardian kills its victims moments after the inner
    pytest exits, which would hide a broken per-test cleanup or sweep. It runs only in the
    tests that prove the guardian itself."""
    if "guardian" not in request.node.name:
        monkeypatch.setenv(ENV_NO_GUARDIAN, "1")


def recorded(pytester):
    path = pytester.path / "victims.json"
    return json.loads(path.read_text()) if path.exists() else []


def living(pytester):
    """Every recorded process (victims, members, extras) still alive, by pid + start ticks."""
    out = set()
    for v in recorded(pytester):
        for pid, ticks in (
            [(v["pid"], v["start_ticks"])] + [tuple(m) for m in v["members"]] + [tuple(e) for e in v["extras"]]
        ):
            if _procs.is_alive(pid, ticks):
                out.add((pid, ticks))
        out.update(_procs.lineage([v["token"]]))
    return out


def kill_all(procs):
    for pid, ticks in procs:
        _procs.signal_identified(pid, ticks, signal.SIGKILL)
    _procs.wait_gone([], list(procs), timeout=5.0)


def reap_leftovers(pytester):
    """Kill whatever recorded process is still alive and return what was, so a red test
    still leaves nothing behind."""
    left = living(pytester)
    kill_all(left)
    return left


def run_inner(pytester, *args, timeout=60):
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", *args, timeout=timeout)


def test_cleanup_kills_and_reports_a_leaking_test(pytester):
    """Path: the per-test cleanup SIGKILLs a victim the test left alive and reports the test as an error.

    Ablation: `plugin-cleanup-sigkill` (the per-test cleanup's SIGKILL in
    pytest_stoplatency/_cleanup.py) and this test goes red (the victims are alive after the inner run).
    """
    pytester.makepyfile(
        INNER_PRELUDE
        + """
def test_leaves_them(victim):
    record(victim("trap-term"))
    record(victim("forker", lang="bash"))
"""
    )
    result = run_inner(pytester)
    left = reap_leftovers(pytester)
    assert len(recorded(pytester)) == 2
    # The inner session's own word first: once it has exited its victims are ownerless,
    # and another session's sweep on the machine may kill them before reap_leftovers
    # looks, which would hide a cleanup that never killed them.
    assert "could NOT kill" not in result.stdout.str()
    assert not left, f"the per-test cleanup left {left} alive"
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        ["*ERROR at teardown of test_leaves_them*", "*stoplatency: test leaked victim processes*"]
    )


def test_a_victim_the_test_sigkilled_is_not_reported_as_a_leak(pytester):
    """Path: a test SIGKILLs its victims' group and returns at once; members still exiting when the
    cleanup looks (SIGKILL pending, or in do_exit) are dying, waited for and not reported as leaks
    (20 runs in one session).

    Ablation: drop the pending-SIGKILL check from _procs.dying (or the dying() check from
    kill_lineage) and this goes red: a forker's children are often still exiting (14 of 20 were
    reported); PF_EXITING alone is set too late to tell.
    """
    pytester.makepyfile(
        INNER_PRELUDE
        + """
import signal

@pytest.mark.parametrize("i", range(20))
def test_kills_and_returns(victim, i):
    v = victim("forker", children=4)
    record(v)
    os.killpg(v.pgid, signal.SIGKILL)
"""
    )
    result = run_inner(pytester, timeout=120)
    left = reap_leftovers(pytester)
    assert len(recorded(pytester)) == 20
    assert not left
    assert "stoplatency: test leaked" not in result.stdout.str()
    result.assert_outcomes(passed=20)


def test_a_test_failing_midway_leaks_nothing(pytester):
    """Path: a test that fails between starting victims and stopping them; the cleanup still kills all, extras too."""
    pytester.makepyfile(
        INNER_PRELUDE
        + """
def test_fails(victim):
    record(victim("env-scrubber"))
    record(victim("respawner", lang="bash"))
    assert False, "midway"
"""
    )
    result = run_inner(pytester)
    left = reap_leftovers(pytester)
    assert not left
    result.assert_outcomes(failed=1, errors=1)


def test_pytest_timeout_signal_method_leaks_nothing(pytester):
    """Path: pytest-timeout's signal method raises in the test; teardown runs and kills the victims."""
    pytester.makepyfile(
        INNER_PRELUDE
        + """
@pytest.mark.timeout(1, method="signal")
def test_hangs(victim):
    record(victim("trap-term"))
    time.sleep(60)
"""
    )
    result = run_inner(pytester)
    left = reap_leftovers(pytester)
    assert not left
    result.assert_outcomes(failed=1, errors=1)


ATTEMPTS = 5


def test_pytest_timeout_thread_method_is_swept_by_the_next_session(pytester, monkeypatch):
    """Path: pytest-timeout's thread method ends the process without teardown; the victims outlive their
    owner (the env-scrubber's grandchild too, token-less), and the next session's sweep kills them. The
    session guardian is off here (it would kill them first): this proves the sweep alone.

    Ablation: skip the sweep in pytest_sessionstart/pytest_sessionfinish and the orphans stay alive.
    """
    monkeypatch.setenv(ENV_NO_GUARDIAN, "1")
    pytester.makepyfile(
        test_hang=INNER_PRELUDE
        + """
@pytest.mark.timeout(5, method="thread")
def test_hangs(victim):
    record(victim("trap-term"))
    record(victim("env-scrubber", lang="bash"))
    time.sleep(60)
"""
    )
    pytester.makepyfile(test_next="def test_nothing():\n    pass\n")
    # The machine is shared: any session's sweep kills any dead owner's victims, so another
    # session (another xdist worker's inner run, another suite beside this one) may get
    # there first. Such an attempt proves nothing about OUR count and is repeated. What
    # holds whether or not another session came first is asserted every time: nothing of
    # the dead session outlives the next one. The sweep's gate is proved without the race
    # by test_idle.py::test_a_dead_owners_records_still_get_the_sweep.
    for _attempt in range(ATTEMPTS):
        (pytester.path / "victims.json").unlink(missing_ok=True)
        first = run_inner(pytester, "test_hang.py")
        orphans = living(pytester)
        try:
            assert len(recorded(pytester)) == 2
            # Really ended by pytest-timeout's thread method (it prints "Timeout" and exits), not
            # by something that ran teardown.
            assert "Timeout" in first.stdout.str() + first.stderr.str()
            alive_before = {p for p in orphans if _procs.is_alive(*p)}  # empty: swept by another session
            result = run_inner(pytester, "test_next.py", "--stop-latency")
            left = living(pytester)
            result.stdout.fnmatch_lines(["*stoplatency: swept * ownerless victim process(es)*"])
            swept = int(next(l for l in result.outlines if "stoplatency: swept" in l).split()[2])
        finally:
            kill_all(living(pytester))
        assert not left, f"the next session's sweep left {left} alive"
        if alive_before and swept >= 1:
            break
    else:
        pytest.skip(
            f"in {ATTEMPTS} attempts another session's sweep always came first (last: "
            f"{sorted(alive_before)} alive before the next session, swept {swept}); nothing was left"
        )


WINDOW = """
import signal, subprocess
from pytest_stoplatency import _procs, _records

ENDING = "{ending}"


def wait_until(pred, what):
    deadline = time.monotonic() + 10
    while not pred():
        assert time.monotonic() < deadline, what
        time.sleep(0.0002)  # another process's progress, not a latency


def publishing(pid, grandchild):
    # A living child of the victim other than its grandchild: the subshell that publishes
    # the ready file (it becomes mv), which the victim's SIGSTOP does not stop.
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [k for k in map(int, f.read().split()) if k != grandchild and _procs.is_alive(k)]


def test_killed_before_its_handshake(victim):
    for _ in range(10):
        p = victim.prepare("env-scrubber", lang="bash")
        proc = subprocess.Popen(p.argv, start_new_session=True, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        victim.processes.append(proc)
        extras = _records.extras_path(p.ready_path)
        wait_until(lambda: _records.read_extras(extras), "the grandchild never recorded itself")
        [(grandchild, _)] = _records.read_extras(extras)
        os.kill(proc.pid, signal.SIGSTOP)  # from now on the victim forks no publisher of its ready file
        # Stopped (the signal lands asynchronously), and no publisher it forked before is
        # still at work: only then can the ready file not appear any more.
        wait_until(lambda: _procs.state(proc.pid) == "T", "the victim never stopped")
        wait_until(lambda: not publishing(proc.pid, grandchild), "the ready file's publisher never ended")
        if not p.ready_path.exists():
            break
        os.kill(proc.pid, signal.SIGCONT)  # too late this time: stop it properly and try again
        v = p.adopt(10.0, process=proc)
        v.kill()
        assert v.wait_gone(5.0)
    else:
        pytest.fail("never caught the victim between its grandchild's start and its handshake")
    [(pid, ticks)] = _records.read_extras(extras)
    # Its token is gone (exec -c): from here on only the record names it.
    wait_until(lambda: _procs.token_of(pid) is None, "the grandchild kept its token")
    assert _procs.is_alive(pid, ticks)
    os.kill(proc.pid, signal.SIGKILL)  # the victim dies before its handshake
    proc.wait()
    assert not p.ready_path.exists()
    with open("grandchild.json", "w") as f:
        json.dump([[pid, ticks]], f)
    if ENDING == "crash":
        os._exit(3)  # no teardown: the next session's sweep must find it through the record
"""


@pytest.mark.parametrize("ending", ["teardown", "crash"])
def test_env_scrubber_killed_before_its_handshake_leaks_nothing(pytester, ending, monkeypatch):
    """Path: an env-scrubber killed after its grandchild dropped the token but before the ready file
    exists (as code under test may do to a prepared victim): the grandchild is named only by the
    <id>.extras line it appended before its exec. The per-test cleanup kills it (and reports the
    leak); after a crashed session (os._exit), the next session's sweep kills it.

    Ablation: read only the ready files (not <id>.extras) in VictimFactory.lineage (teardown) or
    _records.recorded_extras (crash), or have the victim not write the record, and the grandchild lives.
    The session guardian is off (it would kill the grandchild first): this proves the sweep alone.
    """
    monkeypatch.setenv(ENV_NO_GUARDIAN, "1")
    pytester.makepyfile(test_window=INNER_PRELUDE + WINDOW.replace("{ending}", ending))
    result = run_inner(pytester, "test_window.py")
    path = pytester.path / "grandchild.json"
    grandchild = [tuple(g) for g in json.loads(path.read_text())] if path.exists() else []
    try:
        assert grandchild, result.stdout.str()
        if ending == "teardown":
            result.assert_outcomes(passed=1, errors=1)
            result.stdout.fnmatch_lines(["*stoplatency: test leaked victim processes*", "*__scrubbed*"])
        else:
            assert result.ret == 3
            pytester.makepyfile(test_next="def test_nothing():\n    pass\n")
            run_inner(pytester, "test_next.py").assert_outcomes(passed=1)
        left = [g for g in grandchild if _procs.is_alive(*g)]
    finally:
        kill_all(grandchild)
    assert not left, f"the token-less grandchild {left} outlived its victim"


def test_a_live_sessions_victims_survive_another_sessions_sweep(victim, pytester, monkeypatch, tmp_path):
    """Path: the sweep checks the owner (pid + start ticks): in one sweep, a dead owner's victims (its
    token-less grandchild too) ARE killed while a live owner's victims and extras are spared. The
    sessions run with different TMPDIRs: the record directory is machine-wide, not per temp dir.

    Ablation: skip the sweep and the dead owner's victims live; drop the owner check and ours die;
    put the records under TMPDIR and the dead owner's grandchild is never found. The session guardian
    is off in the inner sessions (it would kill the dead owner's victims first).
    """
    monkeypatch.setenv(ENV_NO_GUARDIAN, "1")
    mine = victim("trap-term")
    scrubber = victim("env-scrubber")
    pytester.makepyfile(
        test_dead=INNER_PRELUDE
        + """
def test_dies(victim):
    record(victim("trap-term"))
    record(victim("env-scrubber", lang="bash"))
    os._exit(3)  # the owner dies without teardown
"""
    )
    for name in ("tmp-dead", "tmp-sweeper"):
        (tmp_path / name).mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp-dead"))
    assert run_inner(pytester, "test_dead.py").ret == 3
    try:
        # Recorded from the real handles while they lived. They cannot die by themselves (trap-term
        # and a SIGTERM-ignoring grandchild): if another session's sweep gets them before ours,
        # that sweep too ran while our victims lived, which is the claim.
        assert len(recorded(pytester)) == 2
        monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp-sweeper"))
        pytester.makepyfile(test_next="def test_nothing():\n    pass\n")
        run_inner(pytester, "test_next.py").assert_outcomes(passed=1)
        dead_owners_left = living(pytester)
    finally:
        kill_all(living(pytester))
    assert not dead_owners_left, f"the sweep spared a dead owner's victims: {dead_owners_left}"
    assert mine.alive() and scrubber.alive()
    assert _procs.is_alive(scrubber.extras[0]["pid"], scrubber.extras[0]["start_ticks"])
    mine.kill()
    scrubber.kill()
    assert mine.wait_gone(5.0) and scrubber.wait_gone(5.0)


GUARDIAN_SWEPT = 10.0
"""How long a test waits for a dead session's guardian to say it has swept: only a wait for
that event on a busy machine (the guardian wakes on its owner's pidfd; docs/plugin.md
promises "within moments", no figure)."""


@pytest.mark.parametrize("death", ["os-exit", "sigkill", "timeout-thread"])
def test_the_guardian_kills_a_dead_sessions_victims(pytester, monkeypatch, death):
    """Path: _guardian.py. A pytest process that dies with no teardown (os._exit, a SIGKILL
    of itself, pytest-timeout's thread method) leaves trap-term victims (and an env-scrubber's
    token-less grandchild) behind; its guardian, watching it through a pidfd from a session of
    its own, kills them all within moments, with no next session to sweep. Waited for by
    its own event: the line the guardian appends once its sweep has killed them
    (GUARDIAN_SWEPT bounds only that wait); then nothing of them lives.

    Ablation: session-guardian (no guardian) and the victims live on, no line (red)."""
    end = {
        "os-exit": "os._exit(3)",
        "sigkill": "os.kill(os.getpid(), 9)",
        "timeout-thread": "time.sleep(60)",
    }[death]
    # 5 s, not 1: the timer runs from the test's start, and on a busy machine starting the
    # two victims took longer than 1 s (the session ended with one recorded).
    mark = '@pytest.mark.timeout(5, method="thread")\n' if death == "timeout-thread" else ""
    pytester.makepyfile(
        test_dies=INNER_PRELUDE
        + f"""
{mark}def test_dies(victim):
    record(victim("trap-term"))
    record(victim("env-scrubber", lang="bash"))
    {end}
"""
    )
    guardian_log = pytester.path / "guardian.jsonl"
    monkeypatch.setenv(ENV_GUARDIAN_LOG, str(guardian_log))
    result = run_inner(pytester, "test_dies.py")
    assert result.ret != 0
    try:
        assert len(recorded(pytester)) == 2, result.stdout.str()
        # Attribution: another session starting anywhere on the machine sweeps dead owners'
        # victims too; the guardian's own line says that it ran for this owner, and it is
        # written once its sweep is done.
        deadline = time.monotonic() + GUARDIAN_SWEPT
        while not guardian_log.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        left = living(pytester)
    finally:
        kill_all(living(pytester))
    assert not left, f"the dead session's victims outlived it: {left}"
    lines = [json.loads(line) for line in guardian_log.read_text().splitlines()] if guardian_log.exists() else []
    assert lines, "no guardian swept for the dead session"


def test_prepared_victims_never_adopted_are_reported_and_killed(pytester):
    """Path: VictimFactory.lineage for prepared victims the code under test starts and the
    test never adopts (double-fork: the daemon leaves its parent at once; env-scrubber: the
    grandchild drops the token). Every test reports a leak and nothing outlives the inner
    run, including a test that returns the instant after the start.

    Ablation: drop the launcher-argv check or the mid-exec re-read in _procs.token_of and
    tests whose launcher had not yet become the victim pass without a leak report (red in
    most runs: about one test in sixteen hits that window)."""
    pytester.makepyfile(
        INNER_PRELUDE
        + """
import subprocess

@pytest.mark.parametrize("kind", ["double-fork", "env-scrubber", "double-fork", "escapee"] * 3)
def test_starts_and_forgets(victim, kind):
    p = victim.prepare(kind)
    proc = subprocess.Popen(p.argv, start_new_session=True, stdin=subprocess.DEVNULL)
    with open("tokens.txt", "a") as f:
        f.write(str(p.token) + "\\n")
"""
    )
    result = run_inner(pytester, timeout=120)
    tokens = (pytester.path / "tokens.txt").read_text().split()
    assert len(tokens) == 12
    # The inner run has SIGKILLed them; a SIGKILLed process still takes its turn on a busy
    # CPU to die. Waited until none is left (at once, when quiet), 30 s at most: 5 s was
    # red once beside other work.
    deadline = time.monotonic() + 30
    left = _procs.lineage(tokens)
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = _procs.lineage(tokens)
    kill_all(left)
    assert not left, f"prepared victims outlived their tests: {left}"
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == 12 and outcomes.get("error", outcomes.get("errors")) == 12, outcomes

"""Stops that race each other or meet an engine that cannot answer, and a command killed
from outside while no stop is pending. Every run's provider (or verify command) is an
adversarial process: a trap-term victim or a shell that ignores SIGTERM."""

import os
import signal
import subprocess
import threading
import time

import pytest
import runs as R

from runner.engine.stop_controller import StopController
from runner.events import Mode, Origin
from runner.exitcodes import Exit
from runner.files import identity_file, stop_request
from runner.files.journal import Journal
from runner.files.rundir import RunDir
from runner.proc import identity

KILL_GRACE = 0.3


def stop_proc(rd, *flags):
    return subprocess.Popen(
        [*R.RUNNER, "stop", "--run-dir", str(rd.path), *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )


def finish(procs, timeout=30):
    """Wait for every stopper; kill what is left if one hangs, so none leaks."""
    out = []
    try:
        for p in procs:
            stdout, stderr = p.communicate(timeout=timeout)
            out.append((p.returncode, stdout + stderr))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return out


def trap_term_run(runs, victim, **stop):
    p = victim.prepare("trap-term")
    spec = runs.spec(items=("a",), provider=p.argv, stop={"kill_grace": KILL_GRACE, "grace": 5.0, **stop})
    rd = runs.start(spec)
    R.wait_event(rd, "session-start", item="a")
    return rd, p.adopt(timeout=10)


def assert_one_engine_stop(rd, origin="signal"):
    R.wait_engine_exit(rd)
    stops = R.events(rd, "run-stop")
    assert len(stops) == 1, stops
    assert (stops[0]["origin"], stops[0]["mode"], stops[0]["fallback"]) == (origin, "hard", False)
    st = R.state(rd)
    assert (st.status, st.stopped, st.stop_origin) == ("stopped", True, origin)
    assert not R.events(rd, "graceful-stop")
    assert not R.tagged(rd.run_id)


@pytest.mark.parametrize("channel", ["signal", "file"])
def test_two_hard_stops_at_once(runs, victim, stop_latency, channel):
    """Path: two `runner stop` started together against a trap-term provider: one hard
    stop, honored by the engine (no fallback), exactly one run-stop; each stopper exits OK,
    or the one that came second says there is no live engine any more. A race guard, not
    a one-line ablation: it goes red if a second stopper's wait ever misreads the first
    stop as unhonored and falls back (a second, forced run-stop)."""
    rd, v = trap_term_run(runs, victim, channel=channel)
    with stop_latency.measure(f"two hard stops at once ({channel})", v, bound=KILL_GRACE + 2.0):
        results = finish([stop_proc(rd), stop_proc(rd)])
    codes = sorted(code for code, _ in results)
    assert codes in ([Exit.OK, Exit.OK], [Exit.OK, Exit.NO_LIVE_RUN]), results
    for code, text in results:
        if code == Exit.NO_LIVE_RUN:
            assert "no live engine" in text, text
    assert_one_engine_stop(rd, origin=channel)


@pytest.mark.parametrize("first", ["graceful", "hard"])
@pytest.mark.parametrize("channel", ["signal", "file"])
def test_graceful_racing_hard_is_still_hard(runs, victim, stop_latency, first, channel):
    """Path: `runner stop --graceful` and `runner stop` started together (either one
    first), on each channel: the stop is hard (never downgraded): the trap-term provider
    is killed in about kill_grace instead of being waited out, the engine records mode
    hard, one run-stop, no graceful-stop. End to end this is timing-dependent as an
    ablation detector (on the file channel, deleting lodge's max(old, new) turns it red
    only when the graceful write lands before the watchdog's next read); the
    deterministic proof of never-downgrade is test_control.py's lodge race."""
    rd, v = trap_term_run(runs, victim, channel=channel)
    graceful, hard = ["--graceful"], []
    order = [graceful, hard] if first == "graceful" else [hard, graceful]
    label = f"graceful racing hard ({first} first, {channel})"
    with stop_latency.measure(label, v, bound=KILL_GRACE + 2.0):
        results = finish([stop_proc(rd, *flags) for flags in order])
    for code, _text in results:
        assert code in (Exit.OK, Exit.NO_LIVE_RUN), results
    assert_one_engine_stop(rd, origin=channel)


def test_wedged_engine_falls_back_after_grace(runs, victim, stop_latency):
    """Path: the engine is SIGSTOPped (it neither runs its SIGTERM handler nor reads the
    control file), `runner stop` waits out grace (1 s), then force-kills: exit
    STOP_FORCED, journal run-stop fallback true origin forced (exactly one), the engine
    gone, nothing left with the run's tag. Ablation: remove the fallback in
    stop.stop_hard and the stop returns with the engine still there."""
    grace = 1.0
    rd, v = trap_term_run(runs, victim, grace=grace)
    engine = identity_file.read(rd.engine_identity)
    assert identity.is_running(engine)
    os.kill(engine.pid, signal.SIGSTOP)
    t0 = time.monotonic()
    with stop_latency.measure("wedged engine, fallback", v, bound=grace + KILL_GRACE + 3.0):
        proc = R.runner("stop", "--run-dir", rd.path)
    elapsed = time.monotonic() - t0
    assert proc.returncode == Exit.STOP_FORCED, (proc.returncode, proc.stderr)
    assert "grace" in proc.stderr
    assert elapsed >= grace  # it did wait for the engine first
    assert not identity.is_running(engine)
    R.wait_engine_exit(rd, timeout=5)
    stops = R.events(rd, "run-stop")
    assert len(stops) == 1, stops
    assert (stops[0]["origin"], stops[0]["fallback"], stops[0]["forced"]) == ("forced", True, True)
    st = R.state(rd)
    assert (st.status, st.stopped, st.stop_origin) == ("stopped", True, "forced")
    assert not R.tagged(rd.run_id)


def test_stop_now_with_an_escapee_leaves_nothing_tagged(runs, victim, stop_latency):
    """Path: `runner stop --now` while the provider is an `escapee` victim (traps SIGTERM;
    its trapping child did setsid and left the group): every process with the run's tag
    is gone within about kill_grace plus overhead; one forced run-stop. Two routes reach
    the escaped grandchild here (the tag sweep and, where contained, the cgroup kill);
    only deleting both turns this red, so it is not an attributing test."""
    p = victim.prepare("escapee")
    spec = runs.spec(items=("a",), provider=p.argv, stop={"kill_grace": KILL_GRACE, "grace": 5.0})
    rd = runs.start(spec)
    v = p.adopt(timeout=10)
    escaped = [c for c in v.tree() if c.pid != v.pid]
    assert escaped and all(os.getsid(c.pid) != v.sid for c in escaped)
    with stop_latency.measure("stop --now, escapee provider", v, bound=KILL_GRACE + 2.0):
        proc = R.runner("stop", "--now", "--run-dir", rd.path)
    assert proc.returncode == Exit.OK, (proc.returncode, proc.stderr)
    assert not R.tagged(rd.run_id)
    R.wait_engine_exit(rd, timeout=5)
    stops = R.events(rd, "run-stop")
    # `--now` lodges its request before its kill: an engine that reads it first (a busy
    # machine slows the stopper between the two) records the stop itself, as a signalled
    # stop (words.stopped says `--now` may be behind that), and is killed while it ends.
    assert len(stops) == 1 and (stops[0]["forced"] is True or stops[0]["origin"] == "signal"), stops


def _child_named(rd, name, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for path in rd.children.glob("*.json"):
            try:
                if identity_file.read_extra(path).get("name") == name:
                    return identity_file.read(path)
            except (FileNotFoundError, ValueError):
                continue
        time.sleep(0.02)
    raise AssertionError(f"no child {name!r} registered in {rd.children}")


def test_verify_killed_from_outside_is_a_failed_verify(runs, tmp_path):
    """Path: a verify command killed from outside (SIGKILL to its group, identity read
    from the children file the engine wrote) while no stop is pending is a real failure:
    verify-result outcome failed, a repair is dispatched, and after the repair the verify
    passes and the run completes, with no run-stop. The other half of stop-aware
    classification (a stop's kill is not a failure) is proven in test_stop_protocol.py.
    Ablation: classify every SIGKILLed command as stopped and this goes red."""
    marker = tmp_path / "verified-once"
    # First run: mark, then block (to be killed). Second run (after the repair): pass.
    check = R.sh('[ -e "$1" ] && exit 0; : > "$1"; trap "" TERM; while :; do sleep 0.05; done', str(marker))
    spec = runs.spec(
        items=("a",),
        provider=["true"],
        stop={"kill_grace": KILL_GRACE},
        verify=[{"command": check, "timeout": 60, "fixable": True}],
        repair={"max_attempts": 1},
        retry={"backoff": 0},
    )
    rd = runs.start(spec)
    R.wait_event(rd, "phase-start", phase="verify", item="a")
    ident = _child_named(rd, "verify0")
    deadline = time.monotonic() + 10
    while not marker.exists():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    # Ours, checked: the group leader is still the process the engine recorded.
    assert identity.is_running(ident) and ident.pgid == ident.pid
    os.killpg(ident.pgid, signal.SIGKILL)

    assert R.runner("wait", "--run-dir", rd.path).returncode == Exit.OK
    results = R.events(rd, "verify-result", item="a")
    assert [r["outcome"] for r in results] == ["failed", "passed"], results
    assert len(R.events(rd, "repair-dispatch", item="a")) == 1
    assert not R.events(rd, "run-stop")
    st = R.state(rd)
    assert (st.status, st.stopped) == ("completed", False)
    assert st.items["a"].repairs == 1


def test_graceful_check_point_racing_the_watchdog_keeps_the_requests_origin(tmp_path, reg):
    """Path: StopController.graceful_stop consumes a hard request under the lock that
    request() takes. A stopper lodges its request (origin `dashboard`), then signals; the
    engine's main thread, at a graceful check point, consumes the request while the
    watchdog, woken by that signal, asks for the stop too. Without the lock the watchdog
    finds the file gone and records a bare `signal`: red (seen in the dashboard's Resume
    test, where the stop lands as the new attempt passes its first check point)."""
    spec = R.write_spec(tmp_path / "spec.toml", provider=["true"])
    rd = RunDir.create(tmp_path / "run", spec)
    with Journal(rd.journal) as journal:
        ctl = StopController(rd, reg, journal)
        stop_request.lodge(rd, "hard", "dashboard")
        real_consume = ctl.consume
        watchdog = []

        def consume_then_signal():
            consumed = real_consume()
            if not watchdog:  # the signal's wake-up lands between the consume and the decision
                watchdog.append(threading.Thread(target=ctl.request, args=(Origin.SIGNAL,)))
                watchdog[0].start()
                watchdog[0].join(0.3)
            return consumed

        ctl.consume = consume_then_signal
        stop = ctl.graceful_stop("between-phases", item="a", phase="session")
        watchdog[0].join(5)
        assert not watchdog[0].is_alive()
        assert (stop.origin, stop.mode, ctl.origin) == (Origin.DASHBOARD, Mode.HARD, Origin.DASHBOARD)
        assert ctl.stopping and not rd.stop_request.exists()

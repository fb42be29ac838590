"""The engine's stop protocol against adversarial children: a hard stop in every phase
through both channels, stop-aware classification, graceful stops, PAUSE and backoff."""

import os
import signal
import time

import pytest
import runs

from runner import defaults
from runner.exitcodes import Exit
from runner.files import identity_file
from runner.proc import identity

KILL_GRACE = 0.3
BOUND = 5.0  # seconds, not the 7200 s the victim asked for; generous for a loaded CI box
PHASES = ["session", "post_session", "verify", "verify#2", "repair", "backoff", "post_run"]
# The provider of a repair-phase run: a quick session, a trapping repair session.
REPAIR_PROVIDER = 'if [ -z "$1" ]; then exit 0; fi; shift; exec "$@"'


def phase_spec(runs_fixture, phase, argv, channel, kill_grace=KILL_GRACE):
    """A spec whose `phase` runs `argv` (a trapping victim) and whose other phases are quick."""
    kw = dict(items=["a"], provider=["true"], stop={"kill_grace": kill_grace, "channel": channel, "grace": 10.0})
    if phase == "session":
        kw["provider"] = argv
    elif phase == "post_session":
        kw["post_session"] = [{"command": argv}]
    elif phase == "verify":
        kw["verify"] = [{"command": argv, "timeout": 1800}]
    elif phase == "verify#2":  # each verify command, not only the first
        kw["verify"] = [{"command": ["true"]}, {"command": argv, "timeout": 1800}]
    elif phase == "repair":
        kw["provider"] = runs.sh(REPAIR_PROVIDER, "{feedback}", *argv)
        kw["verify"] = [{"command": ["false"]}]
        kw["retry"] = {"backoff": 0}
    elif phase == "backoff":
        kw["verify"] = [{"command": ["false"]}]
        kw["retry"] = {"backoff": 600}
    elif phase == "post_run":
        kw["post_run"] = [{"command": argv}, {"command": ["true"]}]
    return runs_fixture.spec(**kw)


def assert_stopped_by_engine(rd, origin):
    stops = runs.events(rd, "run-stop")
    assert len(stops) == 1, stops
    assert stops[0]["origin"] == origin and stops[0]["fallback"] is False, stops[0]
    assert runs.events(rd, "teardown-complete")
    st = runs.state(rd)
    assert st.stopped and st.status == "stopped" and st.stop_origin == origin
    assert not runs.tagged(rd.run_id), "processes with the run's tag outlived the stop"
    assert not rd.is_live()


@pytest.mark.parametrize("channel", ["signal", "file"])
@pytest.mark.parametrize("phase", PHASES)
def test_hard_stop_lands_in_every_phase(runs, victim, stop_latency, phase, channel):
    """Path: `runner stop` -> engine teardown (SIGTERM handler or control-file watchdog ->
    registry.stop_all -> RunStopped at the next check point), in each phase, through each
    channel, against a child that traps SIGTERM. In the file channel no signal is sent
    before grace ends, so only the watchdog can honor it. Killed by the mutation that
    deletes the watchdog's kill of registered children (file channel)."""
    prepared = victim.prepare("trap-term")
    rd = runs.start(phase_spec(runs, phase, prepared.argv, channel))
    runs.wait_event(rd, "phase-start", phase=phase.split("#")[0])
    victims = [] if phase == "backoff" else [prepared.adopt(timeout=10)]
    engine = identity_file.read(rd.engine_identity)  # timed too: the stop ends when the engine is gone
    with stop_latency.measure(
        f"hard stop matrix / {channel} / {phase}", *victims, bound=BOUND, processes=[(engine.pid, engine.start_ticks)]
    ):
        proc = runs.runner("stop", "--run-dir", rd.path)
    assert proc.returncode == Exit.OK, proc.stderr
    runs.wait_engine_exit(rd)
    assert_stopped_by_engine(rd, channel)
    journal = runs.journal(rd)
    assert not [
        e
        for e in journal
        if e.get("outcome") == "failed"
        and e["event"] != "verify-result"
        or (e["event"] == "verify-result" and e.get("outcome") == "failed" and phase not in ("repair", "backoff"))
    ]
    if phase.startswith("verify"):
        assert [r["outcome"] for r in runs.events(rd, "verify-result")] == ["stopped"]
    if phase == "post_run":
        assert runs.events(rd, "hook-result", hook="post_run", index=0)[0]["outcome"] == "stopped"
        assert runs.events(rd, "hook-skipped", hook="post_run", index=1)


@pytest.mark.stop_latency(bound=BOUND, label="runner stop (signal) / trap-term provider")
def test_hard_stop_signal_channel_default_kill_grace(runs, victim, stop_latency):
    """Path: `runner stop` through the signal channel against a provider that traps
    SIGTERM, at the default kill_grace: honored by the engine's own teardown in about
    kill_grace plus a small overhead, never by the fallback."""
    prepared = victim.prepare("trap-term")
    rd = runs.start(runs.spec(provider=prepared.argv, stop={"channel": "signal"}))
    runs.wait_event(rd, "phase-start", phase="session")
    v = prepared.adopt(timeout=10)
    started = time.monotonic()
    with stop_latency.measure(None, v):
        proc = runs.runner("stop", "--run-dir", rd.path)
    assert proc.returncode == Exit.OK, proc.stderr
    assert time.monotonic() - started < defaults.STOP_GRACE  # the engine, not the fallback
    runs.wait_engine_exit(rd)
    assert_stopped_by_engine(rd, "signal")


@pytest.mark.stop_latency(bound=BOUND, label="runner stop (file) / long verify")
def test_file_channel_stop_during_long_verify_is_not_a_failure(runs, victim, stop_latency):
    """Path: the control-file watchdog kills a verify command that would run 1800 s, and
    classification reads the registry's record: the verify is stopped, not failed, and no
    repair session is dispatched. Killed by the mutation that deletes stop-awareness in
    classification (engine.py `outcome`), which journals a failed verify."""
    prepared = victim.prepare("trap-term")
    spec = runs.spec(
        provider=["true"],
        verify=[{"command": prepared.argv, "timeout": 1800}],
        stop={"channel": "file"},
        retry={"backoff": 0},
    )
    rd = runs.start(spec)
    runs.wait_event(rd, "phase-start", phase="verify")
    v = prepared.adopt(timeout=10)
    with stop_latency.measure(None, v):
        proc = runs.runner("stop", "--run-dir", rd.path)
    assert proc.returncode == Exit.OK, proc.stderr
    runs.wait_engine_exit(rd)
    assert_stopped_by_engine(rd, "file")
    results = runs.events(rd, "verify-result")
    assert [r["outcome"] for r in results] == ["stopped"], results
    assert not runs.events(rd, "repair-dispatch")
    assert not runs.events(rd, "item-failed")


def test_verify_killed_from_outside_is_a_failure_and_repairs(runs, victim):
    """Path: classification without a pending stop. A verify command killed by someone
    else (not the registry's stop) is a real failure and dispatches a repair session:
    stop-awareness must come from the registry's record, not from the return code."""
    prepared = victim.prepare("trap-term")
    spec = runs.spec(
        provider=["true"],
        verify=[{"command": prepared.argv, "timeout": 1800}],
        repair={"max_attempts": 1},
        retry={"backoff": 0},
        stop={"kill_grace": KILL_GRACE},
    )
    rd = runs.start(spec)
    runs.wait_event(rd, "phase-start", phase="verify")
    v = prepared.adopt(timeout=10)
    os.killpg(v.pgid, signal.SIGKILL)
    dispatch = runs.wait_event(rd, "repair-dispatch")
    assert dispatch["attempt"] == 1
    failed = runs.events(rd, "verify-result")[0]
    assert failed["outcome"] == "failed" and failed["rc"] == -signal.SIGKILL
    # The repair re-runs verify (the same victim command, a new process), so stop the run.
    proc = runs.runner("stop", "--now", "--run-dir", rd.path)
    assert proc.returncode == Exit.OK, proc.stderr


def test_graceful_stop_completes_the_phase_in_flight(runs, tmp_path):
    """Path: `runner stop --graceful` (a graceful request, read between phases): the
    session in flight completes, then the run stops before verify and before the next
    item; resumable."""
    gate = tmp_path / "gate"
    gate.write_text("")
    provider = runs_sh_gated(gate)
    rd = runs.start(
        runs.spec(items=["a", "b"], provider=provider, verify=[{"command": ["true"]}], stop={"kill_grace": KILL_GRACE})
    )
    runs.wait_event(rd, "session-start", item="a")
    proc = runs.runner("stop", "--graceful", "--run-dir", rd.path)
    assert proc.returncode == Exit.OK, proc.stderr
    time.sleep(0.3)
    assert rd.is_live(), "a graceful stop must let the session in flight finish"
    gate.unlink()
    runs.wait_engine_exit(rd)
    end = runs.events(rd, "session-end", item="a")[0]
    assert end["outcome"] == "passed"
    assert not runs.events(rd, "phase-start", phase="verify")
    assert not runs.events(rd, "session-start", item="b")
    stops = runs.events(rd, "run-stop")
    assert len(stops) == 1 and stops[0]["mode"] == "graceful" and stops[0]["fallback"] is False
    st = runs.state(rd)
    assert st.stopped and st.items["a"].session_done and st.items["b"].status == "pending"


def test_stop_file_worst_case_is_the_call_timeout(runs, victim):
    """Path: the STOP file during a provider call is read only between phases, so its
    worst case is call_timeout (plus hooks and verify), not "immediately". With a short
    call_timeout the trapping provider is cut at that timeout and the run then stops
    before the next item starts."""
    prepared = victim.prepare("trap-term")
    rd = runs.start(
        runs.spec(
            items=["a", "b"],
            provider=prepared.argv,
            call_timeout=1.5,
            verify=[{"command": ["true"]}],
            stop={"kill_grace": KILL_GRACE},
        )
    )
    runs.wait_event(rd, "phase-start", phase="session")
    prepared.adopt(timeout=10)
    started = time.monotonic()
    rd.stop_file.write_text("")
    runs.wait_engine_exit(rd, timeout=20)
    elapsed = time.monotonic() - started
    assert 1.0 < elapsed < 1.5 + KILL_GRACE + BOUND
    assert runs.events(rd, "call-timeout")
    assert not runs.events(rd, "session-start", item="b")
    stops = runs.events(rd, "run-stop")
    assert len(stops) == 1 and stops[0]["mode"] == "graceful"


@pytest.mark.stop_latency(bound=BOUND, label="STOP file / while paused")
def test_stop_file_while_paused(runs, stop_latency):
    """Path: the pause loop re-reads STOP every PAUSE_POLL: a paused run stops within
    about one poll. Killed by the mutation that deletes the STOP check in the pause loop
    (the run would stay paused forever)."""
    run_dir = runs.tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "PAUSE").write_text("")  # an operator file: paused from the first check point
    rd = runs.start(runs.spec(items=["a", "b"], provider=["true"]))
    runs.wait_event(rd, "paused")
    engine = identity_file.read(rd.engine_identity)
    with stop_latency.measure(None, processes=[(engine.pid, engine.start_ticks)]):
        rd.stop_file.write_text("")
        runs.wait_engine_exit(rd, timeout=BOUND)
    assert not identity.is_running(engine)
    stops = runs.events(rd, "run-stop")
    assert len(stops) == 1 and stops[0]["mode"] == "graceful"
    assert runs.events(rd, "graceful-stop")[0]["where"] == "paused"
    assert not runs.events(rd, "session-start")


@pytest.mark.stop_latency(bound=BOUND, label="STOP file / during backoff")
def test_stop_file_during_backoff(runs, stop_latency):
    """Path: the backoff re-reads STOP every BACKOFF_TICK: a run in a 600 s backoff stops
    within about one tick. Killed by the mutation that deletes the STOP check in the
    backoff (the run would wait out the backoff)."""
    rd = runs.start(runs.spec(provider=["true"], verify=[{"command": ["false"]}], retry={"backoff": 600}))
    runs.wait_event(rd, "phase-start", phase="backoff")
    engine = identity_file.read(rd.engine_identity)
    with stop_latency.measure(None, processes=[(engine.pid, engine.start_ticks)]):
        rd.stop_file.write_text("")
        runs.wait_engine_exit(rd, timeout=BOUND)
    stops = runs.events(rd, "run-stop")
    assert len(stops) == 1 and stops[0]["mode"] == "graceful"
    assert runs.events(rd, "graceful-stop")[0]["where"] == "backoff"
    assert not runs.events(rd, "repair-dispatch")


def runs_sh_gated(gate):
    """A provider that ignores SIGTERM and runs while `gate` exists."""
    return runs.sh('trap "" TERM; while [ -e "$1" ]; do sleep 0.02; done', str(gate))

"""One stop, every mode (issue 26): the stop-modes matrix, and the paths the stop
pipeline (control/stop.py) adds: the same reach in every mode, a killed session
classified by what was recorded, lock waits bounded behind a frozen stopper, the one
writer of the stop record, a stop that loses its run directory.

Real processes throughout: `runner` as `python -m runner`, the plugin's victim
programs and reliability/modes.py's own providers (their trees found by a marker in every
argv, so what dropped its environment is seen and killed whatever happens)."""

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest
import runs as R

from pytest_stoplatency.kit import zoo
from reliability import modes
from runner import defaults
from runner.engine import child
from runner.engine.registry import Registry
from runner.engine.stop_controller import StopController
from runner.events import Mode, Origin, StopKind
from runner.exitcodes import Exit
from runner.files import identity_file, stop_request
from runner.files.journal import Journal
from runner.files.rundir import RunDir
from runner.proc import cgroup as cgroupmod
from runner.proc import reaper

KILL_GRACE = modes.KILL_GRACE
NOW_WORST = StopKind.NOW.worst(kill_grace=KILL_GRACE)
"""`--now`'s DERIVED worst case at this kill grace, lock waits included (events.StopKind)."""
START_MARGIN = defaults.CONTAINER_GRACE_MARGIN
"""What a stopper's own start adds to a worst case (an interpreter's start on a busy
machine): the margin `runner bound --container` adds, not a figure of this test."""


def _cgroups_available():
    return cgroupmod.resolve_containment("auto") == "cgroup"


@pytest.fixture(scope="module")
def matrix_dashboard(tmp_path_factory):
    """One real `runner dashboard` for the dashboard modes of this module's cells."""
    dash = modes.Dashboard(tmp_path_factory.mktemp("dash") / "runs")
    yield dash
    dash.close()


@pytest.fixture
def matrix_work(tmp_path):
    """The trial's work directory; every tree it made is killed at teardown, whatever
    the test did."""
    yield tmp_path
    zoo.sweep(tmp_path / "trees")
    zoo.forget_records()


@pytest.mark.parametrize("containment", modes.CONTAINMENTS)
@pytest.mark.parametrize("victim", modes.VICTIMS)
@pytest.mark.parametrize("mode", modes.MODES)
def test_every_mode_keeps_the_same_promise(matrix_work, matrix_dashboard, mode, victim, containment):
    """Path: the stop pipeline (every way to stop a run, events.WAYS) against every
    victim in both containments: a documented exit code that is the mode's success,
    exit 0 only with nothing of the run alive, no session recorded failed, exactly one
    run-stop, and `runner resume` completes the run after. One trial per cell here;
    `make soak` runs many (reliability/modes.py). Ablations: `reach-in-rounds` (the
    env-scrubbed, escapee and subreaper cells of `--now` under group containment),
    `stop-lodges-first`, `killed-session-is-stopped` (their races, statistically)."""
    if containment == "cgroup" and not _cgroups_available():
        pytest.skip("no writable cgroup v2 hierarchy")
    trial = modes.cell(matrix_work, mode, victim, containment, dashboard=matrix_dashboard)
    assert not trial["problems"], trial


@pytest.mark.parametrize("containment", modes.CONTAINMENTS)
@pytest.mark.parametrize("mode", modes.MODES)
@pytest.mark.parametrize("shape", modes.SHAPES)
def test_every_mode_stops_every_shape(matrix_work, matrix_dashboard, shape, mode, containment):
    """Path: the stop pipeline in every mode and containment against issue 38's shapes
    (modes.SHAPES), each cell held to the matrix's invariants, and no cgroup of the run
    left after the stop: a process whose leader thread exited while another runs
    (liveness read from its threads, identity.stat; killed by its pid when cgroup.kill
    leaves it, RunCgroup.kill); a provider that starts an env-less setsid process every
    50 ms through the kill grace (the reach in rounds, reaper.kill_everything); cgroups
    a provider made below the run's (removed depth-first, RunCgroup.remove). Ablations:
    `threads-as-liveness`, `threads-as-liveness-cgroup`, `reach-in-rounds`,
    `sub-cgroups-removed`."""
    if containment == "cgroup" and not _cgroups_available():
        pytest.skip("no writable cgroup v2 hierarchy")
    trial = modes.cell(matrix_work, mode, shape, containment, dashboard=matrix_dashboard)
    assert not trial["problems"], trial


def _stop_within(runs, bound, *args):
    """`runner stop ARGS`, waited `bound` and no longer: past its worst case a stop has
    already failed, so an ablated bound fails here at once, not 30 s later."""
    t0 = time.monotonic()
    try:
        proc = runs.runner("stop", *args, timeout=bound)
    except subprocess.TimeoutExpired:
        pytest.fail(f"`runner stop {' '.join(map(str, args))}` still running after {bound:.2f} s, its worst case")
    return proc, time.monotonic() - t0


# -- the shared reach ------------------------------------------------------------------


@pytest.mark.parametrize("victim", ["env-scrubbed", "setsid-escapee", "subreaper"])
def test_now_reaches_what_the_hard_stop_reaches(runs, matrix_work, victim):
    """Path: Stop.kill's lineage (reaper.find_new, the engine a root of every round, the
    first included): under group containment (no cgroup), `runner stop --now` finds the
    run's calls as children of its proven engine and their descendants by parent links,
    so it kills what the engine's own stop kills: a provider that dropped its environment
    (its group's leader proves nothing), an env-less setsid escapee whose parent lives, a child subreaper's env-less
    setsid grandchildren. The engine is frozen first (SIGSTOP), so its own stop reaches
    nothing: what dies is the stopper's reach alone. Exit 0, nothing left. Ablation:
    `reach-in-rounds` (exit 0 with the tree alive: red)."""
    tree = modes.make_tree(victim, matrix_work / "trees", zoo.SLEEP)
    rd = runs.start(runs.spec(provider=tree.argv, stop={"kill_grace": KILL_GRACE, "containment": "group"}))
    tree.adopt(timeout=30)
    assert zoo.scan([tree])[tree], "the victim's tree never came up"
    os.kill(identity_file.read(rd.engine_identity).pid, signal.SIGSTOP)
    proc = runs.runner("stop", "--now", "--run-dir", rd.path)
    left = zoo.scan([tree])[tree]
    assert proc.returncode == Exit.OK, proc.stderr
    assert not left, f"exit 0 with {left} of the run alive"
    runs.wait_engine_exit(rd)


# -- a killed session is stopped, by what was recorded ---------------------------------


def _call_killed_from_outside(tmp_path, *, lodge):
    """A call run by the engine's own child runner (child.run_child) with a stop
    controller that is never started (no watchdog, no signal handler): once the call is
    registered, a hard request is lodged (`lodge`) and its group SIGTERMed from outside.
    Returns (the call's Result, the controller)."""
    spec = R.write_spec(tmp_path / "spec.toml", provider=["true"])
    rd = RunDir.create(tmp_path / "run", spec)
    rd.pin()
    run_id = R.new_run_id()
    registry = Registry(rd.children, run_id=run_id, kill_grace=0.2)
    with Journal(rd.journal) as journal:
        ctl = StopController(rd, registry, journal)

        def kill():
            deadline = time.monotonic() + 30
            while not registry.live():
                assert time.monotonic() < deadline
                time.sleep(0.005)
            (entry,) = registry.live()
            if lodge:
                stop_request.lodge(rd, Mode.HARD, Origin.SIGNAL)  # what every stopper does first
            os.killpg(entry.pgid, signal.SIGTERM)

        killer = threading.Thread(target=kill)
        killer.start()
        try:
            result = child.run_child(
                ["sleep", "60"],
                registry=registry,
                name="session",
                timeout=None,
                idle_timeout=None,
                env={**os.environ, "RUNNER_RUN_ID": run_id},
                output_path=rd.output / "out.log",
                cap_bytes=1024,
            )
        finally:
            killer.join(30)
            reaper.kill_tagged(run_id, 0.0)
    return result, ctl


def test_a_call_killed_while_a_hard_request_is_lodged_is_the_stops(tmp_path):
    """Path: StopController.claims, asked by child.run_child when a call's leader dies of
    a signal before anything started the stop. `--now` lodges its hard request before
    its first signal and then signals the call and the engine at once: the call may die
    before the engine's watchdog sees anything. Here the watchdog never runs, the request
    is lodged and the call's group SIGTERMed: the call is the stop's (Result.stopped),
    never a failure, and the stop has begun. Ablation: `killed-session-is-stopped` (red:
    stopped is False)."""
    result, ctl = _call_killed_from_outside(tmp_path, lodge=True)
    assert result.stopped, result
    assert ctl.stopping and ctl.origin == Origin.SIGNAL


def test_a_call_that_fails_with_no_stop_asked_is_a_failure(tmp_path):
    """Path: the other half of StopController.claims: a call killed from outside while
    no stop is asked (no request, no signal to the engine) is a failure, and no stop
    begins."""
    result, ctl = _call_killed_from_outside(tmp_path, lodge=False)
    assert not result.stopped and result.returncode == -signal.SIGTERM
    assert not ctl.stopping


def test_now_lodges_its_request_before_any_signal(runs, victim):
    """Path: Stop.ask, in every mode: `--now` writes its hard request before its first
    signal (the engine reads it when it classifies a call's death). With the engine
    frozen (SIGSTOP), nothing consumes it: after the stop it is still there, hard.
    Ablation: `stop-lodges-first` (red: no request)."""
    rd, _ = runs.live_trap_term(victim, stop={"kill_grace": KILL_GRACE})
    engine = identity_file.read(rd.engine_identity)
    os.kill(engine.pid, signal.SIGSTOP)
    proc = runs.runner("stop", "--now", "--run-dir", rd.path)
    assert proc.returncode == Exit.OK, proc.stderr
    pending = stop_request.peek(rd)
    assert pending is not None and pending.mode == Mode.HARD, pending
    runs.wait_engine_exit(rd)


# -- lock waits, bounded --------------------------------------------------------------


def test_a_second_now_behind_a_frozen_first_is_within_its_worst_case(runs, tmp_path):
    """Path: the stop pipeline takes no lock for its kill: a second `--now` never waits
    for a first one's kill. The first `--now` is SIGSTOPped once its SIGTERM has reached
    the provider (which says so in a file), the engine frozen too: the second returns
    within `--now`'s DERIVED worst case (StopKind.NOW, lock waits included) plus a
    stopper's start, exit 0, nothing of the run left, one run-stop. (Before, it waited
    out the first one's whole forced stop behind stop.lock.)"""
    got = tmp_path / "got-term"
    provider = R.sh('trap "echo >> \\"$1\\"" TERM; while :; do sleep 0.05; done', str(got))
    rd = runs.start(runs.spec(provider=provider, stop={"kill_grace": 1.0, "containment": "group"}))
    runs.wait_event(rd, "session-start")
    engine = identity_file.read(rd.engine_identity)
    first = subprocess.Popen(
        [*R.RUNNER, "stop", "--now", "--run-dir", str(rd.path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not got.exists():
            assert time.monotonic() < deadline, "the provider never had its SIGTERM"
            time.sleep(0.005)
        first.send_signal(signal.SIGSTOP)
        os.kill(engine.pid, signal.SIGSTOP)
        worst = StopKind.NOW.worst(kill_grace=1.0)
        second, elapsed = _stop_within(runs, worst + START_MARGIN, "--now", "--run-dir", rd.path)
        assert second.returncode == Exit.OK, second.stderr
        assert elapsed < worst + START_MARGIN, f"{elapsed:.2f}s behind a frozen first --now (worst case {worst}s)"
        assert not runs.tagged(rd.run_id)
        assert len(runs.events(rd, "run-stop")) == 1
    finally:
        first.kill()
        first.wait()


def test_a_frozen_recorder_holding_the_run_lock_bounds_the_next_stop(runs, victim):
    """Path: stop_record._recording_lock, waited LOCK_WAIT at most. The engine is dead;
    another process holds the run's lock (as a stopper frozen while it records would):
    `runner stop --now` kills everything, waits for the lock no longer than LOCK_WAIT,
    and exits NOT_RECORDED naming the holder; once it is gone, a plain `runner stop`
    records the stop. Ablation: `record-lock-bounded` (red: the stop waits forever)."""
    rd, v = runs.live_trap_term(victim, stop={"kill_grace": KILL_GRACE})
    engine = identity_file.read(rd.engine_identity)
    os.kill(engine.pid, signal.SIGKILL)
    runs.wait_engine_exit(rd)
    fd = os.open(rd.lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        worst = StopKind.NOW.worst(kill_grace=KILL_GRACE)
        proc, elapsed = _stop_within(runs, worst + START_MARGIN, "--now", "--run-dir", rd.path)
        assert proc.returncode == Exit.NOT_RECORDED, proc.stderr
        assert "holds the run's lock" in proc.stderr and f"pid {os.getpid()}" in proc.stderr, proc.stderr
        assert elapsed < worst + START_MARGIN
        assert v.wait_gone(5) and not runs.tagged(rd.run_id)
        assert not runs.events(rd, "run-stop")
    finally:
        os.close(fd)
    proc = runs.runner("stop", "--run-dir", rd.path)
    assert proc.returncode == Exit.OK, proc.stderr
    assert len(runs.events(rd, "run-stop")) == 1 and runs.state(rd).stopped


def test_a_frozen_lodger_holding_the_request_lock_bounds_the_next_stop(runs, victim):
    """Path: stop-request.lock, waited REQUEST_LOCK_WAIT at most (stop_request._Locked),
    by a stopper and by the engine's consume. A process holds it (as a stopper frozen
    while it lodges would): `runner stop` still reaches the engine by its signal, names
    the file, and the run stops; the engine's consume gives up on it too. Contention is
    not damage (issue 38.4): the stop exits OK, its line says another stopper holds the
    lock. Ablations: `request-lock-bounded` (red: the stopper and the engine wait
    forever), `lock-wait-is-not-damage` (red: DAMAGED after a complete, recorded stop)."""
    rd, v = runs.live_trap_term(victim, stop={"kill_grace": KILL_GRACE})
    fd = os.open(rd.stop_request_lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        worst = StopKind.HARD.worst(kill_grace=KILL_GRACE)
        proc, elapsed = _stop_within(runs, worst + START_MARGIN, "--run-dir", rd.path)
        assert proc.returncode == Exit.OK, proc.stderr
        said = proc.stderr + proc.stdout
        assert "stop-request.lock: another stopper holds it" in said and "damaged" not in said, said
        assert elapsed < worst + START_MARGIN
        assert v.wait_gone(5)
    finally:
        os.close(fd)
    runs.wait_engine_exit(rd)
    assert len(runs.events(rd, "run-stop")) == 1 and runs.state(rd).stopped


def test_now_behind_a_held_request_lock_is_not_damaged(runs, victim):
    """Path: Stop.ask's RequestLockHeld (issue 38.4), for `--now`: another process holds
    stop-request.lock past REQUEST_LOCK_WAIT; the `--now` kills everything, records the
    stop, exits OK (never DAMAGED) and says on a line of its own that another stopper
    holds the lock. Ablation: `lock-wait-is-not-damage` (DAMAGED: red)."""
    rd, v = runs.live_trap_term(victim, stop={"kill_grace": KILL_GRACE})
    fd = os.open(rd.stop_request_lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        proc, _ = _stop_within(runs, NOW_WORST + START_MARGIN, "--now", "--run-dir", rd.path)
    finally:
        os.close(fd)
    said = proc.stderr + proc.stdout
    assert proc.returncode == Exit.OK, said
    assert "another stopper holds it" in said and "damaged" not in said, said
    assert v.wait_gone(5) and not runs.tagged(rd.run_id)
    runs.wait_engine_exit(rd)
    assert len(runs.events(rd, "run-stop")) == 1 and runs.state(rd).stopped


# -- a stop that loses its run directory ------------------------------------------------


@pytest.mark.parametrize("flags", [[], ["--now"], ["--graceful", "--wait"]], ids=["hard", "now", "graceful-wait"])
def test_rm_rf_during_a_stop_finishes_the_kill_and_says_so(runs, tmp_path, flags):
    """Path: the pipeline's record step and `wait` when the run directory is removed
    while the stop is under way (issue 27.1): the kill is finished, the command exits
    with its documented code (0, or STOPPED for `--graceful --wait`) and one line saying
    the directory is gone and nothing could be recorded; nothing of the run is left.
    The `rm -rf` is driven by an event: the provider traps SIGTERM, says so in a file
    outside the run directory, and the directory is removed then."""
    got = tmp_path / "got-term"
    graceful = "--graceful" in flags
    script = 'trap "echo >> \\"$1\\"" TERM; i=0; while [ $i -lt 40 ]; do sleep 0.05; i=$((i+1)); done'
    if not graceful:
        script = 'trap "echo >> \\"$1\\"" TERM; while :; do sleep 0.05; done'
    rd = runs.start(runs.spec(provider=R.sh(script, str(got)), stop={"kill_grace": 1.0}))
    runs.wait_event(rd, "session-start")
    run_id, key = rd.run_id, rd.key(rd.run_id)
    stopper = subprocess.Popen(
        [*R.RUNNER, "stop", *flags, "--run-dir", str(rd.path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        if graceful:
            while not runs.events(rd, "graceful-stop") and not rd.stop_request.exists():
                assert time.monotonic() < deadline
                time.sleep(0.005)
        else:
            while not got.exists():
                assert time.monotonic() < deadline, "the provider never had its SIGTERM"
                time.sleep(0.005)
        shutil.rmtree(rd.path, ignore_errors=True)
        out, err = stopper.communicate(timeout=60)
    finally:
        if stopper.poll() is None:
            stopper.kill()
            stopper.wait()
    expected = Exit.STOPPED if graceful else Exit.OK
    assert stopper.returncode == expected, (stopper.returncode, out, err)
    lines = [line for line in (out + err).splitlines() if line.strip()]
    assert any("is gone" in line and "nothing could be recorded" in line for line in lines), lines
    deadline = time.monotonic() + KILL_GRACE + 5
    while R.tagged(key) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not R.tagged(key), f"run {run_id}: processes left after its directory went away"


def test_one_writer_appends_run_stop():
    """Path: files/stopped.record_stop is the one writer of `run-stop`: no other module
    of runner/ spells Event.RUN_STOP in a journal append (the engine, the stoppers and
    `resume` all record through it)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "runner"
    writers = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "append":
                if node.args and ast.unparse(node.args[0]) == "Event.RUN_STOP":
                    writers.append(str(path.relative_to(root)))
    assert writers == ["files/stopped.py"], writers


@pytest.mark.skipif(sys.platform != "linux", reason="Linux only")
def test_worst_cases_name_their_lock_waits():
    """Unit: every stopper kind's DERIVED worst case holds the lock waits it can make
    (the request's lodge, the record's lock), and the hard stop's is `runner bound`'s."""
    for kind in (StopKind.HARD, StopKind.NOW):
        names = [n for n, _ in kind.worst_case()]
        assert "REQUEST_LOCK_WAIT" in names and "LOCK_WAIT" in names, names
    assert "REQUEST_LOCK_WAIT" in [n for n, _ in StopKind.GRACEFUL.worst_case()]


def test_a_hard_stop_never_exits_0_over_what_its_engine_left(runs, tmp_path, frozen_cgroup):
    """Path: the pipeline's confirm step (Stop._confirm). The provider's child is in
    uninterruptible sleep (a cgroup v1 freezer: a SIGKILL stays pending): the engine's own
    stop kills the provider, cannot kill the child, journals it `unkillable`, records the
    stop and exits within the grace. The hard stop reads that and its own kill names the
    pid: UNKILLABLE, never "stopped by its engine" with exit 0. Ablation:
    `confirm-kills-what-the-engine-left` (exit 0 with the process alive: red)."""
    pidfile = tmp_path / "child.pid"
    provider = R.sh('sleep 7200 & echo $! > "$1"; trap "" TERM; wait', str(pidfile))
    rd = runs.start(runs.spec(provider=provider, stop={"kill_grace": 0.3, "grace": 30.0}))
    deadline = time.monotonic() + 30
    while not pidfile.exists() or not pidfile.read_text().strip():
        assert time.monotonic() < deadline, "the provider never started its child"
        time.sleep(0.01)
    pid = int(pidfile.read_text())
    runs.freeze(frozen_cgroup, pid)
    try:
        proc = runs.runner("stop", "--run-dir", rd.path)
        assert proc.returncode == Exit.UNKILLABLE, (proc.returncode, proc.stdout, proc.stderr)
        assert str(pid) in proc.stderr, proc.stderr
        assert runs.events(rd, "unkillable"), "the engine's own stop did not journal it"
        assert runs.events(rd, "run-stop", forced=False), "the engine did not record its own stop"
    finally:
        (frozen_cgroup / "freezer.state").write_text("THAWED\n")  # the pending SIGKILL lands
    runs.wait_engine_exit(rd)
    again = runs.runner("stop", "--now", "--run-dir", rd.path)  # nothing left: the cgroup goes
    assert again.returncode == Exit.NO_LIVE_RUN, again.stderr
    assert not runs.tagged(rd.run_id)

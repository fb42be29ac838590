"""A stop is total under faults (issue 18, parts 3 to 5; issue 21's PID 1): a stopper
killed or interrupted at any moment, a fork storm without a cgroup, a SIGTERM in the
first instants of `runner run` (in the foreground, and as PID 1 of a pid namespace),
and a process the engine adopted but cannot prove the run's.

Real processes throughout: `runner` as `python -m runner`, and the hostile trials of
reliability/faults.py (the soak runs the same trials, more of them)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reliability import faults
from runner import defaults
from runner.control import leftovers, stop, stop_record
from runner.errors import NoLiveRun
from runner.exitcodes import INTERRUPTED_LINE, Exit
from runner.files import identity_file
from runner.files.rundir import RunDir
from runner.files.spec import load as load_spec
from runner.files.state import StateStore
from runner.proc import identity, reaper, signals
from runner.views import status

# A trial waits for the engine's start and the hard stop's worst case (DERIVED), which
# together outlast the suite's 90 s default on a loaded machine.
pytestmark = pytest.mark.timeout(180)

KILL_GRACE = 0.5
RUN_STATES = ("start-up", "loading", "run-dir", "engine-started", "in-call")
"""Where a SIGTERM to `runner run` lands, each reached on purpose, not at a time:
- start-up: sent as soon as the command is started, mostly in the interpreter's own
  start-up, before the runner's first instruction (racy by nature: only what is
  documented for it is asserted);
- loading: while its modules load, after its first instruction (held there:
  faults.HOLD_WHILE_LOADING);
- run-dir: the instant its run directory exists;
- engine-started: once its engine has written its identity (engine.json);
- in-call: once the engine is idle in its provider call (runs.wait_in_call)."""


def _assert_trials(trials, *, allow_no_live=True):
    figures = faults.tally(trials)
    assert not figures["problems"], figures
    assert figures["runs_left_running"] == 0, trials
    assert figures["processes_left"] == 0, trials
    assert figures["exit0_with_something_left"] == 0, trials
    assert figures["stops_not_recorded"] == 0, trials
    for t in trials:
        # NO_LIVE_RUN only where nothing of the run lived and its end was recorded: a
        # run whose processes lived is never answered "no live run".
        assert t["code"] in (Exit.OK, Exit.NO_LIVE_RUN), t
        if t["code"] == Exit.NO_LIVE_RUN:
            assert "nothing of the run alive" in t["err"], t
    return figures


@pytest.mark.parametrize("state", faults.STOPPER_STATES)
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT, signal.SIGTERM], ids=["sigkill", "sigint", "sigterm"])
def test_interrupted_stopper_then_plain_stop_is_total(tmp_path, sig, state):
    """Path: a stopper (`--now`, then plain) SIGKILLed, SIGINTed or SIGTERMed once it has
    reached a state (faults.STOPPER_STATES: its start-up, while its modules load, once the
    run's provider got the stop's SIGTERM, once the provider is gone), then a plain
    `runner stop`: every process of the run gone, the run not live, the stop recorded in
    state.json and the journal, every exit code documented; the interrupted stopper
    exits INTERRUPTED (15) or its own finished code, never STOPPED, except in the
    interpreter's own start-up, where what is documented for it (docs/exit-codes.md) is
    all that is excused. `make soak` sends the signal at random moments instead.
    Ablation: `stop-total-dead-engine` (a dead engine answered NO_LIVE_RUN whatever
    lives) turns it red."""
    trials = faults.interrupted_stopper(tmp_path, 2, sig, kill_grace=KILL_GRACE, state=state)
    _assert_trials(trials)
    for t in trials:
        assert t["reached"], t
        if sig == signal.SIGKILL:
            continue
        if t["before_first_instruction"] and faults.died_in_interpreter_start_up(t["first"], t["first_err"]):
            continue  # documented for a signal before the runner's first instruction
        assert t["first"] in (Exit.INTERRUPTED, Exit.OK), t
        if state == "loading":
            assert t["first"] == Exit.INTERRUPTED, t  # held before it did anything: it cannot have finished


def _with_a_dead_engine(runs, **start):
    """A run whose engine was SIGKILLed (no stop recorded) while its trapping provider
    and the provider's two children live on."""
    rd = runs.start(runs.spec(provider=faults.sh(faults.TRAP_TREE), stop={"kill_grace": KILL_GRACE}), **start)
    assert faults.wait_children(rd)
    engine = identity_file.read(rd.engine_identity)
    deadline = time.monotonic() + 10
    while len(runs.tagged(rd.run_id)) < 4:  # the engine, the provider and its two children
        assert time.monotonic() < deadline, runs.tagged(rd.run_id)
        time.sleep(0.01)
    os.kill(engine.pid, signal.SIGKILL)
    assert signals.wait_gone(engine, 10)
    assert len(runs.tagged(rd.run_id)) == 3
    return rd


def test_plain_stop_after_a_dead_engine_kills_and_records(runs, tmp_path):
    """Path: the engine is SIGKILLed (no stop recorded, its trapping provider and two
    children alive): a plain `runner stop` kills them and records the stop, exit OK;
    a second plain stop then finds nothing and says so (NO_LIVE_RUN). Ablation:
    `stop-total-dead-engine` (NO_LIVE_RUN at once for a dead engine) turns it red."""
    rd = _with_a_dead_engine(runs)
    proc = runs.runner("stop", "--run-dir", rd.path)
    assert proc.returncode == Exit.OK, proc.stderr
    assert "its engine was dead" in proc.stdout, proc.stdout
    assert not runs.tagged(rd.run_id)
    assert faults.recorded(rd)
    again = runs.runner("stop", "--run-dir", rd.path)
    assert again.returncode == Exit.NO_LIVE_RUN, again.stderr
    assert len(runs.events(rd, "run-stop")) == 1


@pytest.mark.parametrize("mode", [[], ["--now"], ["--graceful"]], ids=["hard", "now", "graceful"])
def test_stop_all_ends_what_a_dead_engine_left(runs, mode):
    """Path: stop_all._left_behind. A run whose engine was SIGKILLed while its
    trapping provider and two children live holds no lock: `runner stop --all` (any
    mode) used to pass it over and exit NO_LIVE_RUN with three processes of the run
    alive. It ends them and records the stop, as a plain `runner stop` of the run
    would, and leaves a finished run beside it untouched. Ablation:
    `stop-all-left-behind` turns it red."""
    done = runs.start(runs.spec(provider=["true"]), name="done")
    assert runs.runner("wait", "--run-dir", done.path).returncode == Exit.OK
    rd = _with_a_dead_engine(runs, name="crashed")
    proc = runs.runner("stop", "--all", *mode, "--runs-dir", runs.tmp_path)
    assert proc.returncode == Exit.OK, proc.stderr
    assert not runs.tagged(rd.run_id), "processes of the run outlived `stop --all`"
    assert faults.recorded(rd)
    assert runs.events(done, "run-stop") == [] and not runs.state(done).stopped


def test_forced_record_is_never_half_written_by_an_interrupt(runs, monkeypatch):
    """Path: a stopper that records a forced stop gets SIGINT right after state.json says
    stopped and before its run-stop is journaled: the interrupt waits until both are
    written (signals blocked around the record). Ablation: `record-uninterrupted` (no
    block) leaves state.json stopped/forced with no run-stop: red."""
    rd = runs.start(runs.spec(provider=faults.sh(faults.TRAP_TREE), stop={"kill_grace": KILL_GRACE}))
    assert faults.wait_children(rd)
    engine = identity_file.read(rd.engine_identity)
    os.kill(engine.pid, signal.SIGKILL)
    assert signals.wait_gone(engine, 10)
    leftovers.kill_leftovers(rd, KILL_GRACE)
    real_save = StateStore.save

    def save_then_interrupt(self, state):
        real_save(self, state)
        os.kill(os.getpid(), signal.SIGINT)  # the real signal, at the worst moment

    monkeypatch.setattr(StateStore, "save", save_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        stop_record.record_forced_stop(rd, reaper.ReapReport(), fallback=False)
    monkeypatch.undo()
    assert faults.recorded(rd), "state.json and the journal disagree about the stop"
    with pytest.raises(NoLiveRun):  # nothing left, the end recorded; the dead engine's cgroup goes too
        stop.stop_now(rd, KILL_GRACE)


def test_fork_storm_exit_zero_only_with_nothing_left(tmp_path):
    """Path: a fork storm (every process ignores SIGTERM, setsid's each child and forks
    again; at most 300 alive; each ends by itself within 30 s) under group containment
    (no cgroup): `runner stop --now` exits 0 only with nothing of the run left (the kill
    rounds repeat until one finds nothing new), else a documented code naming the pids.
    Ablation: `kill-rounds-repeat` (one KILL round) leaves processes behind an exit 0:
    red."""
    trials = faults.fork_storm(tmp_path, 2, cap=300, seconds=30.0, kill_grace=KILL_GRACE)
    figures = faults.tally(trials, ("code",))
    assert not figures["problems"], figures
    assert figures["exit0_with_something_left"] == 0, trials
    for t in trials:
        assert t["grown"] >= 100, t  # the storm was a storm when the stop came
        assert t["code"] in (Exit.OK, Exit.LEFT_RUNNING), t
        if t["code"] == Exit.OK:
            assert t["left_at_exit"] == 0, t
    assert figures["processes_left"] == 0, trials


def test_unkillable_only_in_uninterruptible_sleep(runs, procs, frozen_cgroup):
    """Path: a stop's survivors are sorted by what the kernel shows: a process in state D
    (frozen by the cgroup v1 freezer) is unkillable; a living process in any other state
    (here a plain sleep, state S) is left running, never called unkillable. Ablation:
    `d-state-check` (every survivor unkillable) turns it red."""
    sleeper = procs(["sleep", "60"])
    frozen = procs(["sleep", "60"])
    try:
        runs.freeze(frozen_cgroup, frozen.pid)
        unkillable, left_running = reaper.classify([sleeper.pid, frozen.pid])
        assert unkillable == [frozen.pid]
        assert left_running == [sleeper.pid]
    finally:
        frozen.kill()  # pending until the fixture thaws the freezer


ORPHAN_REAPED = 10.0
"""How long a dead orphan may stay a zombie under the init: the init reaps every
FOREGROUND_POLL (0.05 s, DERIVED); this is only a wait for that event on a busy machine.
Without the reaping (pid1-reaps) it stays a zombie for good."""


def _children_named(pid, cmdline):
    """The children of `pid` whose /proc cmdline is `cmdline`."""
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        kids = [int(c) for c in f.read().split()]
    out = []
    for kid in kids:
        try:
            with open(f"/proc/{kid}/cmdline", "rb") as f:
                if f.read() == cmdline:
                    out.append(kid)
        except OSError:
            pass
    return out


def _zombies_of(pid):
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = identity.stat(int(entry))
            if st is not None and st.ppid == pid and st.zombie:
                out.append(st.pid)
    return out


@pytest.mark.parametrize("flags", [[], ["--now"]], ids=["hard", "now"])
def test_an_escapee_the_engine_adopted_is_killed(runs, flags):
    """Path: the kill rounds' lineage of the engine (reaper.find_new, the engine a root of
    its own stop's rounds and of a stopper's), beside Registry.adopted: under cgroup
    containment a call double-forks a process that leaves the run's cgroup (root may)
    and drops the run's tag. The engine, a child subreaper, adopts it: the kernel
    re-parents to it only what descended from it, so it is the run's (Proof.KNOWN, the
    engine's own child) whatever its tag or cgroup, and the stop, hard or `--now`, kills
    it: exit 0 and it is gone. A survivor of `adopted-are-known` (the rounds reach it
    too); that ablation's killer is the call's end below."""
    from runner.proc import cgroup as cgroupmod

    if cgroupmod.resolve_containment("auto") != "cgroup":
        pytest.skip("no writable cgroup v2 hierarchy")
    with open("/proc/mounts") as f:
        root = next(line.split()[1] for line in f if line.split()[2] == "cgroup2")
    escape = (
        # Forked after the call's first snapshot, its parent gone at once: the engine
        # never saw it as a descendant of its call, only as its own adopted child.
        f'(sleep 0.3; sh -c "echo \\$\\$ > {root}/cgroup.procs && exec setsid env -i sleep 7213" &) & '
        'trap "" TERM; exec sleep 7200'
    )
    rd = runs.start(runs.spec(provider=faults.sh(escape), stop={"kill_grace": KILL_GRACE, "containment": "cgroup"}))
    assert faults.wait_children(rd)
    escapee = None
    deadline = time.monotonic() + 10
    while escapee is None and time.monotonic() < deadline:
        for entry in os.listdir("/proc"):
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if f.read() == b"sleep\x007213\x00":
                        escapee = int(entry)
            except (OSError, ValueError):
                continue
        time.sleep(0.02)
    assert escapee is not None
    ticks = identity.stat(escapee).start_ticks
    try:
        proc = runs.runner("stop", *flags, "--run-dir", rd.path)
        assert proc.returncode == Exit.OK, proc.stderr
        st = identity.stat(escapee)
        assert st is None or st.zombie or st.start_ticks != ticks, "the adopted escapee outlived an exit 0"
    finally:
        st = identity.stat(escapee)
        if st is not None and st.start_ticks == ticks:
            os.kill(escapee, signal.SIGKILL)


def test_an_escapee_the_engine_adopted_is_killed_when_its_call_ends(runs, tmp_path):
    """Path: Registry.adopted at a call's end (child._kill_tree) and the run's clean-up
    (phases._kill_adopted), where no stop's rounds run: a call double-forks a process that
    leaves the run's cgroup (root may) and drops the run's tag, then exits 0 once that
    process is up (its marker file: an event). The engine, a child subreaper, adopted it:
    the run's by the kernel's word, killed when the call ends, never left behind a
    completed run. Ablation: `adopted-are-known` (it outlives the run: red)."""
    from runner.proc import cgroup as cgroupmod

    if cgroupmod.resolve_containment("auto") != "cgroup":
        pytest.skip("no writable cgroup v2 hierarchy")
    with open("/proc/mounts") as f:
        root = next(line.split()[1] for line in f if line.split()[2] == "cgroup2")
    mark = tmp_path / "escaped"
    escape = (
        f'(sh -c "echo \\$\\$ > {root}/cgroup.procs && touch {mark} && exec setsid env -i sleep 7214" &) & '
        f"while [ ! -e {mark} ]; do sleep 0.01; done; exit 0"
    )
    rd = runs.start(runs.spec(provider=faults.sh(escape), stop={"kill_grace": KILL_GRACE, "containment": "cgroup"}))
    try:
        runs.wait_event(rd, "run-complete", timeout=60)
        runs.wait_engine_exit(rd)
        assert mark.exists(), "the escapee never started: nothing was proven"
        assert _living(b"sleep\x007214\x00") == [], "the adopted escapee outlived its call and the run"
    finally:
        for pid in _living(b"sleep\x007214\x00"):
            os.kill(pid, signal.SIGKILL)


def _living(cmdline):
    """Pids of the living (not zombie) processes whose command line is `cmdline`."""
    out = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if f.read() != cmdline:
                    continue
        except (OSError, ValueError):
            continue
        st = identity.stat(int(entry))
        if st is not None and not st.zombie:
            out.append(st.pid)
    return out


# -- a SIGTERM in the first instants ------------------------------------------------------


def _provider_spec(runs, name):
    return runs.spec(name=f"{name}.toml", provider=faults.sh(faults.TRAP_TREE), stop={"kill_grace": KILL_GRACE})


def _stopped_in_bound(runs, rd, spec, sent_wall, ended):
    """The stop took at most the spec's hard worst case (StopSpec.hard_worst_case: grace +
    kill_grace + CONFIRM_TIMEOUT, DERIVED, what docs/stop-latency.md states for a SIGTERM
    to `runner run`) from the later of the signal and the engine's run-start (a signal
    before the engine is up waits for it). Its exact speed is `make soak`'s figure."""
    starts = runs.events(rd, "run-start")
    start = starts[0]["t"] if starts else None
    began = max(sent_wall, start) if start is not None else sent_wall
    bound = load_spec(spec).stop.hard_worst_case
    return ended - began <= bound, (ended - began, bound)


def _communicate(proc, spec):
    """The command's end, waited for up to the engine's start (ENGINE_START_TIMEOUT) plus
    the hard stop's worst case: a signal that was lost leaves the run going on."""
    try:
        _, err = proc.communicate(timeout=defaults.ENGINE_START_TIMEOUT + load_spec(spec).stop.hard_worst_case)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError("the SIGTERM was not honoured: the run went on") from None
    return err, time.time()


def _reach(runs, state, proc, rd, hold):
    """Wait until `runner run` (proc) has reached `state` (RUN_STATES)."""
    if state == "loading":
        assert faults.await_file(hold, proc), "the command never reached its modules' loading"
    elif state == "run-dir":
        deadline = time.monotonic() + defaults.ENGINE_START_TIMEOUT
        while not rd.path.exists():
            assert time.monotonic() < deadline and proc.poll() is None, "the run directory was never made"
            time.sleep(0.0005)
    elif state == "engine-started":
        runs.wait_file(rd.engine_identity, timeout=defaults.ENGINE_START_TIMEOUT)
    elif state == "in-call":
        runs.wait_in_call(rd)


def test_the_tally_excuses_only_what_ended_before_the_first_instruction():
    """Unit: faults.tally excuses a stopper's exit 1 with the interpreter's
    KeyboardInterrupt (a SIGINT in its own start-up; a CI trial) and a death by SIGTERM
    or SIGINT (sent before the interpreter installed its own SIGINT handler: 2 of 2
    trials sent as the stopper started, on a quiet machine) only where the signal was
    sent before the runner's first instruction; the same exits afterwards, or exit 1 of
    another error, or a death by another signal, are problems."""
    err = 'File "<frozen io>", line 94, in <module>\nKeyboardInterrupt'
    trial = {"trial": "t", "code": Exit.OK, "first": 1, "first_err": err, "before_first_instruction": True}
    assert faults.tally([trial])["problems"] == []
    assert faults.tally([{**trial, "first": -signal.SIGTERM}])["problems"] == []
    assert faults.tally([{**trial, "first": -signal.SIGINT, "first_err": ""}])["problems"] == []
    assert faults.tally([{**trial, "before_first_instruction": False}])["problems"]
    assert faults.tally([{**trial, "first": -signal.SIGINT, "before_first_instruction": False}])["problems"]
    assert faults.tally([{**trial, "first_err": "Traceback ...\nValueError: x"}])["problems"]
    assert faults.tally([{**trial, "first": -signal.SIGHUP}])["problems"]


# A sitecustomize (on PYTHONPATH) that sends the command a real SIGINT as it begins to
# import runner.errors, the first module runner.cli loads: a Ctrl-C while its modules load.
SIGINT_WHILE_LOADING = """
import os, signal, sys


class _InterruptAt:
    def find_spec(self, name, path=None, target=None):
        if name == "runner.errors":
            os.kill(os.getpid(), signal.SIGINT)
        return None


sys.meta_path.insert(0, _InterruptAt())
"""


@pytest.mark.parametrize("how", ["python -m runner", "runner"])
def test_sigint_while_the_command_loads_is_one_line_and_interrupted(tmp_path, how):
    """Path: runner/__main__.entry, for `python -m runner` and the installed `runner`
    command (pyproject's entry point). A SIGINT that lands while runner.cli is still
    being imported, before main's own handler exists: exit INTERRUPTED and its one
    line, never Python's traceback and exit 1 (which the exit codes never use). A
    stopper interrupted so in a CI trial exited 1. Without the SIGINT the same command
    exits NO_LIVE_RUN, so the signal did land."""
    (tmp_path / "sitecustomize.py").write_text(SIGINT_WHILE_LOADING)
    argv = [sys.executable, "-m", "runner"] if how != "runner" else [str(Path(sys.executable).parent / "runner")]
    argv += ["stop", "--run-dir", str(tmp_path / "no-run")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert proc.returncode == Exit.INTERRUPTED, (proc.returncode, proc.stderr)
    assert proc.stderr.strip() == INTERRUPTED_LINE, proc.stderr
    plain = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert plain.returncode == Exit.NO_LIVE_RUN, (plain.returncode, plain.stderr)


def _foreground(runs, spec, name, state):
    """`runner run` in the foreground, held while its modules load for that state."""
    hold = runs.tmp_path / f"{name}.hold"
    argv, env = faults.held_while_loading(hold) if state == "loading" else (runs.RUNNER, None)
    run_dir = runs.tmp_path / name
    runs.started.append(run_dir)
    pipe = subprocess.PIPE
    proc = subprocess.Popen(
        [*argv, "run", str(spec), "--run-dir", str(run_dir)],
        stdin=subprocess.DEVNULL,
        stdout=pipe,
        stderr=pipe,
        text=True,
        env=env,
    )
    return proc, RunDir(run_dir), hold


def _assert_stopped(runs, rd, spec, proc, err, sent, ended):
    """Exit STOPPED, the engine gone, nothing tagged left, the stop recorded, within the
    spec's hard worst case of the later of the signal and the engine's start."""
    assert proc.returncode == Exit.STOPPED, (proc.returncode, err)
    runs.wait_engine_exit(rd)
    assert not runs.tagged(rd.run_id)
    assert faults.recorded(rd)
    ok, took = _stopped_in_bound(runs, rd, spec, sent, ended)
    assert ok, f"stopped {took[0]:.3f}s after the signal (or the engine's start), bound {took[1]:.3f}s"


@pytest.mark.parametrize("state", RUN_STATES)
def test_sigterm_to_foreground_run_at_each_state(runs, state):
    """Path: SIGTERM to a foreground `runner run` at each of RUN_STATES: the early mask
    (cli.early_signals) holds it from the command's first instruction until its handlers
    (lifecycle._foreground, once the engine is up) forward it: the run is stopped (exit
    STOPPED, stop recorded, nothing of it left). Only a signal in the interpreter's own
    start-up, before any runner code, may end the command instead, with nothing started
    (no run directory; docs/exit-codes.md). Never the foreground dead with its engine
    going on. Ablation: `early-signal-mask` (no mask before the handlers) turns
    [loading] and [run-dir] red (killed by the signal, -15)."""
    spec = _provider_spec(runs, "fg")
    proc, rd, hold = _foreground(runs, spec, "fg", state)
    try:
        _reach(runs, state, proc, rd, hold)
        sent = time.time()
        proc.send_signal(signal.SIGTERM)
    finally:
        hold.unlink(missing_ok=True)
    err, ended = _communicate(proc, spec)
    if state == "start-up" and proc.returncode == -signal.SIGTERM:
        # Only in the interpreter's start-up, before the command's first instruction:
        # then it had not even made the run directory (RunDir.create comes later).
        assert not rd.path.exists(), f"killed by the SIGTERM after it had started the run: {err}"
        return
    _assert_stopped(runs, rd, spec, proc, err, sent, ended)


def _as_pid1(runs, name, state="start-up"):
    if os.geteuid() != 0:
        pytest.skip("unshare --pid needs root")
    spec = _provider_spec(runs, name)
    hold = runs.tmp_path / f"{name}.hold"
    argv, env = faults.held_while_loading(hold) if state == "loading" else (runs.RUNNER, None)
    run_dir = runs.tmp_path / name
    runs.started.append(run_dir)
    argv = ["unshare", "--pid", "--fork", "--mount-proc", *argv, "run", str(spec), "--run-dir", str(run_dir)]
    pipe = subprocess.PIPE
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=pipe, stderr=pipe, text=True, env=env)
    return proc, RunDir(run_dir), spec, hold


@pytest.mark.parametrize("state", RUN_STATES)
def test_sigterm_to_pid1_at_each_state(runs, state):
    """Path: `runner run` as PID 1 of a pid namespace (unshare --pid --fork
    --mount-proc; what a container's entrypoint is) gets SIGTERM, what `docker stop` or a
    pod deletion sends, at each of RUN_STATES: the run stops within the spec's hard
    worst case of the later of the signal and the engine's start, exits STOPPED, records
    the stop, and nothing of the namespace is left. Before the runner's first
    instruction (unshare's fork, the interpreter's own start-up), the kernel drops an
    init's SIGTERM
    (docs/exit-codes.md; no Python code can be earlier): a signal sent then is followed,
    as a runtime would, by another once the mask is in place. Ablation:
    `early-signal-mask` (a SIGTERM before the handler is dropped by the kernel for an
    init: the run goes on) turns [run-dir] red."""
    proc, rd, spec, hold = _as_pid1(runs, "pid1", state)
    try:
        init = faults._init_of(proc.pid)
        _reach(runs, state, proc, rd, hold)
        sent = time.time()
        dropped = not faults.stop_signals_blocked(init)
        os.kill(init, signal.SIGTERM)
    finally:
        hold.unlink(missing_ok=True)
    if dropped:
        assert state == "start-up", f"no mask yet at {state}"
        faults.await_mask(init, timeout=defaults.ENGINE_START_TIMEOUT)
        assert faults.stop_signals_blocked(init), "no mask within the time an engine's start is given"
        sent = time.time()
        os.kill(init, signal.SIGTERM)
    err, ended = _communicate(proc, spec)
    assert proc.returncode == Exit.STOPPED, (proc.returncode, err)
    assert identity.stat(init) is None  # the namespace went with its init
    assert not runs.tagged(rd.run_id)
    assert faults.recorded(rd)
    ok, took = _stopped_in_bound(runs, rd, spec, sent, ended)
    assert ok, f"stopped {took[0]:.3f}s after the signal (or the engine's start), bound {took[1]:.3f}s"


def test_pid1_reaps_every_zombie_and_sigkill_leaves_it_resumable(runs):
    """Path: as PID 1, an orphan of the namespace (a process entered with nsenter whose
    parent exits) is adopted by the runner and reaped once it dies, no zombie left; a
    SIGKILL of the init takes the namespace down and leaves the run resumable (crashed,
    `runner resume` accepts it). Ablation: `pid1-reaps` leaves the zombie: red."""
    proc, rd, _spec, _hold = _as_pid1(runs, "pid1-kill")
    init = faults._init_of(proc.pid)
    deadline = time.monotonic() + 30
    while not (rd.children.is_dir() and any(rd.children.glob("*.json"))):
        assert time.monotonic() < deadline and proc.poll() is None, "the run did not start"
        time.sleep(0.02)
    subprocess.run(
        ["nsenter", "--target", str(init), "--pid", "--", "/bin/sh", "-c", "sleep 7215 & exit 0"],
        check=True,
        timeout=60,
    )
    # The orphan, adopted by the init once its shell exited, dies when the test says so.
    deadline = time.monotonic() + 30
    while not _children_named(init, b"sleep\x007215\x00"):  # its exec may come after the shell's exit
        assert time.monotonic() < deadline, "the orphan never came to the init"
        time.sleep(0.005)
    (orphan,) = _children_named(init, b"sleep\x007215\x00")
    os.kill(orphan, signal.SIGKILL)
    deadline = time.monotonic() + ORPHAN_REAPED
    while identity.stat(orphan) is not None and time.monotonic() < deadline:
        time.sleep(defaults.FOREGROUND_POLL)
    zombies = _zombies_of(init)
    os.kill(init, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert not zombies, f"zombies left under the init {ORPHAN_REAPED} s after their death: {zombies}"
    assert not runs.tagged(rd.run_id)
    assert status.resumable_run(rd)
    assert StateStore(rd.state).load().status == "running"  # crashed: no end recorded
    # What the killed engine could not remove (its cgroup), a plain stop does.
    assert runs.runner("stop", "--run-dir", rd.path).returncode == Exit.OK


def test_interrupted_is_documented_for_stop_graceful_wait(runs):
    """Path: `runner stop --graceful --wait` interrupted (SIGINT) while the run goes on
    exits INTERRUPTED, not STOPPED (which says the run ended)."""
    rd = runs.start(runs.spec(provider=faults.sh(faults.TRAP_TREE), stop={"kill_grace": KILL_GRACE}))
    assert faults.wait_children(rd)
    waiter = subprocess.Popen(
        [*runs.RUNNER, "stop", "--graceful", "--wait", "--run-dir", str(rd.path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Waiting: its graceful request is lodged (the run goes on: its call traps nothing
    # and never ends by itself), so the SIGINT lands in the wait, not in its start-up.
    assert faults.await_file(rd.stop_request, waiter), waiter.communicate()
    waiter.send_signal(signal.SIGINT)
    _, err = waiter.communicate(timeout=30)
    assert waiter.returncode == Exit.INTERRUPTED, (waiter.returncode, err)
    assert rd.is_live()
    assert runs.runner("stop", "--now", "--run-dir", rd.path).returncode == Exit.OK


def test_resume_completes_a_half_written_stop_record(runs):
    """Path: an engine killed between its two writes of a stop (state.json stopped, no
    run-stop yet; the state written here by the real StateStore, as the engine writes
    it): `runner resume` journals the missing run-stop (`completed: true`) before it
    opens the new attempt, so state.json and the journal agree about the stop."""
    rd = runs.start(runs.spec(provider=faults.sh(faults.TRAP_TREE), stop={"kill_grace": KILL_GRACE}))
    assert faults.wait_children(rd)
    engine = identity_file.read(rd.engine_identity)
    os.kill(engine.pid, signal.SIGKILL)
    assert signals.wait_gone(engine, 10)
    store = StateStore(rd.state)
    state = store.load()
    state.stopped, state.status, state.stop_origin = True, "stopped", "signal"
    store.save(state)
    assert not faults.recorded(rd)
    proc = runs.runner("resume", "--run-dir", rd.path, "--detach")
    assert proc.returncode == Exit.OK, proc.stderr
    try:
        stops = runs.events(rd, "run-stop")
        assert len(stops) == 1 and stops[0]["completed"] is True and stops[0]["origin"] == "signal", stops
        resumed = [e["event"] for e in runs.journal(rd)]
        assert resumed.index("run-stop") < resumed.index("resume")
    finally:
        assert runs.runner("stop", "--now", "--run-dir", rd.path).returncode == Exit.OK

"""Namespace-local pids (issue 18, part 7): a run started inside `unshare --pid --fork
--mount-proc` records pids of its own namespace; a stop from the host translates them
(pidns.py) and is truthful, and a stop that cannot see the run says so in one line."""

import os
import shutil
import signal
import subprocess
import time

import pytest

from runner.exitcodes import Exit
from runner.files import identity_file
from runner.files.rundir import RunDir

KILL_GRACE = 0.3
TRAPPING = ["/bin/sh", "-c", "trap '' TERM; sleep 7200 & sleep 7200 & wait; wait"]


def _unshare():
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) here")
    probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot create a pid namespace here: {probe.stderr.strip()}")
    return ["unshare", "--pid", "--fork", "--mount-proc"]


def _start_inside(runs, tmp_path, provider):
    """`runner run` in the foreground as the first process of a new pid namespace;
    returns (its Popen, the RunDir) once the call runs."""
    spec = runs.spec(items=["a"], provider=provider, stop={"kill_grace": KILL_GRACE})
    run_dir = tmp_path / "run"
    runs.started.append(run_dir)
    proc = subprocess.Popen(
        [*_unshare(), *runs.RUNNER, "run", str(spec), "--run-dir", str(run_dir)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    rd = RunDir(run_dir)
    deadline = time.monotonic() + 30
    while not (rd.path.exists() and rd.children.exists() and any(rd.children.iterdir())):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the run inside the namespace never started its call"
        time.sleep(0.02)
    return proc, rd


def _finish(proc):
    try:
        return proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("how", ["stop", "now"])
def test_host_side_stop_of_a_run_inside_a_pid_namespace_is_truthful(runs, tmp_path, how):
    """Path: survey._engine_elsewhere and _seen_here: engine.json carries the engine's
    pid namespace; a host-side `runner stop` (or `--now`) finds the engine as the lock
    holder that the namespace calls by the recorded pid, and each call likewise, so it
    signals, waits and reports truthfully: exit 0, no "damaged" line, no pid called
    "reused", nothing of the run left, the stop recorded once. Ablation pidns-translate
    (no pid is ever translated) turns it red: the run is said to live elsewhere (18)."""
    proc, rd = _start_inside(runs, tmp_path, TRAPPING)
    engine = identity_file.read(rd.engine_identity)
    try:
        assert engine.pid < 10, f"the engine was not started inside the namespace: pid {engine.pid}"
        args = ["stop", "--run-dir", rd.path] + (["--now"] if how == "now" else [])
        stop = runs.runner(*args)
    finally:
        runs.runner("stop", "--now", "--run-dir", rd.path)
        _finish(proc)
    assert stop.returncode == Exit.OK, stop.stderr
    assert "damaged" not in stop.stderr and "reused" not in stop.stderr, stop.stderr
    deadline = time.monotonic() + 10
    while runs.tagged(rd.run_id):
        assert time.monotonic() < deadline, f"processes of the run left: {runs.tagged(rd.run_id)}"
        time.sleep(0.02)
    st = runs.state(rd)
    assert st.stopped, st
    assert len(runs.events(rd, "run-stop")) == 1


def test_stop_from_inside_another_namespace_says_so_and_signals_nothing(runs, tmp_path):
    """Path: survey._engine_elsewhere without a holder in sight: a `runner stop` run
    inside a fresh pid namespace cannot see the host's run; it exits OTHER_PID_NAMESPACE
    with one line naming both namespaces, and the run goes on untouched (then a host-side
    stop ends it, exit 0)."""
    unshare = _unshare()
    spec = runs.spec(items=["a"], provider=TRAPPING, stop={"kill_grace": KILL_GRACE})
    rd = runs.start(spec)
    try:
        runs.wait_event(rd, "phase-start", phase="session")
        for how in ([], ["--now"]):
            inside = subprocess.run(
                [*unshare, *runs.RUNNER, "stop", "--run-dir", str(rd.path), *how],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert inside.returncode == Exit.OTHER_PID_NAMESPACE, inside.stderr
            lines = inside.stderr.strip().splitlines()
            assert len(lines) == 1 and "another pid namespace" in lines[0], inside.stderr
            assert rd.is_live() and runs.tagged(rd.run_id), "a stop that cannot see the run touched it"
    finally:
        host = runs.runner("stop", "--run-dir", rd.path)
    assert host.returncode == Exit.OK, host.stderr
    runs.wait_engine_exit(rd)
    assert not runs.tagged(rd.run_id)


def test_wait_says_crashed_when_the_namespace_of_its_engine_died(runs, tmp_path):
    """Path: waiting.wait_run of a run whose engine is dead (its lock free) and recorded
    in another pid namespace, gone with its init: the run ended without recording how,
    so `runner wait` exits CRASHED with one line, as it does for a dead engine outside a
    namespace (it said "no engine identity", NO_LIVE_RUN); `runner resume` continues it.
    Ablation: `wait-dead-engine-is-crashed` (NO_LIVE_RUN: red)."""
    proc, rd = _start_inside(runs, tmp_path, TRAPPING)
    try:
        (init,) = [int(p) for t in _tasks(proc.pid) for p in _children(proc.pid, t)]
        os.kill(init, signal.SIGKILL)  # the namespace's init: the kernel kills every process in it
        _finish(proc)
        deadline = time.monotonic() + 10
        while rd.is_live() or runs.tagged(rd.run_id):
            assert time.monotonic() < deadline, "the namespace's processes outlived its init"
            time.sleep(0.02)
        waited = runs.runner("wait", "--run-dir", rd.path)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert waited.returncode == Exit.CRASHED, (waited.returncode, waited.stderr)
    assert len(waited.stderr.strip().splitlines()) == 1 and "resume" in waited.stderr, waited.stderr
    # A plain stop of the dead engine records the stop and removes the cgroup it left.
    assert runs.runner("stop", "--run-dir", rd.path).returncode == Exit.OK


def _tasks(pid):
    return os.listdir(f"/proc/{pid}/task")


def _children(pid, tid):
    with open(f"/proc/{pid}/task/{tid}/children") as f:
        return f.read().split()

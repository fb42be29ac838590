"""The engine's stop under the kernel's limits (issue 27 item 2): a run that filled its
pids cgroup (pids.max reached) leaves its engine no new thread or process, so the stop
must need none. Real runs, a real cgroup v1 pids hierarchy, a provider whose trapping
children fork until the kernel refuses (EAGAIN).

The state is reached by events: the provider waits for the test's go file (written once
`runner run --detach` has exited, so that nothing of the group leaves it after), forks
until a fork is refused, then writes its marker; the test checks that pids.current is
pids.max before it stops."""

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import runs as R

from reliability import soak_seams
from runner import defaults
from runner.exitcodes import Exit
from runner.files.rundir import RunDir
from runner.proc import cgroup as cgroup_mod

pytestmark = pytest.mark.timeout(120)

PIDS_V1 = Path("/sys/fs/cgroup/pids")
LIMIT = 24
"""The pids cgroup's pids.max: the engine (its main thread, its watchdog, the thread that
leaves its cgroup), the provider and its forks fill it."""
KILL_GRACE = 1.0


needs_pids = pytest.mark.skipif(
    not (soak_seams.pids_v1() and cgroup_mod.available()),
    reason="needs a writable cgroup v1 pids hierarchy at /sys/fs/cgroup/pids and a cgroup v2 with cgroup.kill",
)


def _members(path):
    try:
        return [int(p) for p in (path / "cgroup.procs").read_text().split()]
    except OSError:
        return []


def _wait_file(path, timeout):
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


def _wait_empty(path, timeout):
    """Until the pids cgroup counts no task (pids.current: a task is counted until it is
    reaped); False at the deadline."""
    deadline = time.monotonic() + timeout
    while int((path / "pids.current").read_text()) != 0:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.fixture
def pids_cgroup():
    """A cgroup v1 pids cgroup of the test's own at pids.max LIMIT; whatever is left in it
    is SIGKILLed and the cgroup removed at teardown, even when the test fails. Asked for
    before `runs`, so torn down after it (a run left live is force-stopped first, and
    its engine removes its own cgroup)."""
    path = PIDS_V1 / f"runner-test-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    try:
        (path / "pids.max").write_text(f"{LIMIT}\n")
        yield path
    finally:
        deadline = time.monotonic() + 10
        while _members(path) and time.monotonic() < deadline:
            for pid in _members(path):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.02)
        while time.monotonic() < deadline:
            try:
                path.rmdir()
                break
            except OSError:
                time.sleep(0.02)


def _remove_run_cgroup(key):
    path = cgroup_mod.run_cgroup_path(key)
    if path is None or not path.exists():
        return
    (path / "cgroup.kill").write_text("1\n")
    deadline = time.monotonic() + 5
    for sub in (path / "work", path / "engine", path):
        while sub.exists() and time.monotonic() < deadline:
            try:
                sub.rmdir()
            except OSError:
                time.sleep(0.02)


def _start_in(cgroup, runs, name):
    """`runner run --detach` started inside the pids cgroup (its engine and every process
    of the run inherit it); returns the run and the provider's marker file."""
    marker, go = runs.tmp_path / f"{name}.full", runs.tmp_path / f"{name}.go"
    provider = [sys.executable, "-c", soak_seams.FORK_UNTIL_FULL, str(marker), str(go)]
    spec = runs.spec(name=f"{name}.toml", provider=provider, stop={"kill_grace": KILL_GRACE})
    run_dir = runs.tmp_path / name
    runs.started.append(run_dir)
    enter = R.sh('echo $$ > "$1/cgroup.procs" && shift && exec "$@"', str(cgroup), *R.RUNNER)
    started = subprocess.run(
        [*enter, "run", str(spec), "--run-dir", str(run_dir), "--detach"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert started.returncode == 0, started.stderr
    rd = RunDir(run_dir)
    R.wait_event(rd, "session-start", timeout=30)
    go.touch()  # `runner run` has exited: from here only the run is in the group
    _wait_file(marker, 30)
    assert int((cgroup / "pids.current").read_text()) == LIMIT, "the pids cgroup is not full"
    return rd, marker


@needs_pids
def test_a_full_pids_cgroup_does_not_slow_the_plain_stop(pids_cgroup, runs):
    """Path: the engine's stop asks nothing new of the kernel (cgroup.RunCgroup.enter_engine
    made ready the thread that leaves the run's cgroup and the descriptors of its files):
    with the run's pids cgroup at pids.max, a plain `runner stop` exits 0 within
    kill_grace + CONFIRM_TIMEOUT + 1 s, the engine honoured it (no fallback, no
    `watchdog-error`: no "can't start new thread"), and nothing of the run is left.
    Ablation: stop-needs-no-new-thread (the stop starts its thread then: refused, the
    watchdog's kill fails once, `watchdog-error`)."""
    rd, _ = _start_in(pids_cgroup, runs, "full")
    t0 = time.monotonic()
    out = R.runner("stop", "--run-dir", rd.path)
    took = time.monotonic() - t0
    assert out.returncode == Exit.OK, out.stderr
    bound = KILL_GRACE + defaults.CONFIRM_TIMEOUT + 1.0
    assert took < bound, f"the stop took {took:.2f} s, over its bound of {bound:.2f} s"
    R.wait_engine_exit(rd, timeout=10)
    assert _wait_empty(pids_cgroup, 5), f"left in the run's pids cgroup: {_members(pids_cgroup)}"
    errors = R.events(rd, "watchdog-error") + R.events(rd, "cleanup-error")
    assert not errors, errors
    stop = R.events(rd, "run-stop")
    assert len(stop) == 1 and stop[0]["fallback"] is False, stop
    assert R.state(rd).stopped


@needs_pids
def test_rm_rf_of_a_run_that_filled_its_pids_cgroup_leaves_nothing(pids_cgroup, runs):
    """Path: the watchdog's response to a removed directory (stop_controller: dirfd.gone)
    needs no new thread either: `rm -rf` of a live run whose pids cgroup is full leaves
    nothing of it within kill_grace + 3 s, and the engine's journal (read through a
    descriptor the test held before the removal) has no `watchdog-error`. Ablation:
    stop-needs-no-new-thread (the journal has the watchdog's "can't start new thread")."""
    rd, _ = _start_in(pids_cgroup, runs, "gone")
    key = rd.key(rd.run_id)
    held = os.open(rd.journal, os.O_RDONLY)
    runs.started.remove(rd.path)  # removed below: this test cleans up after itself
    try:
        t0 = time.monotonic()
        subprocess.run(["rm", "-rf", str(rd.path)], check=True)
        emptied = _wait_empty(pids_cgroup, KILL_GRACE + 3.0 - (time.monotonic() - t0))
        took = time.monotonic() - t0
        assert emptied, f"left {took:.2f} s after rm -rf: {_members(pids_cgroup)}"
        lines = b""
        while chunk := os.read(held, 1 << 16):
            lines += chunk
    finally:
        os.close(held)
        _remove_run_cgroup(key)  # the engine's own, were it killed by the fixture
    assert b'"watchdog-error"' not in lines, lines.decode(errors="replace")[-2000:]
    assert b'"origin": "vanished"' in lines

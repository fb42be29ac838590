"""An unreachable run directory is a vanished run (issue 27 item 3): a live engine whose
pinned directory no path reaches any more (its file system lazily unmounted, a file
system mounted over it or over its parent) is shown by `runner list` as vanished and
stopped by `runner stop --all`. The engine does not stop itself then (the choice:
docs/stop-latency.md, "When the run directory goes away"): its directory still holds its
records and it records the stop there; a covered run is found again, stopped and
recorded, once uncovered. A moved directory is reached at its new path: not vanished.

Real tmpfs mounts of the test's own (root), each undone in a finally; the runs'
processes and cgroups are killed and removed in a finally too.
"""

import json
import os
import subprocess
import time

import pytest
import runs as R

from runner.exitcodes import Exit
from runner.files import identity_file
from runner.proc import identity, reaper
from runner.proc.cgroup import run_cgroup_path

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mount -t tmpfs, umount -l)"),
]

TRAP = ["/bin/sh", "-c", "trap '' TERM; sleep 7200"]
STOP = {"kill_grace": 0.5}


def _mount_tmpfs(path):
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", str(path)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.decode().strip()}")


def _mounted(path):
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == str(path) for line in f)


def _umount(path):
    while _mounted(path):
        if subprocess.run(["umount", "-l", str(path)], capture_output=True).returncode != 0:
            break


def _gone(key):
    path = run_cgroup_path(key)
    return not R.tagged(key) and not (path is not None and path.exists())


def _wait(predicate, timeout):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _kill_and_remove(key):
    """What a failed (or ablated) test left: the run's processes, then its cgroup."""
    reaper.kill_tagged(key, 0.2)
    path = run_cgroup_path(key)
    if path is not None and path.exists():
        (path / "cgroup.kill").write_text("1\n")
        for sub in (path / "work", path / "engine", path):
            deadline = time.monotonic() + 5
            while sub.exists() and time.monotonic() < deadline:
                try:
                    sub.rmdir()
                except OSError:
                    time.sleep(0.02)


def _start(runs, base, name="run"):
    base.mkdir(mode=0o700, exist_ok=True)
    spec = runs.spec(name=f"{name}.toml", provider=TRAP, stop=STOP)
    run_dir = base / name
    started = R.runner("run", spec, "--run-dir", run_dir, "--detach")
    assert started.returncode == Exit.OK, started.stderr
    rd = R.RunDir(run_dir)
    R.wait_event(rd, "session-start", timeout=30)
    run_id = rd.run_id  # read now: the directory may be out of reach when it is asked
    return rd, run_id, rd.key(run_id), identity_file.read(rd.engine_identity)


def _listed(base):
    out = R.runner("list", "--json", "--runs-dir", base)
    assert out.returncode == Exit.OK, out.stderr
    return json.loads(out.stdout)


def test_umount_l_of_a_live_runs_file_system_then_stop_all_stops_it(runs):
    """Path: vanished.gone_why: the engine's pinned directory (the one its tag's identity
    names) is not what the path /proc/PID/fd gives for it names (a lazily unmounted file
    system's path is relative to its own root): `runner list` shows the run as vanished
    and unreachable, `runner stop --all` kills it by its tag and cgroup, nothing of it is
    left. Until then the run lives (the engine does not stop itself). Ablation:
    unreachable-dir-vanished (`list` shows no run, `stop --all` exits NO_LIVE_RUN: the
    run lives on, out of every command's reach)."""
    vol = runs.tmp_path / "vol"
    _mount_tmpfs(vol)
    key = None
    try:
        rd, run_id, key, engine = _start(runs, vol / "runs")
        subprocess.run(["umount", "-l", str(vol)], check=True)
        rows = _listed(vol / "runs")
        assert [(r["run_id"], r["status"], r["live"]) for r in rows] == [(run_id, "vanished", True)], rows
        assert "unreachable" in rows[0]["damaged"][0], rows
        assert identity.is_running(engine) and R.tagged(key), "the run should live until the stop"
        stopped = R.runner("stop", "--all", "--runs-dir", vol / "runs")
        assert stopped.returncode == Exit.OK, stopped.stderr
        assert run_id in stopped.stdout, stopped.stdout
        assert _wait(lambda: _gone(key), 5), f"left after stop --all: {R.tagged(key)}"
        assert not identity.is_running(engine)
    finally:
        if key is not None:
            _kill_and_remove(key)
        _umount(vol)


@pytest.mark.parametrize("over", ["parent", "run-dir"])
def test_a_file_system_mounted_over_a_live_run_then_stop_all_stops_it(runs, over):
    """Path: vanished.gone_why for a covered directory (its path leads into the tmpfs
    mounted over it, or over its parent): `list` shows it vanished, `stop --all` stops
    it, nothing of it is left; once uncovered, `list` shows the run under its own name
    again, no longer live. Ablation: unreachable-dir-vanished."""
    base = runs.tmp_path / "runs"
    rd, run_id, key, engine = _start(runs, base)
    cover = base if over == "parent" else rd.path
    _mount_tmpfs(cover)
    try:
        rows = _listed(base)
        assert [(r["run_id"], r["status"]) for r in rows] == [(run_id, "vanished")], rows
        stopped = R.runner("stop", "--all", "--runs-dir", base)
        assert stopped.returncode == Exit.OK, stopped.stderr
        assert _wait(lambda: _gone(key) and not identity.is_running(engine), 5), R.tagged(key)
    finally:
        _umount(cover)
        _kill_and_remove(key)
    rows = _listed(base)
    assert [(r["run_id"], r["run_dir"], r["live"]) for r in rows] == [(run_id, str(rd.path), False)], rows


def test_a_moved_live_run_is_not_vanished(runs):
    """Path: vanished.gone_why: a directory moved within the base is reached at its new
    path (the kernel's path for the pinned descriptor names it): `list` shows it once,
    live under its new name, and no vanished row. Ablation: none (the guard against
    calling a moved run unreachable; unreachable-dir-vanished keeps it green)."""
    base = runs.tmp_path / "runs"
    rd, _, key, _ = _start(runs, base, "first")
    try:
        os.rename(rd.path, base / "second")
        rows = _listed(base)
        assert [(r["run_dir"], r["status"], r["live"]) for r in rows] == [(str(base / "second"), "running", True)], rows
        assert R.runner("stop", "--run-dir", base / "second").returncode == Exit.OK
    finally:
        _kill_and_remove(key)

"""The names a run is reached by (issue 27 item 7): a run is its directory, whatever names
and mounts reach it.

- a directory shown under two names by a bind mount is listed once, and stopped once
  by `stop --all` (rundir.run_entries, the one rule of every lister);
- `--run-dir` never follows a final symlink, the rule `list` follows: `--run-dir A`,
  A -> B, acts on nothing (it used to stop B);
- a FUSE re-export (bindfs) shows the directory as another device: to the kernel it is
  another directory, so it reads as a copy of the run (docs/stop-latency.md, "What
  identifies a run"), and nothing is acted on through it.
"""

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import runs as R

from runner.exitcodes import Exit
from runner.files import identity_file
from runner.proc import identity

pytestmark = pytest.mark.timeout(120)

TRAP = ["/bin/sh", "-c", "trap '' TERM; sleep 7200"]
STOP = {"kill_grace": 0.5}
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mount --bind)")


def _live_run(runs, name="run"):
    rd = runs.start(runs.spec(name=f"{name}.toml", provider=TRAP, stop=STOP), name=name)
    R.wait_event(rd, "session-start", timeout=30)
    return rd


@needs_root
def test_a_bind_mounted_run_is_listed_once_and_stopped_once(runs):
    """Path: rundir.run_entries lists a directory once by its identity (device, inode),
    whatever names mounts give it: `runner list` shows one row, `runner stop --all` stops
    it once (one stop line, one `run-stop`). Ablation: list-once-per-directory (two
    rows, two stop lines)."""
    rd = _live_run(runs, "run")
    other = runs.tmp_path / "run2"
    other.mkdir()
    mounted = subprocess.run(["mount", "--bind", str(rd.path), str(other)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"mount --bind failed: {mounted.stderr.strip()}")
    try:
        listed = R.runner("list", "--json", "--runs-dir", runs.tmp_path)
        assert listed.returncode == Exit.OK, listed.stderr
        rows = json.loads(listed.stdout)
        assert [r["run_dir"] for r in rows] == [str(rd.path)], rows
        stopped = R.runner("stop", "--all", "--runs-dir", runs.tmp_path)
        assert stopped.returncode == Exit.OK, stopped.stderr
        assert len(stopped.stdout.strip().splitlines()) == 1, stopped.stdout
        R.wait_engine_exit(rd, timeout=10)
        assert len(R.events(rd, "run-stop")) == 1
    finally:
        subprocess.run(["umount", str(other)], capture_output=True)


def test_run_dir_naming_a_symlink_acts_on_nothing(runs):
    """Path: rundir.resolve refuses a --run-dir whose last component is a symlink, the
    rule `list` follows (a symlink, never followed): every command that acts (`stop` in
    each mode, `resume`, `wait`) and those that read exit NO_LIVE_RUN with one line
    naming the link; the run the link points to lives on, nothing of it recorded; `run
    --run-dir` a symlink to an empty directory is refused (BAD_INPUT) before anything
    is written there. Ablation: run-dir-refuses-links (`stop --run-dir link` stops the
    run the link points to)."""
    rd = _live_run(runs, "target")
    engine = identity_file.read(rd.engine_identity)
    link = runs.tmp_path / "link"
    link.symlink_to(rd.path)
    for args in (["stop"], ["stop", "--now"], ["stop", "--graceful"], ["wait"], ["resume"], ["status"], ["logs"]):
        out = R.runner(*args, "--run-dir", link, timeout=30)
        lines = out.stderr.strip().splitlines()
        assert out.returncode == Exit.NO_LIVE_RUN, (args, out.returncode, out.stderr)
        assert len(lines) == 1 and "a symlink (never followed)" in lines[0] and str(link) in lines[0], (args, lines)
    assert identity.is_running(engine) and rd.is_live(), "a stop through the link reached the run"
    assert not R.events(rd, "run-stop") and not rd.stop_request.exists()

    empty = runs.tmp_path / "empty"
    empty.mkdir()
    elsewhere = runs.tmp_path / "elsewhere"
    elsewhere.symlink_to(empty)
    spec = runs.spec(name="other.toml", provider=TRAP, stop=STOP)
    out = R.runner("run", spec, "--run-dir", elsewhere, "--detach")
    assert out.returncode == Exit.BAD_INPUT and "a symlink (never followed)" in out.stderr, out.stderr
    assert os.listdir(empty) == [], "a refused run wrote through the link"
    assert R.runner("stop", "--run-dir", rd.path).returncode == Exit.OK


@needs_root
@pytest.mark.skipif(shutil.which("bindfs") is None, reason="needs bindfs (Debian package bindfs)")
def test_a_run_seen_through_bindfs_is_a_copy_and_never_acted_on(runs):
    """Path: the run's key is measured on the directory opened (rundir.key); through a
    FUSE re-export the kernel shows another device (bindfs keeps the inode numbers, the
    device is FUSE's), which no process of the run carries: the view reads as a copy,
    `stop` through it exits COPY and signals nothing, the run goes on and stops through
    its own path. The documented limit, not a fix (docs/stop-latency.md). Ablation: none
    (the copy check is dir-identity-check's, killed elsewhere)."""
    rd = _live_run(runs, "run")
    # The view outside the tree it shows: a FUSE mount inside its own source serves
    # itself, and deadlocks on the first look into it.
    view = Path(tempfile.mkdtemp(prefix="runner-bindfs-"))
    mounted = subprocess.run(["bindfs", str(runs.tmp_path), str(view)], capture_output=True, text=True, timeout=30)
    if mounted.returncode != 0:
        view.rmdir()
        pytest.skip(f"bindfs failed: {mounted.stderr.strip()}")
    try:
        through = view / "run"
        assert os.stat(through).st_dev != os.stat(rd.path).st_dev
        status = R.runner("status", "--json", "--run-dir", through, timeout=30)
        assert json.loads(status.stdout)["status"] == "copy", status.stdout
        out = R.runner("stop", "--run-dir", through, timeout=30)
        assert out.returncode == Exit.COPY and "copy" in out.stderr, out.stderr
        assert rd.is_live() and not R.events(rd, "run-stop")
    finally:
        if subprocess.run(["fusermount", "-u", str(view)], capture_output=True, timeout=30).returncode:
            subprocess.run(["umount", "-l", str(view)], capture_output=True, timeout=30)
        view.rmdir()
    assert R.runner("stop", "--run-dir", rd.path).returncode == Exit.OK

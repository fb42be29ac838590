"""Hard links (issue 27 item 4): the run never writes into a file a backup shares, and a
backup never blocks the run. `cp -al RUN BACKUP` (coreutils, the way rsnapshot-style
backups work) beside a real run; the backup's every name and byte is compared before
and after the run resumes, runs and stops. The table is in docs/stop-latency.md ("Hard
links: backups beside a run")."""

import json
import os
import subprocess
import time

import pytest
import runs as R

from runner.exitcodes import Exit

pytestmark = pytest.mark.timeout(120)

# A provider that says something, then ignores SIGTERM: only the stop's SIGKILL ends it.
TRAP = ["/bin/sh", "-c", "echo started {item}; trap '' TERM; sleep 7200"]
STOP = {"kill_grace": 0.3}


def _cp_al(src, dst):
    subprocess.run(["cp", "-al", str(src), str(dst)], check=True)


def _broken(rd):
    """The files whose link the run broke, as the journal says (names in the run)."""
    return {os.path.relpath(e["file"], rd.path) for e in R.events(rd, "link-broken")}


def _session(rd, attempt):
    """Until this attempt's call has started (the journal's session-start after its
    resume record)."""
    R.wait_event(rd, "session-start", timeout=30, call=attempt)


def test_a_backup_of_a_stopped_run_neither_blocks_the_run_nor_changes(runs):
    """Path: links.py, at each write in place: `runner resume` of a run beside its `cp -al`
    backup breaks the shared links it writes (journal.jsonl, engine.log, `lock` when the
    engine writes its pid) into copies of its own, says so (`link-broken`), and never
    writes the backup's inodes: resume exits 0 (it exited 10, "has 2 hard links"), the
    resumed run stops, and the backup is byte-for-byte what it was. Ablation: link-break
    (resume and the engine append through the shared links: the backup grows)."""
    rd = runs.start(runs.spec(provider=TRAP, stop=STOP, items=("a", "b")))
    _session(rd, 1)
    assert R.runner("stop", "--run-dir", rd.path).returncode == Exit.OK
    R.wait_engine_exit(rd, timeout=10)
    backup = runs.tmp_path / "backup"
    _cp_al(rd.path, backup)
    before = R.snapshot(backup)

    resumed = R.runner("resume", "--run-dir", rd.path, "--detach")
    assert resumed.returncode == Exit.OK, resumed.stderr
    _session(rd, 2)
    stopped = R.runner("stop", "--run-dir", rd.path)
    assert stopped.returncode == Exit.OK, stopped.stderr
    R.wait_engine_exit(rd, timeout=10)

    assert not R.snapshot_diff(before, R.snapshot(backup)), R.snapshot_diff(before, R.snapshot(backup))
    assert {"journal.jsonl", "engine.log", "lock"} <= _broken(rd), _broken(rd)
    assert R.state(rd).attempt == 2 and R.state(rd).stopped
    status = json.loads(R.runner("status", "--json", "--run-dir", backup).stdout)
    assert status["status"] == "copy", status


@pytest.mark.parametrize("mode", ["stop", "now"])
def test_a_backup_taken_while_the_run_lives_is_never_written(runs, mode):
    """Path: links.py's check before each write batch, not only at open: the engine (and
    a `--now` stopper that records the stop itself) hold descriptors opened before `cp
    -al`; before each append they look at the link count, break the journal's and the
    running call's output file's shared links, and append to their own copies. The
    backup is unchanged after the stop (before issue 27 it held the run's `run-stop`
    while its state said running). Ablation: link-break."""
    rd = runs.start(runs.spec(provider=TRAP, stop=STOP))
    _session(rd, 1)
    R.wait_event(rd, "phase-start", timeout=30, phase="session")
    output = next(rd.output.glob("*.log"))
    deadline = time.monotonic() + 30
    while b"started" not in output.read_bytes():  # the call's first bytes are on disk
        assert time.monotonic() < deadline, "the call never wrote its first line"
        time.sleep(0.01)
    backup = runs.tmp_path / "backup"
    _cp_al(rd.path, backup)
    before = R.snapshot(backup)
    stopped = R.runner("stop", *(["--now"] if mode == "now" else []), "--run-dir", rd.path)
    assert stopped.returncode == Exit.OK, stopped.stderr
    R.wait_engine_exit(rd, timeout=10)
    changed = R.snapshot_diff(before, R.snapshot(backup))
    assert not changed, changed
    assert "journal.jsonl" in _broken(rd), _broken(rd)
    assert len(R.events(rd, "run-stop")) == 1 and R.state(rd).stopped

"""Hard links (issue 27 item 4): the run never writes into a file a backup shares, and a
backup never blocks the run. `cp -al RUN BACKUP` (coreutils, the way rsnapshot-style
backups work) beside a real run; the backup's every name and byte is compared before
and after the run resumes, runs and stops. The table is in docs/stop-latency.md ("Hard
links: backups beside a run")."""

import json
import os
import re
import shutil
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


# atomic.temp_file's names: `.<name>.<12 hex>.tmp`, a replace in progress (never a name
# of the run's state: the rename publishes it, a failed write removes it).
TEMP = re.compile(r"^\.[^/]+\.[0-9a-f]{12}\.tmp$")


def _cp_al_live(src, dst):
    """`cp -al` of a live run, as a backup meets it. The tests take it once the engine is
    idle in its call (R.wait_in_call: its child file is the last thing it writes), so
    nothing of the engine is in flight; should a replace be in flight anyway, cp may
    link its temp file, or find it renamed away between its readdir and its link
    (exit 1, "No such file or directory" naming the temp file only): then the copy is
    taken again. Any other failure fails the test."""
    for _ in range(5):
        env = {**os.environ, "LC_ALL": "C"}  # its messages as matched here: English, plain quotes
        cp = subprocess.run(["cp", "-al", str(src), str(dst)], capture_output=True, text=True, env=env)
        if cp.returncode == 0:
            return
        for line in cp.stderr.strip().splitlines():
            named = [os.path.basename(p) for p in re.findall(r"'([^']*)'", line)]
            assert "No such file or directory" in line and any(TEMP.match(n) for n in named), cp.stderr
        if os.path.lexists(dst):
            shutil.rmtree(dst)
    raise AssertionError(f"cp -al of {src} met a vanishing temp file 5 times: {cp.stderr}")


def _published(snap):
    """A snapshot of a live run's backup without the temp files of replaces in flight at
    the copy: their bytes are a write in progress, the backup's link to them a torn file
    of no name of the run's (the writer goes on to fill it, then renames it to a new
    inode of the run's; links.py). Every other name, engine.log among them, is kept."""
    return {k: v for k, v in snap.items() if not TEMP.match(os.path.basename(k))}


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
    R.wait_in_call(rd, timeout=30, call=1)  # the call's child file written: the engine waits
    R.wait_event(rd, "phase-start", timeout=30, phase="session")
    output = next(rd.output.glob("*.log"))
    deadline = time.monotonic() + 30
    while b"started" not in output.read_bytes():  # the call's first bytes are on disk
        assert time.monotonic() < deadline, "the call never wrote its first line"
        time.sleep(0.01)
    backup = runs.tmp_path / "backup"
    _cp_al_live(rd.path, backup)
    before = _published(R.snapshot(backup))
    stopped = R.runner("stop", *(["--now"] if mode == "now" else []), "--run-dir", rd.path)
    assert stopped.returncode == Exit.OK, stopped.stderr
    R.wait_engine_exit(rd, timeout=10)
    changed = R.snapshot_diff(before, _published(R.snapshot(backup)))
    assert not changed, changed
    assert "journal.jsonl" in _broken(rd), _broken(rd)
    if mode == "stop":  # the engine closes the call's output (its cap note) in a copy
        assert any(name.startswith("output/") for name in _broken(rd)), _broken(rd)
    assert len(R.events(rd, "run-stop")) == 1 and R.state(rd).stopped


def test_the_engines_own_lines_never_go_into_a_backups_engine_log(runs):
    """Path: main._stderr_guard, before each of the engine's writes to its stderr
    (engine.log, opened long before the backup): a live run's `cp -al` backup shares
    engine.log; the engine then writes a line there (it crashes on damage planted after
    the backup: output/ made a symlink), and that line goes into a copy of its own, the
    engine's stdout and stderr moved to it; the backup's engine.log is unchanged and
    `link-broken` names engine.log. Ablation: link-break."""
    go = runs.tmp_path / "go"
    wait_go = ["/bin/sh", "-c", 'while [ ! -e "$0" ]; do sleep 0.01; done', str(go)]
    rd = runs.start(runs.spec(provider=wait_go, stop=STOP, items=("a", "b")))
    # Not at session-start: the engine then still writes the call's child file
    # (children/.PID.json.*.tmp, renamed), which a copy taken there met (issue: red once).
    R.wait_in_call(rd, timeout=30, call=1)
    backup = runs.tmp_path / "backup"
    _cp_al_live(rd.path, backup)
    before = _published(R.snapshot(backup))
    real = runs.tmp_path / "output-elsewhere"
    rd.output.rename(real)
    rd.output.symlink_to(real)
    go.touch()
    R.wait_event(rd, "engine-crash", timeout=30)
    R.wait_engine_exit(rd, timeout=10)
    assert "crashed: damaged run directory" in rd.engine_log.read_text()
    changed = R.snapshot_diff(before, _published(R.snapshot(backup)))
    assert not changed, changed
    assert "engine.log" in _broken(rd), _broken(rd)

"""A refused command writes nothing (issue 27 item 5, principle 9): every refusal (a copy,
another user's directory, links, damage, a live engine, a finished run, an unsupported
machine) is decided before the command's first write. Each case is a real run directory
(run by the real engine, stopped by the real `runner stop`), damaged the way the case
says, then the real command; every name and every byte under the test's directory (the
run, its copies, the files links point to) is compared before and after: no byte
changed, no name added or removed.

Before issue 27, a refused `resume` rewrote state.json to the next attempt (its journal
was refused after the state was saved), and wrote its pid into `lock`."""

import os
import re
import signal
import subprocess
import sys

import pytest
import runs as R

from runner.exitcodes import Exit
from runner.files import identity_file
from runner.proc import reaper

pytestmark = pytest.mark.timeout(180)

SLEEP = ["/bin/sh", "-c", "sleep 7200"]
STOP = {"kill_grace": 0.2}
STRANGER = 4242
"""A uid that owns nothing here: the owner of "another user's" files and directories."""
STOPS = (["stop"], ["stop", "--now"], ["stop", "--graceful"], ["stop", "--graceful", "--wait"])


def _stopped(runs, name="run", provider=SLEEP):
    rd = runs.start(runs.spec(name=f"{name}.toml", provider=provider, stop=STOP, items=("a", "b")), name=name)
    R.wait_event(rd, "session-start", timeout=30)
    out = R.runner("stop", "--run-dir", rd.path)
    assert out.returncode == Exit.OK, out.stderr
    R.wait_engine_exit(rd, timeout=10)
    return rd


def _strangers_link(rd, runs, name):
    """`name` in the run directory replaced by a hard link to a file of another user's
    (with the same bytes)."""
    path = rd.path / name
    target = runs.tmp_path / f"strangers-{name}"
    target.write_bytes(path.read_bytes() if path.exists() else b"")
    os.chown(target, STRANGER, STRANGER)
    path.unlink(missing_ok=True)
    os.link(target, path)


def _fifo(rd, name):
    path = rd.path / name
    path.unlink(missing_ok=True)
    os.mkfifo(path)


def _symlink(rd, runs, name):
    path = rd.path / name
    target = runs.tmp_path / f"elsewhere-{name}"
    if path.is_dir():
        path.rename(target)
    else:
        target.write_bytes(path.read_bytes() if path.exists() else b"")
        path.unlink(missing_ok=True)
    path.symlink_to(target)


def _garbage(rd, name, data=b"\x00\xff not what the runner wrote {{{\n"):
    (rd.path / name).write_bytes(data)


# name -> (how the run directory is damaged, the commands refused, their exit code)
DAMAGES = {
    "another user's directory": (
        lambda rd, runs: subprocess.run(["chown", "-R", f"{STRANGER}:{STRANGER}", str(rd.path)], check=True),
        [["resume"]],
        Exit.FOREIGN_DIR,
    ),
    "journal.jsonl a hard link to another user's file": (
        lambda rd, runs: _strangers_link(rd, runs, "journal.jsonl"),
        [["resume"]],
        Exit.DAMAGED,
    ),
    "engine.log a hard link to another user's file": (
        lambda rd, runs: _strangers_link(rd, runs, "engine.log"),
        [["resume"]],
        Exit.DAMAGED,
    ),
    "lock a hard link to another user's file": (
        lambda rd, runs: _strangers_link(rd, runs, "lock"),
        [["resume"]],
        Exit.DAMAGED,
    ),
    "journal.jsonl a symlink": (lambda rd, runs: _symlink(rd, runs, "journal.jsonl"), [["resume"]], Exit.DAMAGED),
    "engine.log a FIFO": (lambda rd, runs: _fifo(rd, "engine.log"), [["resume"]], Exit.DAMAGED),
    "lock a FIFO": (lambda rd, runs: _fifo(rd, "lock"), [["resume"]], Exit.DAMAGED),
    "stop-request.lock a symlink": (
        lambda rd, runs: _symlink(rd, runs, "stop-request.lock"),
        [["resume"]],
        Exit.DAMAGED,
    ),
    "output/ a symlink": (lambda rd, runs: _symlink(rd, runs, "output"), [["resume"]], Exit.DAMAGED),
    "children/ a file": (
        lambda rd, runs: (os.rmdir(rd.path / "children"), _garbage(rd, "children")),
        [["resume"]],
        Exit.DAMAGED,
    ),
    "state.json damaged": (lambda rd, runs: _garbage(rd, "state.json"), [["resume"]], Exit.DAMAGED),
    "spec.toml damaged": (lambda rd, runs: _garbage(rd, "spec.toml"), [["resume"]], None),
    "dir-identity damaged": (lambda rd, runs: _garbage(rd, "dir-identity"), [["resume"]], Exit.DAMAGED),
    "run-id damaged": (lambda rd, runs: _garbage(rd, "run-id", b"no/such id\n"), [["resume"]], Exit.DAMAGED),
    "cgroup damaged": (lambda rd, runs: _garbage(rd, "cgroup", b"/etc\n"), [["resume"]], Exit.DAMAGED),
}


def _refused(runs, commands, code, where, env=None):
    """Each command on `where`: refused with `code` (any documented refusal when None),
    one line, and not a byte or name changed under the test's directory."""
    for args in commands:
        before = R.snapshot(runs.tmp_path)
        out = R.runner(*args, "--run-dir", where, timeout=60, env=env)
        lines = out.stderr.strip().splitlines()
        assert out.returncode != Exit.OK and (code is None or out.returncode == code), (args, out.returncode, lines)
        assert out.returncode != Exit.INTERNAL and len(lines) == 1, (args, lines)
        changed = R.snapshot_diff(before, R.snapshot(runs.tmp_path))
        assert not changed, f"refused {args} ({out.returncode}: {lines[0]}) changed {changed}"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (files of another uid, hard links to them)")
@pytest.mark.parametrize("damage", DAMAGES, ids=lambda name: re.sub(r"[^A-Za-z0-9.]+", "-", name))
def test_a_refused_resume_of_a_damaged_run_writes_nothing(runs, damage):
    """Path: lifecycle._resume_locked decides every refusal (the status, the view's
    damage, `_unwritable`: where resume or its engine would write) before its first
    write, and `runner run`/`resume` only lock `lock` (the engine writes its pid).
    Ablation: refusals-before-writes (engine.log a FIFO, output/ a symlink, a stranger's
    hard link at journal.jsonl: resume saves the next attempt into state.json, then
    fails: red)."""
    rd = _stopped(runs)
    key = rd.key(rd.run_id)
    how, commands, code = DAMAGES[damage]
    how(rd, runs)
    # The fixture's teardown reads the run's files, which this test damaged: the run is
    # stopped (its stop exited 0); what a failure left is killed by its tag here.
    runs.started.remove(rd.path)
    try:
        _refused(runs, commands, code, rd.path)
    finally:
        left = R.tagged(key)
        reaper.kill_tagged(key, 0.2)
    assert not left, f"processes of the run alive after the refusals: {left}"


def test_every_command_on_a_copy_writes_nothing(runs):
    """Path: rundir.refuse_copy, asked by every command that acts before it writes: each
    stop mode, `resume` and `wait` on a `cp -r` copy exit COPY; neither the copy nor the
    run changes. Ablation: dir-identity-check (the copy is acted on)."""
    rd = _stopped(runs)
    copy = runs.tmp_path / "copy"
    subprocess.run(["cp", "-r", str(rd.path), str(copy)], check=True)
    _refused(runs, [*STOPS, ["resume"], ["wait"]], Exit.COPY, copy)


def test_resume_of_a_completed_run_writes_nothing(runs):
    """Path: the status check of lifecycle._resume_locked, before any write: a completed
    run is not resumed (BAD_INPUT), and `lock` is not written. Ablation: none (before
    issue 27 the lock held the pid of the refused resume)."""
    rd = runs.start(runs.spec(provider=["true"], stop=STOP))
    R.wait_event(rd, "run-complete", timeout=30)
    R.wait_engine_exit(rd, timeout=10)
    _refused(runs, [["resume"]], Exit.BAD_INPUT, rd.path)


def test_resume_while_an_engine_lives_writes_nothing(runs):
    """Path: the engine lock, taken before anything is touched: a resume of a run whose
    engine lives is REFUSED. The engine is SIGSTOPped for the comparison (a live engine
    writes its own records). Ablation: none."""
    rd = runs.start(runs.spec(provider=SLEEP, stop=STOP))
    R.wait_event(rd, "session-start", timeout=30)
    engine = identity_file.read(rd.engine_identity)
    os.kill(engine.pid, signal.SIGSTOP)
    try:
        _refused(runs, [["resume"]], Exit.REFUSED, rd.path)
    finally:
        os.kill(engine.pid, signal.SIGCONT)
    assert R.runner("stop", "--run-dir", rd.path).returncode == Exit.OK


def test_run_over_an_existing_run_writes_nothing(runs):
    """Path: RunDir.create refuses a directory that already holds a run (BAD_INPUT)
    before it writes. Ablation: none."""
    rd = _stopped(runs)
    spec = runs.spec(name="again.toml", provider=SLEEP)
    before = R.snapshot(runs.tmp_path)
    out = R.runner("run", spec, "--run-dir", rd.path, "--detach")
    assert out.returncode == Exit.BAD_INPUT and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert not R.snapshot_diff(before, R.snapshot(runs.tmp_path))


def test_an_unsupported_machine_writes_nothing(runs):
    """Path: cli.unsupported, before a command reads, starts or signals anything: on a
    machine the runner cannot run on (faked: not Linux), every command that acts exits
    UNSUPPORTED and writes nothing. Ablation: none."""
    rd = _stopped(runs)
    for args in (*STOPS, ["resume"], ["wait"]):
        before = R.snapshot(runs.tmp_path)
        argv = [*args, "--run-dir", str(rd.path)]
        code = f"import sys; sys.platform = 'darwin'\nfrom runner.cli import main\nsys.exit(main({argv!r}))"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
        assert out.returncode == Exit.UNSUPPORTED, (args, out.stderr)
        assert not R.snapshot_diff(before, R.snapshot(runs.tmp_path)), args

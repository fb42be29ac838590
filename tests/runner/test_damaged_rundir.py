"""A damaged run directory never makes a run unstoppable.

Each file of a live run's directory (a provider that traps SIGTERM is running) is
replaced by each class of damage a hostile or broken disk can hold. Then `runner status`
and `runner stop --now` (and, for the files the hard stop reads, `runner stop`) run with
a hard time limit: none hangs, none exits INTERNAL (70), the stop leaves no process of
the run alive, and every failure is reported on lines that start with "runner: ".
"""

import contextlib
import os
import shutil
import subprocess

import pytest
import runs as R

from runner.exitcodes import Exit
from runner.files import identity_file
from runner.proc import signals

KILL_GRACE = 0.2
STOP = {"kill_grace": KILL_GRACE, "grace": 3.0}
COMMAND_LIMIT = 30  # seconds: a hang fails the test instead of CI

FILES = [
    "engine.json",
    "child",
    "state.json",
    "stop-request.json",
    "stop-request.lock",
    "cgroup",
    "run-id",
    "dir-identity",
    "spec.toml",
    "journal.jsonl",
    "lock",
]


def deep(n=100_000):
    return b"[" * n + b"]" * n


def _sparse(path):
    with open(path, "wb") as f:
        f.truncate(300 * 1024 * 1024)  # larger than every cap, costs no disk


def _wrong_shape(name):
    return {
        "spec.toml": b"items = 3\n",
        "run-id": b"../../etc\n",
        "cgroup": b"/\n",
        "journal.jsonl": b'[1]\n"x"\n',
    }.get(name, b"[1, 2, 3]\n")


DAMAGE = {
    "binary": lambda path, name: path.write_bytes(bytes(range(256)) * 4),
    "empty": lambda path, name: path.write_bytes(b""),
    "huge": lambda path, name: _sparse(path),
    "deep-json": lambda path, name: path.write_bytes(deep()),
    "directory": lambda path, name: path.mkdir(),
    "fifo": lambda path, name: os.mkfifo(path),
    "symlink-loop": lambda path, name: os.symlink(path.name, path),
    "dev-zero": lambda path, name: os.symlink("/dev/zero", path),
    "wrong-shape": lambda path, name: path.write_bytes(_wrong_shape(name)),
}


def target(rd, name):
    if name == "child":
        (path,) = rd.children.glob("*.json")
        return path
    return rd.path / name


def damage(path, name, kind):
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()
    DAMAGE[kind](path, name)


def undamage(path, original):
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()
    if original is not None:
        path.write_bytes(original)


def runner(*args):
    try:
        proc = R.runner(*args, timeout=COMMAND_LIMIT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"`runner {' '.join(map(str, args))}` hung on a damaged run directory")
    assert proc.returncode != Exit.INTERNAL, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    for line in proc.stderr.splitlines():
        assert line.startswith("runner: "), proc.stderr
    return proc


def start(runs, victim):
    return runs.live_trap_term(victim, stop=STOP)


@contextlib.contextmanager
def damaged_run(runs, victim, name, kind):
    """A live run with `name` damaged by `kind`; yields (rd, engine, provider, run id)
    and puts the original file back afterwards, so the fixtures can clean up."""
    rd, v = start(runs, victim)
    engine = identity_file.read(rd.engine_identity)
    run_id = rd.run_id
    path = target(rd, name)
    original = path.read_bytes() if path.is_file() else None
    damage(path, name, kind)
    try:
        yield rd, engine, v, run_id
    finally:
        undamage(path, original)


def check_stopped(rd, engine, v, run_id):
    assert signals.wait_gone(engine, 5.0), "the engine survived the stop"
    assert v.wait_gone(5.0), "the provider survived the stop"
    assert R.tagged(run_id) == [], "a process with the run's tag survived the stop"


@pytest.mark.parametrize("kind", sorted(DAMAGE))
@pytest.mark.parametrize("name", FILES)
def test_stop_now_stops_a_run_whatever_its_directory_holds(runs, victim, name, kind):
    """Path: `runner status` then `runner stop --now` on a live run with one file
    damaged (survey.py reads each file through untrusted.py; the engine is found by
    the lock when engine.json says nothing, the rest by the run's tag and cgroup). No
    hang, no exit 70, the run stopped, nothing of it alive."""
    with damaged_run(runs, victim, name, kind) as (rd, engine, v, run_id):
        status = runner("status", "--run-dir", rd.path)
        assert status.returncode in (Exit.OK, Exit.DAMAGED), status.stderr
        stop = runner("stop", "--now", "--run-dir", rd.path)
        assert stop.returncode in (Exit.OK, Exit.DAMAGED), (stop.returncode, stop.stderr)
        check_stopped(rd, engine, v, run_id)


@pytest.mark.parametrize("kind", ["fifo", "deep-json", "dev-zero", "directory"])
@pytest.mark.parametrize("name", ["engine.json", "state.json", "stop-request.json", "child", "lock"])
def test_hard_stop_stops_a_run_whatever_its_directory_holds(runs, victim, name, kind):
    """Path: `runner stop` (lodge, signal, wait for the engine, fall back to the force)
    with one file damaged: a request file it cannot write or an engine.json it cannot
    read does not stop the stop; it signals the engine found by the lock, or forces."""
    with damaged_run(runs, victim, name, kind) as (rd, engine, v, run_id):
        stop = runner("stop", "--run-dir", rd.path)
        assert stop.returncode in (Exit.OK, Exit.DAMAGED, Exit.STOP_FORCED), (stop.returncode, stop.stderr)
        check_stopped(rd, engine, v, run_id)


@pytest.mark.parametrize("kind", ["fifo", "deep-json", "binary", "directory", "dev-zero"])
def test_status_names_a_damaged_state_and_exits_damaged(runs, victim, kind):
    """Path: `runner status` on a damaged state.json: one line naming state.json and
    what is wrong, exit DAMAGED, the rest still shown."""
    rd, v = start(runs, victim)
    path = rd.state
    original = path.read_bytes()
    damage(path, "state.json", kind)
    try:
        proc = runner("status", "--run-dir", rd.path)
        assert proc.returncode == Exit.DAMAGED, proc.stderr
        assert "state.json" in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr
        assert f"run {rd.run_id}" in proc.stdout
    finally:
        undamage(path, original)
    assert R.runner("stop", "--now", "--run-dir", rd.path).returncode == Exit.OK
    assert v.wait_gone(5.0)


def test_damaged_files_are_named_in_the_stop_output(runs, victim):
    """Path: the stop's output names each damaged file (a FIFO engine.json and a
    symlinked state.json at once) on one line, and exits DAMAGED."""
    rd, v = start(runs, victim)
    engine = identity_file.read(rd.engine_identity)
    run_id = rd.run_id
    saved = {p: p.read_bytes() for p in (rd.engine_identity, rd.state)}
    damage(rd.engine_identity, "engine.json", "fifo")
    damage(rd.state, "state.json", "dev-zero")
    try:
        proc = runner("stop", "--now", "--run-dir", rd.path)
        assert proc.returncode == Exit.DAMAGED, proc.stderr
        (line,) = [l for l in proc.stderr.splitlines() if "damaged run directory" in l]
        assert "engine.json: a FIFO" in line and "state.json: a symlink" in line, line
        check_stopped(rd, engine, v, run_id)
    finally:
        for p, data in saved.items():
            undamage(p, data)


@pytest.mark.parametrize("kind", ["fifo", "deep-json", "directory", "dev-zero", "binary"])
@pytest.mark.parametrize("name", ["engine.json", "child", "state.json", "cgroup", "run-id"])
def test_resume_of_a_damaged_run_never_hangs_and_never_crashes(runs, victim, name, kind):
    """Path: `runner resume` on a stopped run with one file damaged. The dead attempt's
    identity files (engine.json, children/) are removed, whatever they are, and the run
    resumes; any other damaged file is named on one line with exit DAMAGED and no
    engine is started. Never a hang, never exit 70, nothing of the run left alive."""
    rd, v = start(runs, victim)
    run_id = rd.run_id
    assert R.runner("stop", "--now", "--run-dir", rd.path).returncode == Exit.OK
    assert v.wait_gone(5.0)
    path = rd.children / "4194000.json" if name == "child" else target(rd, name)
    original = path.read_bytes() if path.is_file() else None
    damage(path, name, kind)
    try:
        proc = runner("resume", "--run-dir", rd.path, "--detach")
        if name in ("engine.json", "child"):
            assert proc.returncode == Exit.OK, proc.stderr
            assert R.runner("stop", "--now", "--run-dir", rd.path).returncode == Exit.OK
        else:
            assert proc.returncode == Exit.DAMAGED, proc.stderr
            assert name in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr
            assert not rd.is_live()
    finally:
        undamage(path, original)
    R.wait_engine_exit(rd)
    assert R.tagged(run_id) == []

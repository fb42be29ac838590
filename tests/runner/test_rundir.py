"""rundir.py: layout, freezing the spec, the engine lock (across processes), run discovery."""

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from runner.errors import BadInput, NoLiveRun, RunLocked
from runner.exitcodes import Exit
from runner.files import rundir

SPEC = 'items = ["a"]\n[provider]\ncommand = ["agent"]\n'

# A stand-in engine: takes the lock through the real code, says so, holds it until stdin closes.
HOLDER = (
    "import sys\n"
    "from runner.files.rundir import RunDir\n"
    "lock = RunDir(sys.argv[1]).acquire_lock()\n"
    "print('locked', flush=True)\n"
    "sys.stdin.read()\n"
)


@pytest.fixture
def spec_file(tmp_path):
    p = tmp_path / "in.toml"
    p.write_text(SPEC)
    return p


@pytest.fixture
def holders():
    """Start lock-holding processes; every one is killed and reaped, even on failure."""
    procs = []

    def start(path):
        p = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        procs.append(p)
        line = p.stdout.readline()
        assert line == "locked\n", (line, p.stderr.read() if p.poll() is not None else "")
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
        for f in (p.stdin, p.stdout, p.stderr):
            f.close()


def test_layout_and_run_id(tmp_path):
    rd = rundir.RunDir(tmp_path / "r1")
    assert rd.run_id == "r1"
    assert rd.path.is_absolute()
    names = {
        "spec": "spec.toml",
        "state": "state.json",
        "journal": "journal.jsonl",
        "engine_identity": "engine.json",
        "lock": "lock",
        "children": "children",
        "cgroup_file": "cgroup",
        "output": "output",
        "stop_request": "stop-request.json",
        "stop_file": "STOP",
        "pause_file": "PAUSE",
        "archive": "archive",
        "engine_log": "engine.log",
        "run_id_file": "run-id",
        "dir_identity_file": "dir-identity",
    }
    for attr, name in names.items():
        assert getattr(rd, attr) == rd.path / name


def test_create_freezes_spec_and_refuses_a_second_create(tmp_path, spec_file):
    """Path: create copies the spec bytes; a directory that holds a run is refused."""
    rd = rundir.RunDir.create(tmp_path / "runs" / "r1", spec_file)
    assert rd.spec.read_text() == SPEC
    spec_file.write_text("changed later")  # the frozen copy does not follow the original
    assert rd.spec.read_text() == SPEC
    assert rd.children.is_dir() and rd.output.is_dir() and rd.archive.is_dir()
    assert [p.name for p in rd.path.iterdir() if p.name.startswith(".")] == []
    with pytest.raises(BadInput, match="already holds a run"):
        rundir.RunDir.create(rd.path, spec_file)


def test_create_with_unreadable_spec(tmp_path):
    with pytest.raises(BadInput, match="cannot read the spec"):
        rundir.RunDir.create(tmp_path / "r", tmp_path / "missing.toml")


def test_lock_refuses_a_second_locker_from_another_process(tmp_path, spec_file, holders):
    """Path: acquire_lock's LOCK_EX|LOCK_NB. Ablation: a blocking flock would hang here
    (timeout), no flock at all would let the second engine in: red."""
    rd = rundir.RunDir.create(tmp_path / "r", spec_file)
    assert not rd.is_live()
    holder = holders(rd.path)
    assert rd.is_live()
    t0 = time.monotonic()
    with pytest.raises(RunLocked) as info:
        rd.acquire_lock()
    assert time.monotonic() - t0 < 1.0
    assert info.value.exit_code == Exit.REFUSED
    # The kernel drops the lock with its holder, however it died.
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert not rd.is_live()
    with rd.acquire_lock() as lock:
        assert lock.fd is not None
        assert rd.is_live()  # the probe uses its own descriptor, so it sees our own lock too
    assert not rd.is_live()


def test_lock_fd_is_not_inherited(tmp_path, spec_file):
    """Path: the lock descriptor is close-on-exec, so a child cannot keep a dead engine 'live'."""
    rd = rundir.RunDir.create(tmp_path / "r", spec_file)
    lock = rd.acquire_lock()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], close_fds=False)
    try:
        assert not os.get_inheritable(lock.fd)
        assert str(rd.lock) not in _open_files(child.pid)
        lock.release()
        assert not rd.is_live(), _lock_holders(rd.lock)
    finally:
        child.kill()
        child.wait()


def _open_files(pid):
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            found.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except FileNotFoundError:
            pass  # the descriptor listdir itself used
    return found


def _lock_holders(path):
    """Who holds a lock on `path`, from /proc/locks: for a failure message."""
    inode = os.stat(path).st_ino
    with open("/proc/locks") as f:
        return [line.strip() for line in f if line.split()[5].rsplit(":", 1)[-1] == str(inode)]


def test_is_live_without_a_lock_file(tmp_path):
    rd = rundir.RunDir(tmp_path / "nothing")
    assert not rd.is_live()
    assert not rd.lock.exists()


def test_new_run_id_shape_and_order():
    a = rundir.new_run_id()
    assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{6}", a)
    ids = {rundir.new_run_id() for _ in range(200)}
    assert len(ids) == 200
    assert rundir.default_base() == rundir.Path(".runner/runs")


def test_resolve_with_zero_one_two_live_runs(tmp_path, spec_file, holders):
    """Path: resolve's discovery. Ablation: picking the newest run instead of refusing makes
    the 0-live and 2-live cases return a run: red."""
    base = tmp_path / "runs"
    with pytest.raises(NoLiveRun, match="no live run under"):
        rundir.resolve(None, base)
    r1 = rundir.RunDir.create(base / "20260101-000000-aaaaaa", spec_file)
    r2 = rundir.RunDir.create(base / "20260101-000001-bbbbbb", spec_file)
    (base / "not-a-run").mkdir()
    assert rundir.list_runs(base) == [r1, r2]

    with pytest.raises(NoLiveRun) as info:
        rundir.resolve(None, base)
    assert "\n" not in str(info.value) and r2.run_id in str(info.value)

    holders(r2.path)
    assert rundir.resolve(None, base) == r2

    holders(r1.path)
    with pytest.raises(NoLiveRun) as info:
        rundir.resolve(None, base)
    msg = str(info.value)
    assert "\n" not in msg and str(r1.path) in msg and str(r2.path) in msg
    assert info.value.exit_code == Exit.NO_LIVE_RUN

    # An explicit --run-dir is taken as given, live or not, but must hold a run.
    assert rundir.resolve(str(r1.path)) == r1
    with pytest.raises(NoLiveRun, match="no run there"):
        rundir.resolve(str(base / "not-a-run"))


def test_resolve_with_a_custom_selector(tmp_path, spec_file):
    base = tmp_path / "runs"
    r1 = rundir.RunDir.create(base / "a", spec_file)
    rundir.RunDir.create(base / "b", spec_file)
    assert rundir.resolve(None, base, want=lambda r: r.path.name == "a", what="resumable") == r1
    with pytest.raises(NoLiveRun, match="no resumable run"):
        rundir.resolve(None, base, want=lambda r: False, what="resumable")


def test_run_ids_are_unique_even_when_run_directories_share_a_name(tmp_path, spec_file):
    """Two runs whose --run-dir is called `run` must not share a RUNNER_RUN_ID tag or a
    cgroup name: one run's tag sweep would kill the other's processes."""
    r1 = rundir.RunDir.create(tmp_path / "x" / "run", spec_file)
    r2 = rundir.RunDir.create(tmp_path / "y" / "run", spec_file)
    assert r1.run_id != r2.run_id
    assert rundir.RunDir(r1.path).run_id == r1.run_id  # read back by a later command
    named = rundir.RunDir.create(tmp_path / rundir.new_run_id(), spec_file)
    assert named.run_id == named.path.name

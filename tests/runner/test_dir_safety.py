"""Whose directories the runner acts on, and how it writes in them (issue 17 items 2-4,
issue 18 items 1-2), against real processes, as root and as a second user made here.

- another user's directory, or one others can write in, is refused by `run` and `resume`
  (FOREIGN_DIR) unless told otherwise (ownership.py);
- no write follows a link: a link planted at any path the runner writes, pointing at a
  root-owned file, leaves that file as it was (dirfd.py);
- a stop by root leaves the owner a directory they can keep using; a user without
  rights on root's run gets one line (NOT_PERMITTED);
- a removed run directory stops its run; a moved one keeps working.
"""

import errno
import json
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import runs as R

import runner
from reliability import soak_seams
from runner import defaults
from runner.events import StopKind
from runner.exitcodes import Exit
from runner.files import identity_file
from runner.files.rundir import RunDir
from runner.proc import identity, reaper, signals
from runner.proc.cgroup import run_cgroup_path

pytestmark = pytest.mark.timeout(180)

# A trapping provider: the shell and its sleep ignore SIGTERM (an ignored signal is
# inherited across exec), so only a SIGKILL ends the call.
TRAP = ["/bin/sh", "-c", "trap '' TERM; sleep 7200"]
# A provider whose call ends by itself, for graceful stops.
SHORT = ["/bin/sh", "-c", "sleep 0.5"]
STOP = {"kill_grace": 1.0}
CODE_ROOT = str(Path(runner.__file__).resolve().parents[1])  # the code under test (a mutation's scratch copy)


class User:
    def __init__(self, name, uid, gid, python, code):
        self.name, self.uid, self.gid, self.python, self.code = name, uid, gid, python, code

    def argv(self, *args):
        return ["runuser", "-u", self.name, "--", "env", f"PYTHONPATH={self.code}", self.python, *args]

    def runner(self, *args, cwd=None, timeout=60, env=None):
        return subprocess.run(
            self.argv("-m", "runner", *map(str, args)),
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            env=env,
        )


def _readable_code():
    """A copy of the code under test that another user may read (a mutation's scratch
    copy, like pytest's tmp_path, is 0700)."""
    code = Path(tempfile.mkdtemp(prefix="runner-code-", dir="/tmp"))
    shutil.copytree(Path(CODE_ROOT) / "runner", code / "runner", ignore=shutil.ignore_patterns("__pycache__"))
    for root, _dirs, files in os.walk(code):
        os.chmod(root, 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)
    return code


def _python_for(name, code):
    """An interpreter the second user may execute, of this one's version (this one may
    live under /root, closed to other users)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (sys.executable, shutil.which(version), f"/usr/bin/{version}", "/usr/bin/python3"):
        if not candidate:
            continue
        probe = subprocess.run(
            ["runuser", "-u", name, "--", "env", f"PYTHONPATH={code}", candidate, "-c", "import runner.cli"],
            capture_output=True,
            stdin=subprocess.DEVNULL,
        )
        if probe.returncode == 0:
            return candidate
    return None


@pytest.fixture(scope="module")
def user():
    """A second user, made here with useradd and removed after the module."""
    if os.geteuid() != 0:
        pytest.skip("needs root: creates a second user (useradd) and acts as root on its directories")
    if not (shutil.which("useradd") and shutil.which("userdel") and shutil.which("runuser")):
        pytest.skip("needs useradd, userdel and runuser")
    name = f"rs{uuid.uuid4().hex[:8]}"
    made = subprocess.run(["useradd", "-M", "-s", "/bin/sh", name], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"useradd failed: {made.stderr.strip()}")
    code = _readable_code()
    try:
        python = _python_for(name, code)
        if python is None:
            pytest.skip(f"no interpreter that user {name} may run imports the runner from {code}")
        pw = pwd.getpwnam(name)
        yield User(name, pw.pw_uid, pw.pw_gid, python, code)
    finally:
        subprocess.run(["userdel", name], capture_output=True)
        shutil.rmtree(code, ignore_errors=True)


@pytest.fixture
def area(user):
    """A directory both users reach (0711, like a home's parent), holding the user's own
    home (0700) and root's (0700); killed and removed afterwards."""
    top = Path(tempfile.mkdtemp(prefix="runner-dirsafety-", dir="/tmp"))
    top.chmod(0o711)
    home = top / "home"
    home.mkdir(mode=0o700)
    os.chown(home, user.uid, user.gid)
    mine = top / "root"
    mine.mkdir(mode=0o700)
    ids = []
    yield top, home, mine, ids
    for run_id in ids:
        _kill_and_remove(run_id)
    shutil.rmtree(top, ignore_errors=True)


def _spec(path, provider, owner=None, items=("a",)):
    R.write_spec(path, items=items, provider=provider, stop=STOP)
    if owner is not None:
        os.chown(path, owner.uid, owner.gid)
    return path


def _precious(top):
    target = top / "precious"
    target.write_bytes(b"root's own bytes\n")
    target.chmod(0o600)
    st = target.stat()
    return target, (target.read_bytes(), st.st_mode, st.st_uid, st.st_mtime_ns)


def _unchanged(target, before):
    st = target.stat()
    return (target.read_bytes(), st.st_mode, st.st_uid, st.st_mtime_ns) == before


def _not_owned_by(path, uid):
    out = []
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            p = os.path.join(root, name)
            if os.lstat(p).st_uid != uid:
                out.append(p)
    return out


def _wait(predicate, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def _track(ids, run_dir):
    try:
        ids.append(RunDir(run_dir).run_id)
    except Exception:
        pass


PLANTED = [
    "output/1-0001-0-session.log",
    "state.json",
    "journal.jsonl",
    "lock",
    "stop-request.lock",
    "engine.json",
    "children/1.json",
    "run-id",
    "engine.log",
    "cgroup",
    "output",
    "children",
    "archive",
]


@pytest.mark.parametrize("planted", PLANTED)
def test_a_link_planted_in_another_users_directory_never_writes_roots_file(user, area, planted):
    """Path: ownership.check in `runner run` (FOREIGN_DIR before anything is created),
    then, told to go on (--allow-foreign-dir), dirfd.py's writes relative to the pinned
    directory: no component followed if it is a link, new files O_CREAT|O_EXCL. A user
    prepares the run directory with a link at `planted` to a root-owned file; root's run
    is refused; root's run with the option and root's stops never change the file, and
    the link is either replaced as a name of its own, or named as damage.
    Ablations: foreign-dir-refusal (the refusal goes), nofollow-writes (root's engine
    truncates the file through output/1-0001-0-session.log)."""
    top, home, _, ids = area
    target, before = _precious(top)
    bait = home / "bait"
    (bait / "output").mkdir(parents=True)
    (bait / "children").mkdir()
    link = bait / planted
    if link.exists():
        link.rmdir()
    link.symlink_to(target)
    subprocess.run(["chown", "-R", "-h", f"{user.uid}:{user.gid}", str(bait)], check=True)
    spec = _spec(top / "root" / "spec.toml", TRAP)

    refused = R.runner("run", spec, "--run-dir", bait, "--detach")
    assert refused.returncode == Exit.FOREIGN_DIR, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "--allow-foreign-dir" in refused.stderr
    assert not os.path.lexists(bait / "spec.toml"), "a refused run created its spec"
    assert _unchanged(target, before)

    told = R.runner("run", spec, "--run-dir", bait, "--detach", "--allow-foreign-dir")
    _track(ids, bait)
    said = told.stderr
    if told.returncode == 0:
        _first_call_settled(RunDir(bait))
        said += R.runner("stop", "--run-dir", bait).stderr
        said += R.runner("stop", "--now", "--run-dir", bait).stderr
    try:
        said += (bait / "journal.jsonl").read_text() if not (bait / "journal.jsonl").is_symlink() else ""
    except OSError:
        pass
    assert _unchanged(target, before), f"root's file was written through {planted}"
    assert not link.is_symlink() or str(link) in said or link.name in said, (
        f"the link at {planted} was left in place and never named: {said[-2000:]}"
    )


def test_a_directory_others_can_write_in_is_refused_unless_told(user, area):
    """Path: ownership.check: a run directory another user owns, or one created in a
    directory anyone may write in without the sticky bit, is refused (FOREIGN_DIR, one
    line naming why and the way to say otherwise); RUNNER_ALLOW_FOREIGN_DIR=1 says it.
    A sticky world-writable parent (/tmp's mode) is fine. Ablation: foreign-dir-refusal."""
    top, home, mine, ids = area
    spec = _spec(mine / "spec.toml", SHORT)
    shared = top / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    out = R.runner("run", spec, "--run-dir", shared / "run", "--detach")
    assert out.returncode == Exit.FOREIGN_DIR, out.stderr
    assert "writable by" in out.stderr and "RUNNER_ALLOW_FOREIGN_DIR" in out.stderr
    assert not (shared / "run").exists()

    sticky = top / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    ok = R.runner("run", spec, "--run-dir", sticky / "run")
    _track(ids, sticky / "run")
    assert ok.returncode == Exit.OK, ok.stderr

    users = home / "theirs"
    users.mkdir()
    os.chown(users, user.uid, user.gid)
    out = R.runner("run", spec, "--run-dir", users)
    assert out.returncode == Exit.FOREIGN_DIR and "owned by" in out.stderr, out.stderr
    allowed = R.runner("run", spec, "--run-dir", users, env={**os.environ, "RUNNER_ALLOW_FOREIGN_DIR": "1"})
    _track(ids, users)
    assert allowed.returncode == Exit.OK, allowed.stderr
    journal = (users / "journal.jsonl").read_bytes()
    resumed = R.runner("resume", "--run-dir", users)
    assert resumed.returncode == Exit.FOREIGN_DIR and "--allow-foreign-dir" in resumed.stderr, resumed.stderr
    assert (users / "journal.jsonl").read_bytes() == journal, "a refused resume wrote in the directory"


def test_a_hard_link_where_the_runner_appends_is_damage(user, area):
    """Path: untrusted.open_regular for writing refuses a file with more than one link:
    a hard link to a root-owned file at journal.jsonl, in a directory root was told to
    trust, is named as damage and the file is not appended to. Ablation: none."""
    top, home, _, ids = area
    target, before = _precious(top)
    bait = home / "bait"
    bait.mkdir()
    os.link(target, bait / "journal.jsonl")
    subprocess.run(["chown", "-h", f"{user.uid}:{user.gid}", str(bait)], check=True)
    spec = _spec(top / "root" / "spec.toml", SHORT)
    out = R.runner("run", spec, "--run-dir", bait, "--allow-foreign-dir")
    _track(ids, bait)
    assert out.returncode == Exit.DAMAGED and "hard links" in out.stderr, out.stderr
    assert _unchanged(target, before)


def _status(user, run_dir):
    out = user.runner("status", "--json", "--run-dir", run_dir)
    assert out.returncode == Exit.OK, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("mode", ["hard", "now", "graceful"])
def test_root_stops_a_users_run_and_the_user_keeps_using_it(user, area, mode):
    """Path: a stop by root in a user's run directory: every file it creates there
    (stop-request.json, stop-request.lock, stop.lock, archive/) is given to the
    directory's owner (dirfd.own), so the user's own engine reads the request and the
    user's later resume and stop work; no phantom request is left. Ablation: none (the
    chown is the path; without it the user's stop after root's exits 10). The graceful
    mode's calls are held (R.gated) until root's request is lodged, and again for the
    resumed attempt, so that each stop finds the run live however slow the machine."""
    _, home, _, ids = area
    gate = home / "gate"
    provider = R.gated(gate) if mode == "graceful" else TRAP
    spec = _spec(home / "spec.toml", provider, owner=user, items=("a", "b", "c"))
    run_dir = home / "run"
    started = user.runner("run", spec, "--run-dir", run_dir, "--detach")
    _track(ids, run_dir)
    assert started.returncode == Exit.OK, started.stderr
    R.wait_event(RunDir(run_dir), "session-start", timeout=10)

    flag = {"hard": [], "now": ["--now"], "graceful": ["--graceful"]}[mode]
    stopped = R.runner("stop", *flag, "--run-dir", run_dir)
    assert stopped.returncode == Exit.OK, stopped.stderr
    gate.touch()  # lodged: the call in flight may end now (graceful)
    assert _wait(lambda: not RunDir(run_dir).is_live(), 15), "the run did not end after root's stop"
    assert _not_owned_by(run_dir, user.uid) == [], "root left files the user does not own"
    status = _status(user, run_dir)
    assert status["stopped"] and status["pending_stop"] is None, status

    gate.unlink()  # the resumed attempt's call is held until the user's stop
    resumed = user.runner("resume", "--run-dir", run_dir, "--detach")
    assert resumed.returncode == Exit.OK, resumed.stderr
    own = user.runner("stop", "--now", "--run-dir", run_dir)
    assert own.returncode == Exit.OK, own.stderr
    status = _status(user, run_dir)
    assert status["stopped"] and status["pending_stop"] is None and not status["damaged"], status
    assert _not_owned_by(run_dir, user.uid) == []


def test_a_user_without_rights_on_roots_run_gets_one_line(user, area):
    """Path: ownership.check_access before a stop or resume resolves the run: a user who
    cannot reach root's run directory, or cannot act in it, gets one line naming the
    owner and NOT_PERMITTED; nothing is signalled or written, the run goes on (it used to
    say "run None killed (0 died at SIGTERM...)" and exit 10). Ablation: none."""
    top, _, mine, ids = area
    spec = _spec(mine / "spec.toml", TRAP)
    run_dir = mine / "run"
    assert R.runner("run", spec, "--run-dir", run_dir, "--detach").returncode == Exit.OK
    _track(ids, run_dir)
    rd = RunDir(run_dir)
    try:
        # Idle in its call (its child file written, children/ made): from then on the
        # engine adds no name, so a listing now is the run's, not a write in flight.
        R.wait_in_call(rd, timeout=30)
        before = sorted(os.listdir(run_dir))
        for parent_mode in (0o700, 0o755):
            mine.chmod(parent_mode)
            run_dir.chmod(parent_mode)
            for args in (["stop"], ["stop", "--now"], ["stop", "--graceful"], ["resume"]):
                out = user.runner(*args, "--run-dir", run_dir)
                assert out.returncode == Exit.NOT_PERMITTED, (args, out.stderr)
                lines = out.stderr.strip().splitlines()
                assert len(lines) == 1 and "root" in lines[0] and "nothing was signalled" in lines[0], lines
        assert rd.is_live() and sorted(os.listdir(run_dir)) == before
    finally:
        R.runner("stop", "--now", "--run-dir", run_dir)


def _kill_and_remove(run_id):
    """What a failed (or ablated) test left: the run's processes, then its cgroup."""
    reaper.kill_tagged(run_id, 0.2)
    path = run_cgroup_path(run_id)
    if path is not None and path.exists():
        for sub in (path / "work", path / "engine", path):
            try:
                sub.rmdir()
            except OSError:
                pass


def _first_call_settled(rd):
    """The engine's first call got as far as it will: its session-start journaled, then its
    child file written (the call runs: its output file was opened before the spawn) or the
    engine gone (it refused a planted file). Stopped any sooner, an engine that would
    write through a planted link may not have come to that write yet."""
    R.wait_event(rd, "session-start")
    engine = identity_file.read(rd.engine_identity)
    deadline = time.monotonic() + 30
    while identity.is_running(engine) and not any(rd.children.glob("*.json")):
        assert time.monotonic() < deadline, "the engine's first call neither started nor ended"
        time.sleep(0.01)


def _tagged_or_cgroup(run_id):
    path = run_cgroup_path(run_id)
    return R.tagged(run_id) or (path is not None and path.exists())


def _rm_rf(path):
    """`rm -rf`, again while the live engine creates a file in between (ENOTEMPTY), as a
    user would run it again: the directory is gone when this returns."""
    for _ in range(100):
        try:
            shutil.rmtree(path)
            return
        except OSError as exc:
            if exc.errno != errno.ENOTEMPTY:
                raise
            time.sleep(0.01)
    raise AssertionError(f"{path}: still not removed")


def test_rm_rf_of_a_live_run_stops_it(runs):
    """Path: the engine's watchdog sees its pinned run directory gone (dirfd.gone: link
    count 0; inotify IN_DELETE_SELF wakes it) and stops the run hard: nothing of the run
    (no tagged process, no cgroup) is left within kill_grace + 2 s of `rm -rf`.
    The directory is removed only once the engine is idle in its provider call (its
    child file written, runs.wait_in_call): it writes nothing more by itself, so no
    failed write of its own can end the run; only the watchdog can. Ablation:
    vanished-dir-stop (the engine and its children live on)."""
    spec = runs.spec(provider=TRAP, stop=STOP)
    rd = runs.start(spec)
    R.wait_in_call(rd)
    run_id = rd.run_id
    try:
        _rm_rf(rd.path)
        assert _wait(lambda: not _tagged_or_cgroup(run_id), STOP["kill_grace"] + 2.0), (
            f"still alive after rm -rf: {R.tagged(run_id)}"
        )
    finally:
        _kill_and_remove(run_id)


@pytest.mark.parametrize("how", ["all", "run-dir"])
def test_list_and_stop_all_find_a_live_engine_whose_directory_is_gone(runs, how):
    """Path: vanished.engines (an engine's argv, its deleted pinned directory, its tag),
    shown by `runner list` as "vanished" and killed by `runner stop --all` (or `runner
    stop --now --run-dir` naming the removed directory) through its tag and cgroup. The
    engine is a real one that cannot stop itself (SIGSTOPped before the `rm -rf`, as a
    hung engine, or one whose own watch is ablated, would be); its trapping provider
    lives on until the stop. Ablation: none (the list and the stop
    are the path; vanished-dir-stop turns the other test red)."""
    spec = runs.spec(provider=TRAP, stop=STOP)
    rd = runs.start(spec)
    R.wait_event(rd, "session-start", timeout=10)
    run_id = rd.run_id
    engine = identity_file.read(rd.engine_identity)
    try:
        os.kill(engine.pid, signal.SIGSTOP)
        shutil.rmtree(rd.path)
        listed = R.runner("list", "--json", "--runs-dir", runs.tmp_path)
        rows = json.loads(listed.stdout)
        assert [(r["run_id"], r["status"], r["live"]) for r in rows] == [(run_id, "vanished", True)], rows
        assert R.tagged(run_id), "the provider should still be alive before the stop"
        where = ["--all", "--runs-dir", runs.tmp_path] if how == "all" else ["--now", "--run-dir", rd.path]
        stopped = R.runner("stop", *where)
        assert stopped.returncode == Exit.OK, stopped.stderr
        assert run_id in stopped.stdout and "is gone" in stopped.stdout
        assert _wait(lambda: not _tagged_or_cgroup(run_id), 2.0), R.tagged(run_id)
    finally:
        try:
            os.kill(engine.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        _kill_and_remove(run_id)


def _trapping_run_in_call(runs):
    """A run whose provider traps SIGTERM, once its engine is idle in the call: (RunDir,
    run id, the engine's recorded identity)."""
    rd = runs.start(runs.spec(provider=TRAP, stop=STOP))
    R.wait_in_call(rd)
    return rd, rd.run_id, identity_file.read(rd.engine_identity)


def _half_remove(rd):
    """What an `rm -rf` that lost its race with a stopper leaves: every entry of the run
    directory removed, then a file a stopper made meanwhile (its request's lock), which
    made rm's last rmdir fail ("Directory not empty"). Made here, deterministically: the
    directory stays, its spec.toml, state and identity files gone. Returns its names."""
    for name in os.listdir(rd.path):
        path = rd.path / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    (rd.path / "stop-request.lock").touch()
    return sorted(os.listdir(rd.path))


_PINS_DIR_AND_SUBDIR = """
import os, sys
run = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
sub = os.open(os.path.join(sys.argv[1], "children"), os.O_RDONLY | os.O_DIRECTORY)
print("ready", flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("removal", ["half", "whole"])
def test_a_removed_subdirectory_held_open_is_not_a_removed_run(tmp_path, removal):
    """Path: vanished.gone_why judges REMOVED by the directory the tag's identity names
    alone. A process pins a run directory and, at that moment, its children/ too (an
    engine SIGSTOPped, or hung, while it wrote a snapshot there); an `rm -rf` that lost
    its race (everything removed, the run directory left with a stopper's lock file in
    it) makes it EMPTIED, half removed, not REMOVED; with the run directory removed too,
    REMOVED. Found red under two CPU hogs: `runner list` called a half-removed run
    "removed" when its SIGSTOPped engine held children/ open. Ablation:
    `removed-is-the-pinned-dir` (any removed directory it holds: REMOVED, red)."""
    from runner.proc import vanished

    run_dir = tmp_path / "run"
    (run_dir / "children").mkdir(parents=True)
    (run_dir / "spec.toml").write_text("")
    st = os.stat(run_dir)
    key = f"20260101-000000-abcdef.{st.st_dev}-{st.st_ino}"
    holder = subprocess.Popen(
        [sys.executable, "-c", _PINS_DIR_AND_SUBDIR, str(run_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "ready"
        assert vanished.gone_why(holder.pid, key) is None
        shutil.rmtree(run_dir / "children")
        (run_dir / "spec.toml").unlink()
        if removal == "half":
            (run_dir / "stop-request.lock").touch()
            assert vanished.gone_why(holder.pid, key) == vanished.EMPTIED
        else:
            shutil.rmtree(run_dir)
            assert vanished.gone_why(holder.pid, key) == vanished.REMOVED
    finally:
        holder.kill()
        holder.communicate(timeout=30)


def test_a_half_removed_run_directory_stops_its_run(runs):
    """Path: the engine's watchdog sees its pinned run directory hold no spec.toml any more
    (dirfd.gone: half removed, an `rm -rf` whose last rmdir failed; inotify's IN_DELETE
    wakes it) and stops the run hard, as for a removed one, sealing the directory
    (dirfd.seal): the engine exits (its pidfd) within kill_grace + 2 s, nothing of the
    run is left, and it made no file there (a second `rm -rf` of the directory then
    succeeds). The half-removed state is made by the test, once the engine is idle in its
    call. Ablation: half-removed-dir-is-gone (the engine and its children live on)."""
    rd, run_id, engine = _trapping_run_in_call(runs)
    try:
        left = _half_remove(rd)
        assert signals.wait_gone(engine, STOP["kill_grace"] + 2.0), "the engine lives on in its half-removed directory"
        assert _wait(lambda: not _tagged_or_cgroup(run_id), 2.0), R.tagged(run_id)
        assert sorted(os.listdir(rd.path)) == left, "the engine made files in a directory being removed"
        os.unlink(rd.path / "stop-request.lock")
        os.rmdir(rd.path)
    finally:
        _kill_and_remove(run_id)


@pytest.mark.parametrize(
    "flags, code",
    [([], Exit.OK), (["--now"], Exit.OK), (["--graceful", "--wait"], Exit.STOPPED)],
    ids=["stop", "now", "graceful-wait"],
)
def test_every_stop_mode_stops_a_run_whose_directory_is_half_removed(runs, flags, code):
    """Path: vanished.gone_why's EMPTIED (the engine's pinned directory, reached, holds no
    spec.toml) through control/stop.py's stop_path (`_vanished_at`, stop_vanished): a
    stopper naming a half-removed run directory (no spec.toml, state or identity files;
    a stopper's lock file left there) stops the run by its tag and cgroup, exits with its
    documented code (0; STOPPED for `--graceful --wait`, the code of a run whose directory
    went while it waited) and one line saying the directory is gone, and makes no file
    there. The engine cannot stop itself (SIGSTOPped before the directory is emptied, as
    a hung one would be); `runner list` shows it vanished, half removed. Ablation:
    half-removed-dir-vanished (no run there: exit NO_LIVE_RUN, the run left alive)."""
    rd, run_id, engine = _trapping_run_in_call(runs)
    try:
        os.kill(engine.pid, signal.SIGSTOP)
        left = _half_remove(rd)
        rows = json.loads(R.runner("list", "--json", "--runs-dir", runs.tmp_path).stdout)
        assert [(r["run_id"], r["status"], r["live"]) for r in rows] == [(run_id, "vanished", True)], rows
        assert any("half removed" in str(r) for r in rows), rows
        t0 = time.monotonic()
        stopped = R.runner("stop", *flags, "--run-dir", rd.path)
        took = time.monotonic() - t0
        lines = [line for line in (stopped.stdout + stopped.stderr).splitlines() if line.strip()]
        assert stopped.returncode == code, (stopped.returncode, lines)
        assert len(lines) == 1 and "is gone" in lines[0] and run_id in lines[0], lines
        assert _wait(lambda: not _tagged_or_cgroup(run_id), 2.0), R.tagged(run_id)
        assert sorted(os.listdir(rd.path)) == left, "the stop made files in a directory being removed"
        # --now's worst case bounds every mode here: a vanished run is stopped as --now stops it.
        assert took < StopKind.NOW.worst(kill_grace=STOP["kill_grace"]) + defaults.CONTAINER_GRACE_MARGIN, took
    finally:
        try:
            os.kill(engine.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        _kill_and_remove(run_id)


@pytest.mark.parametrize("kind", ["graceful", "hard"])
def test_a_stop_whose_directory_is_emptied_while_it_lodges_writes_nothing_there(runs, monkeypatch, kind):
    """Path: stop_request.lodge's look under its lock, after its read and before its write
    (dirfd.gone): the directory is half removed there, at the lodge's own test seam
    (`_after_read`: an event, not a moment), and no request is written into it (a file
    made while `rm -rf` empties a directory makes the rm fail). A graceful stop says so on
    its line (NoLiveRun: the directory is gone, nothing lodged); a hard one goes on by its
    signal and ends as a vanished run's stop (exit 0, "is gone"). The engine stops the
    run itself; nothing of it is left, and the directory holds only what the rm left.
    Ablation: lodge-refuses-a-gone-dir (the request is written there, the graceful stop
    says it was lodged)."""
    from runner.control import stop
    from runner.errors import NoLiveRun
    from runner.files import dirfd, stop_request
    from runner.files.rundir import resolve

    rd, run_id, engine = _trapping_run_in_call(runs)
    left = []
    pinned = resolve(str(rd.path))
    monkeypatch.setattr(stop_request, "_after_read", lambda old: left.extend(_half_remove(pinned)))
    try:
        if kind == "graceful":
            with pytest.raises(NoLiveRun, match="is gone"):
                stop.stop(pinned, StopKind.GRACEFUL)
        else:
            result = stop.stop(pinned, StopKind.HARD)
            assert result.code == Exit.OK and "is gone" in result.message, result.lines()
        assert left == ["stop-request.lock"]
        assert signals.wait_gone(engine, STOP["kill_grace"] + 2.0), "the engine lives on"
        assert _wait(lambda: not _tagged_or_cgroup(run_id), 2.0), R.tagged(run_id)
        assert sorted(os.listdir(rd.path)) == left, "a stop made files in a directory being removed"
    finally:
        dirfd.unpin(rd.path)
        _kill_and_remove(run_id)


@pytest.mark.parametrize("mode", ["hard", "now", "graceful-wait"])
def test_mv_of_a_live_run_then_a_stop_through_the_new_path_is_truthful(runs, mode):
    """Path: the engine works through its pinned directory descriptor (dirfd.py), not the
    path it was started with: after `mv A B`, `runner stop`, `--now` and `--graceful
    --wait` through B exit 0 (4, the run stopped, for --wait), the stop is recorded in B
    (state, journal `run-stop`), no stop is left pending, nothing of the run lives, and
    the captured output is 0600. Ablation: none for the move itself (without the pin the
    engine fails to save its state and the stop exits 8)."""
    graceful = mode == "graceful-wait"
    spec = runs.spec(provider=SHORT if graceful else TRAP, items=("a", "b", "c"), stop=STOP)
    rd = runs.start(spec, name="A")
    R.wait_event(rd, "session-start", timeout=10)
    moved = runs.tmp_path / "B"
    os.rename(rd.path, moved)
    runs.started.append(moved)
    new = RunDir(moved)
    flag = {"hard": [], "now": ["--now"], "graceful-wait": ["--graceful", "--wait"]}[mode]
    out = R.runner("stop", *flag, "--run-dir", moved)
    assert out.returncode == (Exit.STOPPED if graceful else Exit.OK), out.stderr
    R.wait_engine_exit(new, timeout=10)
    state = R.state(new)
    assert state.stopped and state.status == "stopped", state
    assert R.events(new, "run-stop"), [e["event"] for e in R.journal(new)]
    status = R.runner("status", "--json", "--run-dir", moved)
    assert json.loads(status.stdout)["pending_stop"] is None
    assert not R.tagged(new.run_id)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (moved / "output").iterdir() if p.suffix == ".log"}
    assert modes and set(modes.values()) == {0o600}, modes


NPROC = 24


def test_a_users_run_at_its_rlimit_nproc_is_stopped_within_its_bound(user, area):
    """Path: the engine's stop needs no new task from the kernel: a user's run whose
    processes reached the user's RLIMIT_NPROC (set by prlimit on `runner run`; the kernel
    then refuses the user's every new task, the engine's threads too) is stopped by
    root's plain `runner stop` with exit 0 within kill_grace + CONFIRM_TIMEOUT + 1 s,
    honoured by the engine (no fallback, no `watchdog-error`), nothing of it left.
    Ablation: none (a user's run has no cgroup of its own here, so its stop never had a
    thread to start; stop-needs-no-new-thread is killed by the pids cgroup tests, where
    root's run is contained)."""
    from runner import defaults

    _, home, _, ids = area
    marker, go = home / "full", home / "go"
    provider = [user.python, "-c", soak_seams.FORK_UNTIL_FULL, str(marker), str(go)]
    spec = _spec(home / "spec.toml", provider, owner=user)
    run_dir = home / "run"
    started = subprocess.run(
        ["runuser", "-u", user.name, "--", "prlimit", f"--nproc={NPROC}:{NPROC}", "env", f"PYTHONPATH={user.code}"]
        + [user.python, "-m", "runner", "run", str(spec), "--run-dir", str(run_dir), "--detach"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    _track(ids, run_dir)
    assert started.returncode == Exit.OK, started.stderr
    rd = RunDir(run_dir)
    R.wait_event(rd, "session-start", timeout=30)
    go.touch()  # `runner run` has exited: only the run counts against the limit now
    assert _wait(marker.exists, 30), "the provider never reached the user's RLIMIT_NPROC"
    t0 = time.monotonic()
    out = R.runner("stop", "--run-dir", run_dir)
    took = time.monotonic() - t0
    assert out.returncode == Exit.OK, out.stderr
    bound = STOP["kill_grace"] + defaults.CONFIRM_TIMEOUT + 1.0
    assert took < bound, f"the stop took {took:.2f} s, over its bound of {bound:.2f} s"
    R.wait_engine_exit(rd, timeout=10)
    assert _wait(lambda: not _tagged_or_cgroup(rd.key(rd.run_id)), 5), R.tagged(rd.run_id)
    assert not R.events(rd, "watchdog-error") and not R.events(rd, "cleanup-error")
    assert [e["fallback"] for e in R.events(rd, "run-stop")] == [False]

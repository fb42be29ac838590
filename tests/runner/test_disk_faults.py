"""A full or read-only disk never loses the stop (issue 18, part 6).

Each test mounts its own file system under the test's tmp_path and starts real runs in
it: a tmpfs of a few MiB that a provider's output or an outside `dd` fills, and a
loop-mounted ext4 with errors=remount-ro that the kernel turns read-only under a live
run (ext4's trigger_fs_error). Mounts are undone in a finally; without root or mount
support the test is skipped with the reason.
"""

import contextlib
import fcntl
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
import runs as R

from runner.exitcodes import Exit
from runner.files import identity_file, reserve
from runner.files.rundir import RunDir
from runner.proc import identity, reaper

TMPFS_SIZE = "4m"
KILL_GRACE = 0.3


def _mount(argv, what):
    if os.geteuid() != 0:
        pytest.skip(f"mounting a {what} needs root")
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a {what} here: {proc.stderr.strip()}")


def _umount(path):
    if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


@pytest.fixture
def tmpfs(tmp_path):
    """A tmpfs of TMPFS_SIZE at tmp_path/disk (requested before `runs`, so that the
    runs' teardown kills what is left before the unmount)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    _mount(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", str(mnt)], "tmpfs")
    try:
        yield mnt
    finally:
        _umount(mnt)


@pytest.fixture
def ext4(tmp_path):
    """A 32 MiB ext4 image, loop-mounted with errors=remount-ro at tmp_path/disk; yields
    (mount point, a function that turns it read-only as a disk error does)."""
    image, mnt = tmp_path / "ext4.img", tmp_path / "disk"
    mnt.mkdir()
    with open(image, "wb") as f:
        f.truncate(32 * 1024 * 1024)
    if subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], capture_output=True).returncode != 0:
        pytest.skip("no mkfs.ext4 here")
    _mount(["mount", "-o", "loop,errors=remount-ro", str(image), str(mnt)], "loop ext4")
    try:
        source = subprocess.run(["findmnt", "-no", "SOURCE", str(mnt)], capture_output=True, text=True).stdout.strip()
        trigger = Path("/sys/fs/ext4") / Path(source).name / "trigger_fs_error"
        if not trigger.exists():
            pytest.skip(f"no {trigger}: cannot turn the file system read-only under a live run")

        def read_only():
            trigger.write_text("runner test: read-only under a live run\n")
            deadline = time.monotonic() + 5
            while True:
                try:
                    (mnt / ".probe").write_text("x")
                except OSError:
                    return
                assert time.monotonic() < deadline, "the file system did not turn read-only"
                time.sleep(0.02)

        yield mnt, read_only
    finally:
        _umount(mnt)
        with contextlib.suppress(OSError):
            image.unlink()


def fill(mnt):
    """Fill the file system to its last byte (big blocks, then single pages); returns the
    filler files (remove them to free the space)."""
    fillers = []
    for size in (1024 * 1024, 4096, 1):
        path = mnt / f"fill-{size}"
        fillers.append(path)
        with open(path, "ab", buffering=0) as f:
            block = b"\0" * size
            with contextlib.suppress(OSError):
                while True:
                    f.write(block)
    return fillers


def _call_running(rd, timeout=10):
    """Until the engine has written everything it writes for a call (the call's identity
    file): from then on, while the call runs, the engine writes nothing."""
    deadline = time.monotonic() + timeout
    while not any(n.endswith(".json") for n in os.listdir(rd.children)):
        assert time.monotonic() < deadline, "the call never started"
        time.sleep(0.01)
    time.sleep(0.2)


def _stopped(runs, proc, rd):
    """Everything of the run is gone, whatever the code said."""
    runs.wait_engine_exit(rd, timeout=15)
    assert not runs.tagged(rd.run_id), f"processes of the run outlived the stop: {proc.stderr}"


def test_provider_output_fills_the_disk_the_engine_goes_on(tmpfs, runs):
    """Path: _Capture in engine/child.py: a write of the captured output that the disk
    refuses (ENOSPC) stops the capture, is journaled once (`output-unwritten`) and the
    run goes on; it never crashes the engine. The run ends OK, or stopped by the engine
    itself (origin `disk`) if its own records ate the slack and it had to give up its
    reserve. Ablation capture-survives-full-disk (the OSError propagates) turns it red:
    no `output-unwritten`, and the run is stopped in its first session."""
    spec = runs.spec(
        items=["a", "b"],
        provider=["/bin/sh", "-c", "head -c 6000000 /dev/zero; exit 0"],
        stop={"kill_grace": KILL_GRACE},
    )
    proc, rd = runs.foreground(spec, name="disk/run")
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode in (Exit.OK, Exit.STOPPED), err
    unwritten = runs.events(rd, "output-unwritten")
    assert len(unwritten) == 1, runs.journal(rd)
    assert "No space left on device" in unwritten[0]["error"]
    assert not runs.events(rd, "engine-crash")
    st = runs.state(rd)
    if proc.returncode == Exit.OK:
        assert st.status == "completed"
    else:
        assert st.stopped and st.stop_origin == "disk", st
    _stopped(runs, proc, rd)


def test_full_disk_engine_gives_up_its_reserve_and_stops_the_run(tmpfs, runs, tmp_path):
    """Path: the reserve (files/reserve.py) given up when a state save finds the disk
    full; the stop controller then stops the run itself (origin `disk`, `disk-fault`
    journaled with reserve "released") while its last records fit. Item b (two hours of
    sleep) never starts, or is stopped; `status` and the foreground's last line give the
    cause. Ablations: disk-full-stops-run (no stop: item b runs on the freed space until
    the test's timeout) and engine-reserve (no reserve: the stop cannot be recorded,
    NOT_RECORDED) each turn it red."""
    flag = tmp_path / "go"
    # Item a ends when the test says so; item b would run for two hours.
    script = 'case "$1" in a*) while [ ! -e "$0" ]; do sleep 0.02; done;; *) exec sleep 7200;; esac'
    provider = ["/bin/sh", "-c", script, str(flag), "{item}"]
    # Long item names make every journal record of the item ~1.5 KiB: the journal needs
    # a new page within a few records, while the only page freed after the call is its
    # identity file's. (Each state save replaces one page with one.)
    a, b = "a" * 1500, "b" * 1500
    spec = runs.spec(items=[a, b], provider=provider, stop={"kill_grace": KILL_GRACE})
    proc, rd = runs.foreground(spec, name="disk/run")
    try:
        runs.wait_event(rd, "phase-start", phase="session")
        assert os.path.getsize(rd.path / reserve.NAME) > 0
        fill(tmpfs)
        flag.touch()  # the session ends: the engine's next record finds the disk full
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == Exit.STOPPED, (err, runs.journal(rd))
    st = runs.state(rd)
    assert st.stopped and st.stop_origin == "disk", st
    # The reserve was given up (by a state save, or by the record of the stop after the
    # next call's identity file found the disk full) and the stop recorded once.
    faults = runs.events(rd, "disk-fault")
    assert any(f["reserve"] == "released" for f in faults), runs.journal(rd)
    assert len(runs.events(rd, "run-stop")) == 1
    assert not [e for e in runs.events(rd, "session-end", item=b) if e["outcome"] != "stopped"]
    assert "No space left on device" in out.strip().splitlines()[-1], out
    status = runs.runner("status", "--run-dir", rd.path)
    assert "No space left on device" in status.stdout.splitlines()[0], status.stdout
    _stopped(runs, proc, rd)


@pytest.mark.parametrize("how", ["stop", "now"])
def test_full_disk_at_the_stop_is_recorded_then_resumes(tmpfs, runs, victim, how):
    """Path: a disk filled from outside while the provider (trapping SIGTERM) runs, then
    `runner stop` (or `--now`): the request file cannot be written (said on its own line,
    not DAMAGED: survey.note sorts a refused write apart), the engine records its stop
    (in the page its call's identity file frees, or its reserve): exit 0, one `run-stop`,
    nothing left. Space freed, `runner resume` continues the run with a new reserve.
    Ablation unwritable-is-not-damage (the refusal counts as damage: exit DAMAGED) turns
    it red."""
    prepared = victim.prepare("trap-term", cleanup=0.1)
    spec = runs.spec(items=["a"], provider=prepared.argv, stop={"kill_grace": KILL_GRACE})
    rd = runs.start(spec, name="disk/run")
    fillers = []
    try:
        runs.wait_event(rd, "phase-start", phase="session")
        prepared.adopt(timeout=10)
        fillers = fill(tmpfs)
        args = ["stop", "--run-dir", rd.path] + (["--now"] if how == "now" else [])
        proc = runs.runner(*args)
        assert proc.returncode == Exit.OK, proc.stderr
        assert "damaged" not in proc.stderr, proc.stderr
        _stopped(runs, proc, rd)
        st = runs.state(rd)
        assert st.stopped, st
        assert len(runs.events(rd, "run-stop")) == 1
        for f in fillers:
            f.unlink()
        resumed = runs.runner("resume", "--run-dir", rd.path, "--detach")
        assert resumed.returncode == Exit.OK, resumed.stderr
        runs.wait_event(rd, "run-start", attempt=2)
        assert os.path.getsize(rd.path / reserve.NAME) > 0, "the resumed engine has no reserve"
    finally:
        stop = runs.runner("stop", "--now", "--run-dir", rd.path)
    assert stop.returncode in (Exit.OK, Exit.NO_LIVE_RUN), stop.stderr
    _stopped(runs, stop, rd)


def test_full_disk_stopper_gives_up_the_dead_engines_reserve(tmpfs, runs):
    """Path: stop_record.record_forced_stop with the reserve a SIGKILLed engine left
    behind (Reserve.leftover): on a full disk, `runner stop --now` kills what the dead
    engine left, and records the stop in the reserve's space: exit 0, stopped, one
    run-stop. Ablation stopper-leftover-reserve (no leftover reserve): NOT_RECORDED."""
    spec = runs.spec(items=["a"], provider=["/bin/sh", "-c", "sleep 7200"], stop={"kill_grace": KILL_GRACE})
    rd = runs.start(spec, name="disk/run")
    try:
        runs.wait_event(rd, "phase-start", phase="session")
        engine = identity_file.read(rd.engine_identity)
        os.kill(engine.pid, 9)
        deadline = time.monotonic() + 5
        while identity.is_running(engine):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert (rd.path / reserve.NAME).exists()
        fill(tmpfs)
        proc = runs.runner("stop", "--now", "--run-dir", rd.path)
    finally:
        runs.runner("stop", "--now", "--run-dir", rd.path)
    assert proc.returncode == Exit.OK, proc.stderr
    _stopped(runs, proc, rd)
    st = runs.state(rd)
    assert st.stopped and st.stop_origin == "forced", st
    assert len(runs.events(rd, "run-stop")) == 1


@pytest.mark.parametrize("how", ["stop", "now"])
def test_read_only_disk_every_process_stopped_and_said_not_recorded(ext4, runs, victim, how):
    """Path: the file system turns read-only (errors=remount-ro) under a live run whose
    provider traps SIGTERM; `runner stop` (the engine ends the run itself, cannot record
    it) or `--now` (the stopper kills, cannot record): every process is gone, one line
    says the stop could not be recorded and why (Read-only file system), exit
    NOT_RECORDED, never DAMAGED or INTERNAL. Ablation unrecorded-stop-reported (the
    refusal is noted as any other file's and the stop exits 0) turns it red."""
    mnt, read_only = ext4
    prepared = victim.prepare("trap-term", cleanup=0.1)
    spec = runs.spec(items=["a"], provider=prepared.argv, stop={"kill_grace": KILL_GRACE})
    rd = runs.start(spec, name="disk/run")
    try:
        runs.wait_event(rd, "phase-start", phase="session")
        v = prepared.adopt(timeout=10)
        _call_running(rd)
        read_only()
        args = ["stop", "--run-dir", rd.path] + (["--now"] if how == "now" else [])
        proc = runs.runner(*args)
    finally:
        runs.runner("stop", "--now", "--run-dir", rd.path)
    assert proc.returncode == Exit.NOT_RECORDED, proc.stderr
    line = proc.stderr.strip().splitlines()[0]
    assert "could not be recorded" in line and "Read-only file system" in line, proc.stderr
    assert "every process is gone" in line
    if how == "stop":
        assert "stopped by its engine" in line, line
    _stopped(runs, proc, rd)
    assert v.wait_gone(5), f"victim processes survived: {v.members()}"


def test_stop_all_reports_the_unrecorded_stop(ext4, runs):
    """Path: `runner stop --all` ranks NOT_RECORDED above DAMAGED and OK: a read-only
    run directory among the runs makes the whole stop say so (exit NOT_RECORDED)."""
    mnt, read_only = ext4
    spec = runs.spec(items=["a"], provider=["/bin/sh", "-c", "sleep 7200"], stop={"kill_grace": KILL_GRACE})
    rd = runs.start(spec, name="disk/run")
    try:
        runs.wait_event(rd, "phase-start", phase="session")
        _call_running(rd)
        read_only()
        proc = runs.runner("stop", "--all", "--now", "--runs-dir", mnt)
    finally:
        runs.runner("stop", "--now", "--run-dir", rd.path)
    assert proc.returncode == Exit.NOT_RECORDED, proc.stderr
    _stopped(runs, proc, rd)


def test_engine_crash_names_its_cause(runs, tmp_path):
    """Path: the engine's crash branch (phases.Phases.run): the cause on one line in
    engine.log, in `engine-crash`'s `cause`, in `runner status` and in the foreground's
    last line (render.summary with the fold's cause). A crash is a bug, so one is
    injected: a sitecustomize on the engine's PYTHONPATH makes captured.file_name raise."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import runner.files.captured as c\n"
        "def boom(*a, **k):\n"
        "    raise RuntimeError('injected crash for the test')\n"
        "c.file_name = boom\n"
    )
    spec = runs.spec(items=["a"], provider=["/bin/true"])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), *sys.path]))
    run_dir = tmp_path / "run"
    runs.started.append(run_dir)
    proc = subprocess.run(
        [*runs.RUNNER, "run", str(spec), "--run-dir", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == Exit.INTERNAL, proc.stderr
    assert "injected crash for the test" in proc.stdout.strip().splitlines()[-1], proc.stdout
    rd = RunDir(run_dir)
    crash = runs.events(rd, "engine-crash")
    assert crash and "injected crash" in crash[0]["cause"]
    assert "injected crash for the test" in rd.engine_log.read_text()
    status = runs.runner("status", "--run-dir", rd.path)
    assert "injected crash for the test" in status.stdout.splitlines()[0], status.stdout


def test_read_only_disk_under_a_live_run_the_engine_stops_it_and_says_not_recorded(ext4, runs, tmp_path):
    """Path: phases.Phases.run's disk-fault branch: the file system turns read-only while
    a call runs; the call ends, the engine's next record fails (EROFS), and the engine
    ends everything the run started (an escapee in its own session included: the
    clean-up's tag sweep and cgroup kill) instead of crashing; it cannot record the stop
    and exits NOT_RECORDED, which the foreground `runner run` exits with, its last line
    saying the stop could not be recorded. Never INTERNAL."""
    mnt, read_only = ext4
    flag = tmp_path / "go"
    script = 'setsid sleep 7200 & while [ ! -e "$0" ]; do sleep 0.02; done'
    spec = runs.spec(items=["a", "b"], provider=["/bin/sh", "-c", script, str(flag)], stop={"kill_grace": KILL_GRACE})
    proc, rd = runs.foreground(spec, name="disk/run")
    try:
        runs.wait_event(rd, "phase-start", phase="session")
        _call_running(rd)
        read_only()
        flag.touch()
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        runs.runner("stop", "--now", "--run-dir", rd.path)
    assert proc.returncode == Exit.NOT_RECORDED, (out, err)
    assert "could not be recorded" in out.strip().splitlines()[-1], out
    _stopped(runs, proc, rd)


EXT4_IOC_SHUTDOWN = 0x8004587D
"""_IOR('X', 125, __u32): ext4's shutdown, what `xfs_io -x -c shutdown` asks; from then
on every operation on the file system fails with EIO (a disk gone bad)."""
EXT4_GOING_FLAGS_NOLOGFLUSH = 2


def _shut_down(mnt):
    fd = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, struct.pack("I", EXT4_GOING_FLAGS_NOLOGFLUSH))
    except OSError as exc:
        pytest.skip(f"cannot shut down an ext4 here (EXT4_IOC_SHUTDOWN: {exc.strerror})")
    finally:
        os.close(fd)


def test_an_io_error_during_a_stop_is_not_damage(ext4, tmp_path):
    """Path: an I/O error is a disk fault, never damage (issue 38.4): errors.DISK_ERRNOS
    holds EIO, and untrusted.py's open, stat and read say Unwritable for it. The run
    directory's file system is shut down (EXT4_IOC_SHUTDOWN: every operation EIO) in the
    middle of a `runner stop --now`, once its SIGTERM has reached the provider (which
    says so in a file outside that file system: an event): every process of the run
    is gone, and the stop exits NOT_RECORDED with one line naming the I/O error, never
    DAMAGED. The run is managed by hand (no `runs` fixture: its teardown reads the dead
    file system). Ablation: `io-error-is-not-damage` (DAMAGED "cannot open
    (Input/output error)": red)."""
    mnt, _ = ext4
    got = tmp_path / "got-term"
    provider = R.sh('trap "echo >> \\"$1\\"" TERM; while :; do sleep 0.05; done', str(got))
    spec = R.write_spec(tmp_path / "spec.toml", provider=provider, stop={"kill_grace": 1.0, "containment": "group"})
    rd = R.start(spec, mnt / "run")
    run_id = rd.run_id
    key = rd.key(run_id)
    stopper = None
    try:
        R.wait_event(rd, "session-start")
        stopper = subprocess.Popen(
            [*R.RUNNER, "stop", "--now", "--run-dir", str(rd.path)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        R.wait_file(got)
        _shut_down(mnt)
        out, err = stopper.communicate(timeout=60)
    finally:
        if stopper is not None and stopper.poll() is None:
            stopper.kill()
            stopper.wait()
        left = R.tagged(run_id)
        reaper.kill_tagged(key, 0.2)
    assert stopper.returncode == Exit.NOT_RECORDED, (stopper.returncode, out, err)
    line = err.strip().splitlines()[0]
    assert "could not be recorded" in line and "Input/output error" in line, err
    assert "damaged" not in err, err
    assert not left, f"pids {left} of the run outlived the stop"

"""The engine's stop kills first and looks later (issue 20): what it no longer does on the
way from a SIGTERM to its exit, each shown on real processes. Speed is the benchmark's
(`make bench`, "The stop at the kernel's speed"); these tests show the behaviour."""

import json
import os
import select
import signal
import subprocess
import threading
import time
import types
from pathlib import Path

import pytest
import runs as R

from runner.engine import child as child_mod
from runner.engine import registry as registry_mod
from runner.engine.child import run_child
from runner.engine.registry import Registry
from runner.engine.stop_controller import StopController
from runner.files.journal import Journal
from runner.files.rundir import RunDir
from runner.files.stop_request import Origin
from runner.proc import cgroup as cgroup_mod
from runner.proc import identity
from runner.proc.cgroup import RunCgroup

KILL_GRACE = 0.3
MARGIN = 1.0
needs_cgroup = pytest.mark.skipif(not cgroup_mod.available(), reason="no writable cgroup v2 with cgroup.kill")


def _watches(fd: int) -> int:
    """The inotify watches descriptor `fd` of this process holds (its fdinfo lines)."""
    text = Path(f"/proc/self/fdinfo/{fd}").read_text()
    return sum(1 for line in text.splitlines() if line.startswith("inotify wd:"))


def test_the_watchdog_drops_its_inotify_watch_as_the_stop_begins(tmp_path):
    """Path: StopController._unwatch, from request(): once a stop has begun no request is
    waited for, and the run directory's watch is removed at once, so the kernel frees it
    beside the kill (a descriptor closed with its watch still on waits for that, and
    so does the engine's exit). The descriptor stays open until close(). Ablation:
    `unwatch-on-stop` (the watch is kept until the close: red)."""
    spec = R.write_spec(tmp_path / "spec.toml", provider=["true"])
    rd = RunDir.create(tmp_path / "run", spec)
    journal = Journal(rd.journal)
    registry = Registry(rd.children, run_id=rd.run_id, kill_grace=KILL_GRACE)
    ctl = StopController(rd, registry, journal, poll=60.0)
    ctl.start()
    try:
        fd = ctl._inotify
        assert fd is not None and _watches(fd) == 1
        ctl.request(Origin.SIGNAL)
        assert ctl.stopping
        assert _watches(fd) == 0, "the run directory's watch outlived the start of the stop"
    finally:
        ctl.close()
        journal.close()


def _wrapped(cg: RunCgroup, run_id: str, prepared) -> subprocess.Popen:
    env = dict(os.environ, RUNNER_RUN_ID=run_id)
    return subprocess.Popen(cg.wrap_argv(prepared.argv), process_group=0, env=env, stdin=subprocess.DEVNULL)


@pytest.fixture
def cg():
    group = RunCgroup.create(R.new_run_id())
    yield group
    group.kill("all", timeout=5)
    group.remove()


@needs_cgroup
def test_a_contained_stop_reaches_an_escaped_scrubbed_grandchild_with_no_snapshot_first(
    tmp_path, victim, cg, monkeypatch
):
    """Path: Registry._kill_entries, contained: no /proc snapshot of the entries'
    descendants before the first signal; the cgroup holds them all. The env-scrubber's
    grandchild left the group and dropped the tag, and traps SIGTERM: the stop still
    kills it (through the cgroup), and sweep.descendants is never called. Ablation:
    `contained-stop-skips-snapshot` (the snapshot is taken first again: red)."""
    reg = Registry(tmp_path / "children", run_id=R.new_run_id(), kill_grace=KILL_GRACE, cgroup=cg)
    calls = []
    real = registry_mod.sweep.descendants
    monkeypatch.setattr(registry_mod.sweep, "descendants", lambda pid: calls.append(pid) or real(pid))
    prepared = victim.prepare("env-scrubber")
    proc = _wrapped(cg, reg.run_id, prepared)
    try:
        v = prepared.adopt(process=proc)
        scrubbed = int(v.extras[0]["pid"])
        reg.register(proc, "provider")
        report = reg.stop_all("signal")
        assert calls == [], f"the contained stop read /proc for descendants of {calls} before killing"
        assert scrubbed in report.needed_kill and report.unkillable == []
        assert v.wait_gone(2) and not cg.populated("work")
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_a_call_the_stop_killed_waits_for_the_stop_instead_of_reaping_again(reg, tmp_path, victim, monkeypatch):
    """Path: run_child, after its leader died of a stop: the stop's kill reached every
    route of the call, so the call waits for the stop's report and makes no kill (and no
    pass over /proc) of its own. The trapping call is still killed and marked stopped.
    Ablation: `stopped-call-waits-for-the-stop` (the call reaps its tree again: red)."""
    own = []
    real = child_mod._kill_tree
    monkeypatch.setattr(child_mod, "_kill_tree", lambda registry, entry: own.append(entry.pid) or real(registry, entry))
    prepared = victim.prepare("trap-term")
    holder = {}

    def call():
        holder["r"] = run_child(
            prepared.argv,
            registry=reg,
            name="call",
            timeout=30,
            idle_timeout=0,
            env=dict(os.environ, RUNNER_RUN_ID=reg.run_id),
            output_path=tmp_path / "output" / "call.log",
            cap_bytes=1 << 20,
        )

    t = threading.Thread(target=call)
    t.start()
    v = prepared.adopt(timeout=10)
    report = reg.stop_all("test")
    t.join(KILL_GRACE + MARGIN + 5)
    assert not t.is_alive()
    assert holder["r"].stopped and v.pid in report.needed_kill and v.wait_gone(2)
    assert own == [], "the stopped call reaped its tree again after the stop had"


def _run_cgroup(engine_pid: int) -> str:
    for line in Path(f"/proc/{engine_pid}/cgroup").read_text().splitlines():
        if line.startswith("0::"):
            return line[3:]
    return ""


@needs_cgroup
def test_the_engine_leaves_its_cgroup_while_its_trapping_call_still_lives(runs, victim):
    """Path: Registry.stop_all, contained: the engine's way out of its cgroup (an RCU
    grace period the kernel makes the migration wait for) starts as the stop begins, not
    after the clean-up: while the call still traps its SIGTERM (held in its kill grace,
    R.HELD_STOP, until the test ends it), the engine leaves the run's cgroup, and the run
    still stops whole. The wait for the engine to leave is half that kill grace: with the
    ablation it leaves only after the call's death. Ablation: `stop-leaves-cgroup-early`
    (the engine stays in until its clean-up ends: red)."""
    rd, v = runs.live_trap_term(victim, stop=R.HELD_STOP)
    engine = json.loads(rd.engine_identity.read_text())
    pid = engine["pid"]
    run_cgroup = Path(rd.cgroup_file.read_text().strip())
    root = cgroup_mod.cgroup2_root()
    inside = "/" + str((run_cgroup / "engine").relative_to(root))
    assert _run_cgroup(pid) == inside
    fd = os.pidfd_open(pid)
    try:
        assert identity.start_ticks(pid) == engine["start_ticks"]
        signal.pidfd_send_signal(fd, signal.SIGTERM)
        deadline = time.monotonic() + R.HELD_STOP["kill_grace"] / 2  # well inside the call's kill grace
        while _run_cgroup(pid) == inside and time.monotonic() < deadline:
            time.sleep(0.005)
        left = _run_cgroup(pid)
        assert v.alive(), "the trapping call died before the check: it proves nothing"
        assert left != inside and not left.startswith(inside), f"the engine is still in {left} mid-stop"
    finally:
        os.close(fd)
        v.kill()  # seen out mid-stop: the kill grace need not be sat out
    R.wait_engine_exit(rd)
    assert v.wait_gone(2)
    assert R.state(rd).stopped


def test_the_tag_sweep_reads_no_kernel_threads_environment_and_still_finds_the_tagged(spawn, monkeypatch):
    """Path: sweep.tagged skips kernel threads (PF_KTHREAD, which no process can set on
    itself): they have no environment, and each cost an empty read and a second stat
    read. A tagged victim is still found. Ablation: `sweep-skips-kernel-threads` (every
    kernel thread's environment is read again: red)."""
    from runner.proc import identity, sweep

    scan = identity.Scan()
    kernel = {pid for pid, st in scan.stats.items() if st.kernel}
    if not kernel:
        pytest.skip("no kernel thread visible here (a pid namespace)")
    run_id = R.new_run_id()
    v = spawn("trap-term", run_id=run_id)
    read = []
    real = sweep.membership.has_tag
    monkeypatch.setattr(sweep.membership, "has_tag", lambda pid, rid: read.append(pid) or real(pid, rid))
    found = sweep.tagged(run_id)
    assert v.pid in {i.pid for i in found}
    assert not kernel & set(read), f"the sweep read the environment of kernel threads {sorted(kernel & set(read))[:5]}"


def test_the_engines_cleanup_after_a_stop_reads_no_environment_the_stop_read(runs, victim, tmp_path):
    """Path: Engine._cleanup's tag sweep is given the registry's `untagged` (what the
    stop's own sweep read without the run's tag), so it reads only the environments of
    processes new since. A stranger (untagged, alive through the whole stop) has its
    environment read once per stop, not twice; the run still stops whole. Counted in
    the engine itself: a sitecustomize on its path wraps membership.has_tag and appends
    each pid read to a file. Ablation: `cleanup-reuses-untagged` (the clean-up reads
    every environment again: the stranger twice, red)."""
    counter = tmp_path / "site"
    counter.mkdir()
    reads = tmp_path / "reads.txt"
    (counter / "sitecustomize.py").write_text(
        "import os\n"
        "if os.environ.get('RUNNER_TEST_COUNT_TAG_READS'):\n"
        "    from runner.proc import membership\n"
        "    _real = membership.has_tag\n"
        "    def has_tag(pid, run_id):\n"
        "        with open(os.environ['RUNNER_TEST_COUNT_TAG_READS'], 'a') as f:\n"
        "            f.write(f'{pid}\\n')\n"
        "        return _real(pid, run_id)\n"
        "    membership.has_tag = has_tag\n"
        # Whatever sitecustomize this one shadows (the ablation campaign's probe) runs too.
        "import runpy, sys\n"
        "here = os.path.dirname(os.path.abspath(__file__))\n"
        "for entry in sys.path:\n"
        "    other = os.path.join(entry, 'sitecustomize.py')\n"
        "    if entry and os.path.abspath(entry) != here and os.path.exists(other):\n"
        "        runpy.run_path(other, run_name='sitecustomize')\n"
        "        break\n"
    )
    stranger = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL)
    try:
        path = os.pathsep.join([str(counter)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
        env = {"PYTHONPATH": path, "RUNNER_TEST_COUNT_TAG_READS": str(reads)}
        prepared = victim.prepare("trap-term")
        spec = runs.spec(name="count.toml", provider=prepared.argv, stop={"kill_grace": 0.3})
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)  # inherited by `runner run` and so by its engine
        try:
            rd = runs.start(spec, name="count")
        finally:
            for k, value in old.items():
                if value is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = value
        R.wait_event(rd, "phase-start", phase="session")
        v = prepared.adopt(timeout=10)
        out = R.runner("stop", "--run-dir", str(rd.path))
        assert out.returncode == 0, out.stdout + out.stderr
        R.wait_engine_exit(rd)
        assert v.wait_gone(2) and R.state(rd).stopped
        read = reads.read_text().split() if reads.exists() else []
        assert read, "the engine's sweeps were not counted (the sitecustomize did not load)"
        assert read.count(str(stranger.pid)) == 1, (
            f"the stranger's environment was read {read.count(str(stranger.pid))} times"
        )
    finally:
        stranger.kill()
        stranger.wait()


@needs_cgroup
def test_waiting_for_an_empty_cgroup_reads_its_events_again_within_milliseconds(cg, monkeypatch):
    """Path: RunCgroup.wait_empty polls cgroup.events from 1 ms up (doubling to 50 ms)
    instead of waiting up to 50 ms for the kernel's POLLPRI, which comes through a work
    queue and at most once per 20 ms per file: a member that leaves while the wait runs
    is seen by a read soon after. Recorded, not timed: the timeout of each poll between
    two reads, while a member lives until the wait has polled four times (then the test
    kills it, and the wait sees the cgroup empty): 1, 2, 4, 8 ms. Ablation:
    `cgroup-wait-polls-fast` (every poll waits 50 ms: red)."""
    member = subprocess.Popen(cg.wrap_argv(["sleep", "600"]), stdin=subprocess.DEVNULL)
    timeouts = []

    class RecordedPoll:
        def __init__(self):
            self._poll = select.poll()

        def register(self, fd, mask):
            self._poll.register(fd, mask)

        def poll(self, timeout):
            timeouts.append(timeout)
            if len(timeouts) == 4:
                member.kill()  # the last member leaves while the wait runs
            return self._poll.poll(timeout)

    try:
        deadline = time.monotonic() + 30
        while not cg.populated("work") and time.monotonic() < deadline:
            time.sleep(0.001)
        assert cg.populated("work")
        fake = types.SimpleNamespace(poll=RecordedPoll, POLLPRI=select.POLLPRI, POLLERR=select.POLLERR)
        monkeypatch.setattr(cgroup_mod, "select", fake)
        assert cg.wait_empty("work", timeout=30)
        monkeypatch.undo()
        assert timeouts[:4] == [1, 2, 4, 8], timeouts
    finally:
        member.kill()
        member.wait()

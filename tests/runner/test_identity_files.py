"""The identity files a real `runner run` writes, read back by the code that reads them:
round trip, a stale engine pid that now names someone else, and a process the stop
cannot kill (uninterruptible sleep), reported rather than hidden."""

import os
import signal
import subprocess
import time
from pathlib import Path

from runner.exitcodes import Exit
from runner.files import identity_file
from runner.proc import identity, signals

KILL_GRACE = 0.3


def test_engine_and_child_identity_files_round_trip(runs, victim):
    """Path: identity.write in the engine and the registry, identity.read in the stopper.
    What a real run wrote names exactly the living engine and provider (pid, pgid, sid,
    start ticks in clock ticks, boot id), and reads as not running once they are gone."""
    prepared = victim.prepare("trap-term")
    rd = runs.start(runs.spec(provider=prepared.argv, stop={"kill_grace": KILL_GRACE}))
    runs.wait_event(rd, "phase-start", phase="session")
    v = prepared.adopt(timeout=10)
    engine = identity_file.read(rd.engine_identity)
    assert engine == identity.current(engine.pid)
    assert engine.pid == engine.pgid == engine.sid  # its own session and group
    (child_file,) = rd.children.glob("*.json")
    child = identity_file.read(child_file)
    assert child == identity.current(v.pid) and child.start_ticks == v.start_ticks
    assert child.pgid == child.pid != engine.pgid  # each call in a new process group
    assert identity_file.read_extra(child_file)["name"] == "session"
    assert runs.runner("stop", "--run-dir", rd.path).returncode == Exit.OK
    runs.wait_engine_exit(rd)
    assert not identity.is_running(engine) and not identity.is_running(child)


def test_stale_engine_pid_now_naming_another_process_is_never_signalled(runs, victim):
    """Path: the identity check before every signal, end to end. The engine and its
    provider die without a stop (SIGKILL) and the engine's pid is handed to a newcomer
    (through ns_last_pid; the kernel frees a pid only once no process uses it as a group
    or session id, so the provider must be gone too). The engine.json a real run wrote
    now names someone else's process: `runner stop --now` refuses to signal it, says so,
    and the newcomer lives. Killed by the mutation that deletes the identity check."""
    prepared = victim.prepare("trap-term")
    rd = runs.start(runs.spec(provider=prepared.argv, stop={"kill_grace": KILL_GRACE}))
    runs.wait_event(rd, "phase-start", phase="session")
    v = prepared.adopt(timeout=10)
    engine = identity_file.read(rd.engine_identity)
    os.kill(engine.pid, signal.SIGKILL)
    assert signals.wait_gone(engine, 5.0)
    v.kill()
    assert v.wait_gone(5.0)
    deadline = time.monotonic() + 10  # PID 1 reaps the orphaned engine about a second late
    while identity.stat(engine.pid) is not None:
        assert time.monotonic() < deadline, "the dead engine was never reaped"
        time.sleep(0.02)
    time.sleep(0.05)  # start ticks tick every 10 ms: a reuse must fall in a later tick
    newcomers = []
    try:
        newcomer = runs.spawn_at_pid(
            lambda argv, **kw: newcomers.append(subprocess.Popen(argv, **kw)) or newcomers[-1], engine.pid
        )
        proc = runs.runner("stop", "--now", "--run-dir", rd.path)
        assert proc.returncode == Exit.OK, proc.stderr
        assert newcomer.poll() is None, "the stop signalled a process that is not the run's"
        assert identity.current(newcomer.pid) is not None
        assert "refus" in proc.stderr, proc.stderr
        stops = runs.events(rd, "run-stop")
        assert len(stops) == 1 and stops[0]["forced"] is True
    finally:
        for p in newcomers:
            p.kill()
            p.wait()


def test_stop_now_names_a_process_it_cannot_kill(runs, victim, frozen_cgroup):
    """Path: a provider in uninterruptible sleep (a cgroup v1 freezer puts it in state D;
    SIGKILL stays pending). `runner stop --now` returns within its bound (kill_grace plus
    CONFIRM_TIMEOUT, at the seconds scale), names the pid, and exits UNKILLABLE instead of
    hanging or claiming success."""
    prepared = victim.prepare("trap-term")
    rd = runs.start(runs.spec(provider=prepared.argv, stop={"kill_grace": KILL_GRACE}))
    runs.wait_event(rd, "phase-start", phase="session")
    v = prepared.adopt(timeout=10)
    runs.freeze(frozen_cgroup, v.pid)
    started = time.monotonic()
    proc = runs.runner("stop", "--now", "--run-dir", rd.path)
    elapsed = time.monotonic() - started
    assert proc.returncode == Exit.UNKILLABLE, (proc.returncode, proc.stderr)
    assert str(v.pid) in proc.stderr.strip().splitlines()[-1]
    assert elapsed < KILL_GRACE + 5.0
    (frozen_cgroup / "freezer.state").write_text("THAWED\n")  # the pending SIGKILL lands
    assert v.wait_gone(5.0)
    runs.wait_engine_exit(rd)
    # Once the kernel call returned, the operator's second `--now` finds nothing left
    # (no live run: its end is recorded) and removes the run's cgroup, which the first
    # could not (it was populated).
    cgroup_path = Path(rd.cgroup_file.read_text().strip()) if rd.cgroup_file.exists() else None
    again = runs.runner("stop", "--now", "--run-dir", rd.path)
    assert again.returncode == Exit.NO_LIVE_RUN, again.stderr
    assert cgroup_path is None or not cgroup_path.exists()
    assert len(runs.events(rd, "run-stop")) == 1

"""A stop signals only the run's own processes: foreign processes named by stale or
forged files of a live run survive `runner stop --now`, `runner stop` and `resume`,
and the run is stopped all the same.

Every file here is written by the runner's own writer (identity.write, atomic writes),
only with values a stale or hostile file would hold. The foreign processes carry no
RUNNER_RUN_ID and sit in no run cgroup; each test checks they are alive afterwards.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import runs as R

from runner.exitcodes import Exit
from runner.files import identity_file
from runner.files.atomic import atomic_write_text
from runner.ident import Identity
from runner.proc import cgroup as cgroups
from runner.proc import identity, membership, reaper, signals

KILL_GRACE = 0.2
STOP = {"kill_grace": KILL_GRACE, "grace": 5.0}


def foreign_env():
    return {k: v for k, v in os.environ.items() if k != "RUNNER_RUN_ID"}


@pytest.fixture
def foreign(procs):
    """An unrelated program leading its own session and group (as one that called
    setsid would), untagged."""

    def start(argv=("sleep", "1000")):
        p = procs(list(argv), start_new_session=True, env=foreign_env(), stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 5
        while identity.current(p.pid) is None or os.getpgid(p.pid) != p.pid:
            assert time.monotonic() < deadline
            time.sleep(0.005)
        return p

    return start


def live_run(runs, victim):
    """A live run whose provider traps SIGTERM; returns (rd, engine, provider victim)."""
    rd, v = runs.live_trap_term(victim, stop=STOP)
    return rd, identity_file.read(rd.engine_identity), v


def assert_run_stopped(rd, engine, v, run_id):
    assert signals.wait_gone(engine, 5.0), "the engine survived the stop"
    assert v.wait_gone(5.0), "the provider survived the stop"
    assert R.tagged(run_id) == []


def dead_pid(procs):
    """A pid that was a process a moment ago and now is nobody (reaped)."""
    p = procs(["true"])
    p.wait()
    return p.pid


@pytest.mark.parametrize("ticks", ["absent", "wrong", "correct"])
def test_stale_child_file_naming_a_foreign_group_never_kills_it(runs, victim, foreign, procs, ticks):
    """Path: the group route (reaper.signal_group via `runner stop --now`). A children/
    file names process group P, which an unrelated program leads: with the named pid
    dead (absent), with P's leader but wrong start ticks, and with P's leader and its
    correct start ticks. The group is refused because its leader is not proven the
    run's (no tag, no cgroup) and its members do not prove themselves; the foreign
    program lives, the refusal is named in the output and journaled, and the run is
    stopped anyway. Ablation: `group-membership` (red: the foreign sleep dies)."""
    rd, engine, v = live_run(runs, victim)
    run_id = rd.run_id
    other = foreign()
    real = identity.current(other.pid)
    named = {
        "absent": Identity(dead_pid(procs), real.pgid, real.sid, real.start_ticks, real.boot_id),
        "wrong": Identity(real.pid, real.pgid, real.sid, real.start_ticks + 7, real.boot_id),
        "correct": real,
    }[ticks]
    identity_file.write(rd.children / f"{named.pid}.json", named, name="stale call")
    proc = R.runner("stop", "--now", "--run-dir", rd.path)
    assert proc.returncode in (Exit.OK, Exit.DAMAGED), (proc.returncode, proc.stderr)
    assert other.poll() is None, "the stop killed a foreign process group"
    assert identity.current(other.pid) == real
    out = proc.stdout + proc.stderr
    assert "refused to signal" in out and (str(real.pgid) in out or str(named.pid) in out), out
    assert R.events(rd, "signal-refused")
    assert_run_stopped(rd, engine, v, run_id)


def test_reused_pid_of_a_real_child_file_never_kills_the_newcomer(runs, victim, procs):
    """Path: the realistic form. A call's child file (written by the registry) outlives
    the call; its pid is handed to another program that leads its own session, so the
    file's pid and pgid now name that program. `runner stop --now` refuses it (start
    ticks differ, no tag) and the newcomer lives. Ablation: `group-membership` (red)."""
    rd, engine, v = live_run(runs, victim)
    (child_file,) = rd.children.glob("*.json")
    stale = Path(str(child_file) + ".stale")
    stale.write_bytes(child_file.read_bytes())  # the file the runner wrote, kept past its call
    recorded = identity_file.read(stale)
    v.kill()
    assert v.wait_gone(5.0)
    runs.wait_event(rd, "session-end")
    deadline = time.monotonic() + 10
    while identity.stat(recorded.pid) is not None:  # the engine reaps its call
        assert time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(0.05)
    newcomer = R.spawn_at_pid(
        lambda argv, **kw: procs(argv, start_new_session=True, env=foreign_env(), **kw), recorded.pid
    )
    os.replace(stale, rd.children / f"{recorded.pid}.json")
    assert os.getpgid(newcomer.pid) == recorded.pgid
    proc = R.runner("stop", "--now", "--run-dir", rd.path)
    # The run ended when its call died (no live engine, its end recorded): NO_LIVE_RUN,
    # as a plain stop says; a stop that reached it first says OK (or DAMAGED).
    assert proc.returncode in (Exit.OK, Exit.DAMAGED, Exit.NO_LIVE_RUN), (proc.returncode, proc.stderr)
    assert newcomer.poll() is None, "the stop killed the program that reused a stale call's pid"
    assert signals.wait_gone(engine, 5.0)
    assert R.tagged(rd.run_id) == []


@pytest.mark.parametrize("command", [("stop", "--now"), ("stop",)], ids=["now", "hard"])
def test_forged_engine_identity_of_a_foreign_process_is_never_signalled(runs, victim, foreign, command):
    """Path: engine.json with the exact identity (correct start ticks) of a foreign
    process. The kernel says the run's lock is held by the real engine, so the file is
    named as damaged, the foreign process is never signalled, and the real engine (found
    as the lock holder, proven by its tag) is stopped, by `--now` and by the hard stop.
    Ablation: `membership-proof` (red: the foreign sleep dies)."""
    rd, engine, v = live_run(runs, victim)
    run_id = rd.run_id
    other = foreign()
    identity_file.write(rd.engine_identity, identity.current(other.pid), role="engine")
    proc = R.runner(*command, "--run-dir", rd.path)
    assert proc.returncode == Exit.DAMAGED, (proc.returncode, proc.stderr)
    assert "engine.json" in proc.stderr and f"names pid {other.pid}" in proc.stderr
    assert other.poll() is None, "the stop killed the process a forged engine.json named"
    assert_run_stopped(rd, engine, v, run_id)


def test_forged_child_identity_with_correct_ticks_is_refused(runs, victim, foreign):
    """Path: the pid route. children/<pid>.json with the correct start ticks of a
    foreign process in a group of its own: alive and itself, but carrying no tag and in
    no run cgroup, so it is refused. Ablation: `membership-proof` (red)."""
    rd, engine, v = live_run(runs, victim)
    run_id = rd.run_id
    other = foreign()
    identity_file.write(rd.children / f"{other.pid}.json", identity.current(other.pid), name="forged")
    proc = R.runner("stop", "--now", "--run-dir", rd.path)
    assert proc.returncode == Exit.OK, (proc.returncode, proc.stderr)
    assert f"pid {other.pid}" in proc.stdout + proc.stderr
    assert other.poll() is None
    assert_run_stopped(rd, engine, v, run_id)


@pytest.fixture
def foreign_cgroup(foreign):
    """A cgroup that is not any run's, holding an unrelated process."""
    root = cgroups.cgroup2_root()
    if root is None:
        pytest.skip("no writable cgroup v2 hierarchy")
    path = root / f"foreign-{R.new_run_id()}"
    path.mkdir()
    other = foreign()
    (path / "cgroup.procs").write_text(f"{other.pid}\n")
    try:
        yield path, other
    finally:
        other.kill()
        other.wait()
        deadline = time.monotonic() + 5
        while (path / "cgroup.procs").read_text().strip() and time.monotonic() < deadline:
            time.sleep(0.01)
        path.rmdir()


def test_forged_cgroup_file_never_touches_a_foreign_cgroup(runs, victim, foreign_cgroup):
    """Path: the cgroup path check (survey._cgroup). The `cgroup` file names a cgroup
    that is not the run's: it is named as damaged, none of its members is signalled, it
    is never cgroup.kill'ed and never removed; the run's own cgroup (at the one path the
    runner makes for its id) is still killed. Ablation: `cgroup-path-check` (red)."""
    path, other = foreign_cgroup
    rd, engine, v = live_run(runs, victim)
    run_id = rd.run_id
    atomic_write_text(rd.cgroup_file, f"{path}\n")
    proc = R.runner("stop", "--now", "--run-dir", rd.path)
    assert proc.returncode == Exit.DAMAGED, (proc.returncode, proc.stderr)
    assert "not this run's cgroup" in proc.stderr
    assert other.poll() is None and path.is_dir()
    assert (path / "cgroup.procs").read_text().split() == [str(other.pid)]
    assert_run_stopped(rd, engine, v, run_id)


def test_resume_never_kills_what_forged_files_name(runs, victim, foreign, foreign_cgroup):
    """Path: resume's leftover kill (leftovers.kill_leftovers). After a stop, forged child
    files and a forged cgroup file name foreign processes and a foreign cgroup: `runner
    resume` refuses them, names the damage, and exits DAMAGED without starting an
    engine; every foreign process lives. Ablation: `membership-proof` (red)."""
    path, in_cgroup = foreign_cgroup
    rd, engine, v = live_run(runs, victim)
    assert R.runner("stop", "--now", "--run-dir", rd.path).returncode == Exit.OK
    other = foreign()
    identity_file.write(rd.children / f"{other.pid}.json", identity.current(other.pid), name="forged")
    atomic_write_text(rd.cgroup_file, f"{path}\n")
    proc = R.runner("resume", "--run-dir", rd.path, "--detach")
    assert proc.returncode == Exit.DAMAGED, (proc.returncode, proc.stderr)
    assert "cgroup" in proc.stderr
    assert other.poll() is None and in_cgroup.poll() is None and path.is_dir()
    assert not rd.is_live()


def test_membership_proof_reads_the_tag_and_the_cgroup(procs):
    """Unit: Membership.proof says TAG for a tagged process, nothing for an untagged
    one, KNOWN for a vouched identity; why_not names what is missing."""
    tagged = procs(env={**foreign_env(), "RUNNER_RUN_ID": "run-x"})
    plain = procs(env=foreign_env())
    t, p = identity.current(tagged.pid), identity.current(plain.pid)
    m = membership.Membership("run-x")
    assert m.proof(t.pid, t.start_ticks) is membership.Proof.TAG
    assert m.proof(p.pid, p.start_ticks) is None
    known = membership.Membership("run-x", known=frozenset({(p.pid, p.start_ticks)}))
    assert known.proof(p.pid, p.start_ticks) is membership.Proof.KNOWN
    assert "RUNNER_RUN_ID=run-x" in m.why_not(p.pid)


def _children(pid):
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(c) for c in f.read().split()]


def _first_child(pid, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not _children(pid):
        assert time.monotonic() < deadline, f"pid {pid} started no child in {timeout}s"
        time.sleep(0.005)
    return _children(pid)[0]


def test_an_exiting_process_is_not_foreign_though_its_tag_is_gone(procs):
    """Path: Membership.foreign. A process on its way out (PF_EXITING) has its memory,
    and the environment that holds its tag, detached before it becomes a zombie. `runner
    wait` and `status` that read the run's own exiting engine then took it for another
    run's ("not the run's engine", exit 6; a CI flake). It runs no more code: it is not
    foreign, only waited for, while a live untagged process still is.

    The window is made and held here, not caught: the tagged process is the init of a
    pid namespace, and an exiting init waits (state S, PF_EXITING, memory detached) until
    every process of its namespace is reaped. One of them is the child of an `nsenter`
    outside the namespace that the test holds stopped (SIGSTOP), so it stays an unreaped
    zombie, and the init stays in its exit, until the test lets `nsenter` go on.
    Ablation: `exiting-not-foreign`."""
    if os.geteuid() != 0:
        pytest.skip("unshare --pid needs root")
    m = membership.Membership("run-x")
    plain = identity.current(procs(env=foreign_env()).pid)
    assert m.foreign(plain.pid, plain.start_ticks)
    # --kill-child: whatever happens to the test, the init dies with unshare.
    ns = procs(
        ["unshare", "--pid", "--fork", "--kill-child", sys.executable, "-c", "import sys; sys.stdin.read(1)"],
        env={**foreign_env(), "RUNNER_RUN_ID": "run-x"},
        stdin=subprocess.PIPE,
    )
    init = _first_child(ns.pid)
    deadline = time.monotonic() + 30
    while not membership.has_tag(init, "run-x"):  # unshare's child has exec'd the init
        assert time.monotonic() < deadline, "the namespace's init never carried its tag"
        time.sleep(0.005)
    ident = identity.current(init)
    assert not m.foreign(ident.pid, ident.start_ticks)  # proven by its tag while it lives
    holder = procs(["nsenter", "--target", str(init), "--pid", "--", "sleep", "1000"], env=foreign_env())
    member = _first_child(holder.pid)
    holder.send_signal(signal.SIGSTOP)  # from now on nothing reaps the member
    try:
        ns.stdin.close()  # the init returns: its exit kills the member, then waits for its reaping
        deadline = time.monotonic() + 30
        # The member a zombie (what holds the init in its exit), the init past detaching
        # its memory: the window, held for as long as the test needs it.
        while not (identity.stat(member).zombie and m.proof(ident.pid, ident.start_ticks) is None):
            assert time.monotonic() < deadline, f"the init never reached its exit: {identity.stat(init)}"
            time.sleep(0.005)
        st = identity.stat(init)
        assert st is not None and st.exiting and not st.zombie, st  # exiting, tag unreadable, not a zombie
        assert st.start_ticks == ident.start_ticks
        assert not m.foreign(ident.pid, ident.start_ticks), "an exiting process was taken for a foreign one"
    finally:
        holder.send_signal(signal.SIGCONT)
    assert holder.wait(timeout=30) == -signal.SIGKILL  # its child was killed by the init's exit
    assert ns.wait(timeout=30) == 0


def test_the_reaper_never_signals_an_unproven_recorded_pid(procs):
    """Unit: kill_everything given a recorded identity that is alive and itself but not
    proven refuses it, reports it, and the process lives. Ablation: `membership-proof`."""
    plain = procs(env=foreign_env())
    ident = identity.current(plain.pid)
    report = reaper.kill_everything(groups=[(ident.pgid, [ident])], pids=[ident], run_id="run-y", kill_grace=0.1)
    assert plain.poll() is None
    assert report.needed_kill == [] and report.died_at_term == []
    assert any(f"pid {plain.pid}" in r for r in report.refused), report.refused
    plain.send_signal(signal.SIGKILL)

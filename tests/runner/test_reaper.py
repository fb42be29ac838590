"""runner.proc.reaper: kill_everything's routes, each alone (the group route, the pid route),
then combined. Every route here is the code every stop runs.

Every bound is claimed against an adversarial victim (it traps SIGTERM): a cooperative
one would die whether or not the SIGKILL escalation existed.
"""

import os

import pytest
from runs import freeze, new_run_id

from runner import defaults
from runner.ident import Identity, boot_id
from runner.proc import identity, reaper, sweep

KILL_GRACE = defaults.KILL_GRACE
SHORT = 0.3
MARGIN = 1.0  # seconds of scheduling slack on a shared 2-core machine


def ident_of(v) -> Identity:
    ident = identity.current(v.pid)
    assert ident is not None and ident.start_ticks == v.start_ticks
    return ident


def group_route(v, run_id, kill_grace, **kw):
    """The group route alone: one recorded group, no pid, no tag sweep, no cgroup (the
    run's tag only proves membership)."""
    return reaper.kill_everything(
        groups=[(v.pgid, [ident_of(v)])], pids=[], run_id=run_id, tag_sweep=False, kill_grace=kill_grace, **kw
    )


def pid_route(ident, run_id, kill_grace, **kw):
    """The pid route alone: recorded pids through their pidfds, nothing else."""
    return reaper.kill_everything(groups=[], pids=[ident], run_id=run_id, tag_sweep=False, kill_grace=kill_grace, **kw)


@pytest.mark.stop_latency(bound=KILL_GRACE, label="group route / cooperative")
def test_group_route_returns_as_soon_as_a_cooperative_group_is_empty(spawn, stop_latency):
    """Path: reaper.kill_everything's group route alone. A cooperative group costs
    what its death takes (milliseconds: the MEASURED figure), not kill_grace: the wait
    is event-driven, so it returns before the grace it would otherwise sit out (the
    bound asserted; a tenth of it failed beside other work). Ablation: replace the
    pidfd wait by sleep(kill_grace) and this goes red."""
    rid = new_run_id()
    v = spawn("cooperative", run_id=rid)
    assert v.pgid == v.pid
    with stop_latency.measure("group route / cooperative", v, bound=KILL_GRACE):
        report = group_route(v, rid, KILL_GRACE)
    assert report.elapsed < KILL_GRACE, report
    assert report.died_at_term == [v.pid] and report.needed_kill == [] and report.unkillable == []


@pytest.mark.stop_latency(bound=KILL_GRACE + MARGIN, label="group route / trap-term")
def test_group_route_alone_kills_a_trapping_group(spawn, stop_latency):
    """Path: the group route alone (no pid route, no tag sweep in play) stops a
    trap-term forker and its trapping children: SIGTERM, kill_grace, SIGKILL. Ablation:
    `kill-everything-group-sigkill` and the victims survive the bound (red)."""
    rid = new_run_id()
    v = spawn("forker", children=2, run_id=rid)
    members = sorted(p.pid for p in v.tree())
    assert len(members) == 3
    with stop_latency.measure("group route / trap-term", v, bound=KILL_GRACE + MARGIN):
        report = group_route(v, rid, KILL_GRACE)
    assert sorted(report.needed_kill) == members
    assert report.died_at_term == [] and report.unkillable == [] and report.refused == []
    assert KILL_GRACE <= report.elapsed < KILL_GRACE + MARGIN
    assert v.wait_gone(2)


def test_group_route_reports_slow_exit_within_grace_as_died_at_term(spawn):
    """A handler that finishes inside kill_grace (its 0.1 s clean-up, well inside the
    default grace whatever the machine's load) is a death at SIGTERM, not a kill."""
    rid = new_run_id()
    v = spawn("slow-exit", cleanup=0.1, run_id=rid)
    report = group_route(v, rid, KILL_GRACE)
    assert report.died_at_term == [v.pid] and report.needed_kill == []
    assert 0.1 <= report.elapsed < KILL_GRACE
    assert v.wait_gone(2)


def test_group_route_kills_members_forked_after_the_term(spawn):
    """A respawner replaces each child that dies: the SIGKILL to the whole (proven)
    group takes whatever was forked in the meantime."""
    rid = new_run_id()
    v = spawn("respawner", children=2, run_id=rid)
    report = group_route(v, rid, SHORT)
    assert v.pid in report.needed_kill and report.unkillable == []
    assert v.wait_gone(2), v.tree()


def test_group_route_takes_a_group_whose_leader_is_gone_by_its_members_tags(spawn):
    """The recorded leader exited at TERM (pipe-holder; its child traps): with the
    leader gone, the group is proven because every living member carries the run's tag."""
    rid = new_run_id()
    v = spawn("pipe-holder", run_id=rid)
    report = group_route(v, rid, SHORT)
    assert v.pid in report.died_at_term and len(report.needed_kill) == 1
    assert v.wait_gone(2)


def test_group_route_stopped_victim_needs_kill(spawn):
    """A stopped process (state T) keeps SIGTERM pending; SIGKILL still reaches it."""
    rid = new_run_id()
    v = spawn("stopped", run_id=rid)
    report = group_route(v, rid, SHORT)
    assert report.needed_kill == [v.pid] and report.unkillable == []
    assert v.wait_gone(2)


@pytest.mark.stop_latency(bound=KILL_GRACE + MARGIN, label="pid route / trap-term")
def test_pid_route_alone_kills_a_trapping_process(spawn, stop_latency):
    """Path: reaper.kill_everything's pid route alone (one pidfd, no group signal, no
    tag sweep) stops a trap-term victim. Ablation: `kill-everything-pid-sigkill` and it
    survives (red)."""
    rid = new_run_id()
    v = spawn("trap-term", run_id=rid)
    with stop_latency.measure("pid route / trap-term", v, bound=KILL_GRACE + MARGIN):
        report = pid_route(ident_of(v), rid, KILL_GRACE)
    assert report.needed_kill == [v.pid] and report.died_at_term == [] and report.unkillable == []
    assert KILL_GRACE <= report.elapsed < KILL_GRACE + MARGIN
    assert v.wait_gone(2)


def test_pid_route_cooperative_returns_at_once(spawn):
    """The pid route's wait is event-driven too: a cooperative victim's death ends it
    before the grace (a third of a 0.3 s grace failed beside other work)."""
    rid = new_run_id()
    v = spawn("cooperative", run_id=rid)
    report = pid_route(ident_of(v), rid, KILL_GRACE)
    assert report.died_at_term == [v.pid] and report.elapsed < KILL_GRACE
    assert v.wait_gone(2)


def test_pid_route_refuses_a_stale_identity(spawn):
    """A wrong start time is not signalled at all: the process lives, and the refusal
    is reported. Ablation: `identity-check` (red)."""
    rid = new_run_id()
    v = spawn("cooperative", run_id=rid)
    ident = ident_of(v)
    stale = Identity(ident.pid, ident.pgid, ident.sid, ident.start_ticks + 1, ident.boot_id)
    report = pid_route(stale, rid, SHORT)
    assert report.died_at_term == [] and report.needed_kill == []
    assert any(f"pid {v.pid}" in r for r in report.refused), report.refused
    assert v.alive()


def test_pid_route_reports_a_process_in_state_D_as_unkillable_within_its_bound(spawn, frozen_cgroup):
    """A process in uninterruptible sleep cannot die: the pid route returns after about
    kill_grace + confirm_timeout, naming it, instead of hanging."""
    rid = new_run_id()
    v = spawn("trap-term", run_id=rid)
    ident = ident_of(v)
    freeze(frozen_cgroup, v.pid)
    report = pid_route(ident, rid, SHORT, confirm_timeout=SHORT)
    assert report.unkillable == [v.pid] and report.needed_kill == [v.pid]
    assert report.elapsed < 2 * SHORT + MARGIN


@pytest.mark.stop_latency(bound=KILL_GRACE + MARGIN, label="kill_everything / trap-term+escapee")
def test_kill_everything_takes_the_group_and_the_escapee(spawn, stop_latency):
    """The immediate kill: a trapping leader in its group plus a trapping child that
    called setsid (another group, another session), found by the run tag. Ablation:
    delete the line ending `# tag-sweep-sigkill` and the escapee survives (red)."""
    rid = new_run_id()
    v = spawn("escapee", run_id=rid)
    escapee = [p.pid for p in v.tree() if p.pid != v.pid]
    assert len(escapee) == 1 and os.getsid(escapee[0]) != v.sid
    with stop_latency.measure("kill_everything / trap-term+escapee", v, bound=KILL_GRACE + MARGIN):
        report = reaper.kill_everything(
            groups=[(v.pgid, [ident_of(v)])], pids=[ident_of(v)], run_id=rid, kill_grace=KILL_GRACE
        )
    assert sorted(report.needed_kill) == sorted([v.pid, *escapee]) and report.unkillable == []
    assert report.elapsed < KILL_GRACE + MARGIN
    assert sweep.tagged(rid) == []


def test_kill_everything_slow_exit_within_grace_is_died_at_term(spawn):
    rid = new_run_id()
    v = spawn("slow-exit", cleanup=0.1, run_id=rid)
    report = reaper.kill_everything(
        groups=[(v.pgid, [ident_of(v)])], pids=[ident_of(v)], run_id=rid, kill_grace=KILL_GRACE
    )
    assert report.died_at_term == [v.pid] and report.needed_kill == []
    assert report.elapsed < KILL_GRACE


def test_kill_everything_state_D_is_reported_within_its_bound(spawn, frozen_cgroup):
    rid = new_run_id()
    v = spawn("trap-term", run_id=rid)
    freeze(frozen_cgroup, v.pid)
    report = reaper.kill_everything(
        groups=[(v.pgid, [ident_of(v)])], pids=[ident_of(v)], run_id=rid, kill_grace=SHORT, confirm_timeout=SHORT
    )
    assert report.unkillable == [v.pid]
    assert report.elapsed < 2 * SHORT + MARGIN


def test_a_process_someone_else_sigkilled_during_the_grace_is_not_a_death_at_term(spawn):
    """Path: kill_everything's report. A trapping victim is SIGKILLed by someone else (as
    the engine's own registry kill does while a stopper waits out its grace) before this
    stop's SIGKILL: it ignored the SIGTERM, so it is reported as needing SIGKILL, never as
    a death at SIGTERM (the zombie's exit status, read before its parent reaps it, says
    SIGKILL). Ablation: `died-at-term-accuracy` (it reads as died_at_term again, red)."""
    import signal
    import threading

    rid = new_run_id()
    v = spawn("trap-term", run_id=rid)
    threading.Timer(0.2, os.kill, args=(v.pid, signal.SIGKILL)).start()
    report = pid_route(ident_of(v), rid, KILL_GRACE)
    assert report.died_at_term == [], report
    assert report.needed_kill == [v.pid], report
    assert v.wait_gone(2)


def test_kill_rounds_repeat_until_nothing_new(spawn, monkeypatch):
    """Path: reaper.kill_until_nothing_new, uncontained: the kill rounds, which alone find
    what is new since the TERM round (find_new, one pass over /proc a round). A tagged
    process of the run that appears after a round's pass, in a round that found something
    new, is found by the next round and SIGKILLed: the stop returns only once a round
    finds nothing new. The window is made, not raced: the first round's pass (the stop's
    second pass over /proc) starts one newcomer before it reads /proc, so that round finds
    it, and another once its pass is done, so that round cannot have seen it. Ablation:
    `kill-rounds-repeat` (no rounds) leaves both newcomers trapping SIGTERM for 7200 s:
    red, every time."""
    rid = new_run_id()
    v = spawn("trap-term", run_id=rid)
    newcomers = []
    scans = []
    real = identity.Scan

    class FirstRoundMakesNewcomers(real):
        def __init__(self, *args, **kwargs):
            scans.append(self)
            first_round = len(scans) == 2
            if first_round:
                newcomers.append(spawn("trap-term", run_id=rid))  # seen by this pass
            super().__init__(*args, **kwargs)
            if first_round:
                newcomers.append(spawn("trap-term", run_id=rid))  # after it: the next round's

    monkeypatch.setattr(identity, "Scan", FirstRoundMakesNewcomers)
    report = reaper.kill_everything(groups=[], pids=[], run_id=rid, kill_grace=SHORT, confirm_timeout=SHORT)
    monkeypatch.undo()
    assert len(newcomers) == 2, "the first kill round never scanned: the window was not made"
    for n in newcomers:
        assert n.wait_gone(2), f"a process of the run new since the TERM round lives on: {report}"
        assert n.pid in report.needed_kill, report
    assert report.left_running == [], report
    assert v.pid in report.needed_kill and v.wait_gone(2), report
    assert sweep.tagged(rid) == []


def test_pid_route_kills_a_process_whose_leader_thread_exited(spawn):
    """Path: reaper.kill_everything's pid route against a process whose leader thread
    exited while another thread runs (the zombie-leader, trapping SIGTERM): it is
    watched (its pidfd, readable only once every thread is gone), counted in
    needed_kill, SIGKILLed by its pid and its death confirmed by its threads, never
    taken for gone at its first look. Ablation: `threads-as-liveness` (red: nothing
    signalled, the process lives on)."""
    rid = new_run_id()
    v = spawn("zombie-leader", run_id=rid)
    ident = Identity(v.pid, v.pgid, v.sid, v.start_ticks, boot_id())
    report = pid_route(ident, rid, SHORT)
    assert report.needed_kill == [v.pid] and report.died_at_term == [] and report.left_running == [], report
    assert v.wait_gone(2)


# A child subreaper that starts its argv and reaps until SIGKILLed (as the engine does).
_SUBREAPER = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "if os.fork() == 0:\n"
    "    signal.signal(signal.SIGTERM, signal.SIG_DFL)\n"
    "    os.execv(sys.argv[1], sys.argv[1:])\n"
    "while True:\n"
    "    try:\n"
    "        os.wait()\n"
    "    except ChildProcessError:\n"
    "        signal.pause()\n"
)


def test_kill_rounds_find_what_a_root_spawns_through_the_grace(victim):
    """Path: reaper.find_new's lineage of the roots, in every kill round, and `last`. A
    provider that traps SIGTERM and starts an env-less setsid process every few
    hundredths of a second (the setsid-spawner): no tag, no group of the run, no cgroup.
    Its parent is a child subreaper, as the engine is: the stop knows it alone (a root,
    killed last, as a stopper knows its engine) and the spawner (a recorded pid). Each
    round reads the root's descendants by parent links again: what the spawner started
    through the kill grace, and what it forked just before its SIGKILL (adopted by the
    root), is found and SIGKILLed. Nothing of the tree is left, nothing reported left
    running. Ablation: `reach-in-rounds` (red: the spawns of the grace live on)."""
    import subprocess
    import sys

    prepared = victim.prepare("setsid-spawner")
    shim = subprocess.Popen(
        [sys.executable, "-c", _SUBREAPER, *prepared.argv], process_group=0, stdin=subprocess.DEVNULL
    )
    try:
        v = prepared.adopt(timeout=30)
        root = identity.current(shim.pid)
        spawner = Identity(v.pid, v.pgid, v.sid, v.start_ticks, boot_id())
        assert root is not None
        report = reaper.kill_everything(
            groups=[],
            pids=[spawner],
            run_id=None,
            tag_sweep=False,
            kill_grace=SHORT,
            roots=[root],
            last=[root],
            known=[root, spawner],
        )
        left = v.members()
        assert not left and report.left_running == [], (left, report)
        assert {v.pid, shim.pid} <= set(report.needed_kill) and len(report.needed_kill) > 3, report
    finally:
        if shim.poll() is None:
            shim.kill()
        shim.wait()

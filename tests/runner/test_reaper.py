"""runner.reaper: the group reaper and the pid route, each alone, then combined.

Every bound is claimed against an adversarial victim (it traps SIGTERM): a cooperative
one would die whether or not the SIGKILL escalation existed.
"""

import os

import pytest

from runs import freeze, new_run_id
from runner import defaults, identity, reaper, sweep
from runner.identity import Identity

KILL_GRACE = defaults.KILL_GRACE
SHORT = 0.3
MARGIN = 1.0  # seconds of scheduling slack on a shared 2-core machine


def ident_of(v) -> Identity:
    ident = identity.current(v.pid)
    assert ident is not None and ident.start_ticks == v.start_ticks
    return ident


@pytest.mark.stop_latency(bound=KILL_GRACE / 10, label="group reaper / cooperative")
def test_group_reaper_returns_as_soon_as_a_cooperative_group_is_empty(spawn, stop_latency):
    """A cooperative group costs milliseconds, not kill_grace: the wait is event-driven.
    Ablation: replace the pidfd wait by sleep(kill_grace) and this goes red."""
    v = spawn("cooperative")
    assert v.pgid == v.pid
    with stop_latency.measure("group reaper / cooperative", v, bound=KILL_GRACE / 10):
        report = reaper.reap_group(v.pgid, KILL_GRACE, members=[ident_of(v)])
    assert report.elapsed < KILL_GRACE / 10, report
    assert report.died_at_term == [v.pid] and report.needed_kill == [] and report.unkillable == []


@pytest.mark.stop_latency(bound=KILL_GRACE + MARGIN, label="group reaper / trap-term")
def test_group_reaper_alone_kills_a_trapping_group(spawn, stop_latency):
    """The group route alone (no pid route in play) stops a trap-term victim and its
    trapping children: SIGTERM, kill_grace, SIGKILL. Ablation: delete the line ending
    `# group-reaper-sigkill` and the victims survive the bound (red)."""
    v = spawn("forker", children=2)
    members = sorted(p.pid for p in v.tree())
    assert len(members) == 3
    with stop_latency.measure("group reaper / trap-term", v, bound=KILL_GRACE + MARGIN):
        report = reaper.reap_group(v.pgid, KILL_GRACE, members=[ident_of(v)])
    assert sorted(report.needed_kill) == members
    assert report.died_at_term == [] and report.unkillable == []
    assert KILL_GRACE <= report.elapsed < KILL_GRACE + MARGIN


def test_group_reaper_reports_slow_exit_within_grace_as_died_at_term(spawn):
    """A handler that finishes inside kill_grace is a death at SIGTERM, not a kill."""
    v = spawn("slow-exit", cleanup=0.1)
    report = reaper.reap_group(v.pgid, SHORT * 2, members=[ident_of(v)])
    assert report.died_at_term == [v.pid] and report.needed_kill == []
    assert 0.1 <= report.elapsed < SHORT * 2
    assert v.wait_gone(2)


def test_group_reaper_kills_members_forked_after_the_term(spawn):
    """A respawner replaces each child that dies: the reaper re-scans the group, and
    the SIGKILL to the whole group takes whatever was forked in the meantime."""
    v = spawn("respawner", children=2)
    report = reaper.reap_group(v.pgid, SHORT, members=[ident_of(v)])
    assert v.pid in report.needed_kill and report.unkillable == []
    assert v.wait_gone(2), v.tree()


def test_group_reaper_takes_a_group_whose_leader_is_gone_by_its_tag(spawn):
    """The recorded leader exited (pipe-holder dies at TERM; its child traps): the tag
    vouches for the group at KILL time."""
    rid = new_run_id()
    v = spawn("pipe-holder", run_id=rid)
    report = reaper.reap_group(v.pgid, SHORT, run_id=rid)
    assert v.pid in report.died_at_term and len(report.needed_kill) == 1
    assert v.wait_gone(2)


def test_group_reaper_stopped_victim_needs_kill(spawn):
    """A stopped process (state T) keeps SIGTERM pending; SIGKILL still reaches it."""
    v = spawn("stopped")
    report = reaper.reap_group(v.pgid, SHORT, members=[ident_of(v)])
    assert report.needed_kill == [v.pid] and report.unkillable == []
    assert v.wait_gone(2)


@pytest.mark.stop_latency(bound=KILL_GRACE + MARGIN, label="pid route / trap-term")
def test_pid_route_alone_kills_a_trapping_process(spawn, stop_latency):
    """The pid route alone (one pidfd, no group signal) stops a trap-term victim.
    Ablation: delete the line ending `# pid-route-sigkill` and it survives (red)."""
    v = spawn("trap-term")
    with stop_latency.measure("pid route / trap-term", v, bound=KILL_GRACE + MARGIN):
        report = reaper.reap_pid(ident_of(v), KILL_GRACE)
    assert report.needed_kill == [v.pid] and report.died_at_term == [] and report.unkillable == []
    assert KILL_GRACE <= report.elapsed < KILL_GRACE + MARGIN


def test_pid_route_cooperative_returns_at_once(spawn):
    v = spawn("cooperative")
    report = reaper.reap_pid(ident_of(v), SHORT)
    assert report.died_at_term == [v.pid] and report.elapsed < SHORT / 3
    assert v.wait_gone(2)


def test_pid_route_refuses_a_stale_identity(spawn):
    """A wrong start time is not signalled at all: the process lives."""
    v = spawn("cooperative")
    ident = ident_of(v)
    stale = Identity(ident.pid, ident.pgid, ident.sid, ident.start_ticks + 1, ident.boot_id)
    report = reaper.reap_pid(stale, SHORT)
    assert report == reaper.ReapReport(elapsed=report.elapsed)
    assert v.alive()


def test_pid_route_reports_a_process_in_state_D_as_unkillable_within_its_bound(spawn, frozen_cgroup):
    """A process in uninterruptible sleep cannot die: the pid route returns after about
    kill_grace + confirm_timeout, naming it, instead of hanging."""
    v = spawn("trap-term")
    ident = ident_of(v)
    freeze(frozen_cgroup, v.pid)
    report = reaper.reap_pid(ident, SHORT, confirm_timeout=SHORT)
    assert report.unkillable == [v.pid] and report.needed_kill == [v.pid]
    assert report.elapsed < 2 * SHORT + MARGIN


def test_group_reaper_reports_state_D_as_unkillable(spawn, frozen_cgroup):
    v = spawn("trap-term")
    freeze(frozen_cgroup, v.pid)
    report = reaper.reap_group(v.pgid, SHORT, members=[ident_of(v)], confirm_timeout=SHORT)
    assert report.unkillable == [v.pid]
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
        report = reaper.kill_everything(groups=[(v.pgid, [ident_of(v)])], pids=[ident_of(v)], run_id=rid,
                                        kill_grace=KILL_GRACE)
    assert sorted(report.needed_kill) == sorted([v.pid, *escapee]) and report.unkillable == []
    assert report.elapsed < KILL_GRACE + MARGIN
    assert sweep.tagged(rid) == []


def test_kill_everything_group_route_alone(spawn):
    """No pid, no tag: the group alone reaches a trapping forker."""
    v = spawn("forker", children=2)
    report = reaper.kill_everything(groups=[(v.pgid, [ident_of(v)])], pids=[], run_id=None, kill_grace=SHORT)
    assert len(report.needed_kill) == 3
    assert v.wait_gone(2)


def test_kill_everything_pid_route_alone(spawn):
    """No group, no tag: the pid route alone reaches a trapping process. Ablation:
    delete the line ending `# kill-everything-pid-sigkill` (red)."""
    v = spawn("trap-term")
    report = reaper.kill_everything(groups=[], pids=[ident_of(v)], run_id=None, kill_grace=SHORT)
    assert report.needed_kill == [v.pid]
    assert v.wait_gone(2)


def test_kill_everything_slow_exit_within_grace_is_died_at_term(spawn):
    v = spawn("slow-exit", cleanup=0.1)
    report = reaper.kill_everything(groups=[(v.pgid, [ident_of(v)])], pids=[ident_of(v)], run_id=None,
                                    kill_grace=SHORT * 2)
    assert report.died_at_term == [v.pid] and report.needed_kill == []
    assert report.elapsed < SHORT * 2


def test_kill_everything_state_D_is_reported_within_its_bound(spawn, frozen_cgroup):
    rid = new_run_id()
    v = spawn("trap-term", run_id=rid)
    freeze(frozen_cgroup, v.pid)
    report = reaper.kill_everything(groups=[(v.pgid, [ident_of(v)])], pids=[ident_of(v)], run_id=rid,
                                    kill_grace=SHORT, confirm_timeout=SHORT)
    assert report.unkillable == [v.pid]
    assert report.elapsed < 2 * SHORT + MARGIN


def test_merge_unites_and_a_kill_beats_a_term():
    a = reaper.ReapReport(died_at_term=[1, 2], needed_kill=[], unkillable=[], elapsed=0.1)
    b = reaper.ReapReport(died_at_term=[3], needed_kill=[2], unkillable=[2], elapsed=0.2)
    m = a.merge(b)
    assert m.died_at_term == [1, 3] and m.needed_kill == [2] and m.unkillable == [2]
    assert m.elapsed == pytest.approx(0.3)

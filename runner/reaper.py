"""Stopping processes: the group reaper, the pid route, and the combined immediate kill.

Every wait here is event-driven (pidfd readiness), never a blind sleep: a cooperative
group is gone in milliseconds, and the reaper returns then, not after kill_grace.
Each route's SIGKILL escalation sits on one line of its own, so that a mutation that
deletes it can be attributed to the test that turns red.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import time
from dataclasses import dataclass, field

from . import defaults, identity, signals
from .identity import Identity

log = logging.getLogger("runner.reaper")

CONFIRM_TIMEOUT = defaults.CONFIRM_TIMEOUT
"""After SIGKILL, how long to wait for the kernel to confirm each death. Only a process
that cannot die (uninterruptible sleep, a frozen cgroup) costs this much."""


@dataclass
class ReapReport:
    died_at_term: list[int] = field(default_factory=list)
    needed_kill: list[int] = field(default_factory=list)
    unkillable: list[int] = field(default_factory=list)
    elapsed: float = 0.0

    def merge(self, other: "ReapReport") -> "ReapReport":
        """Both reaps, one after the other: lists united (a pid that needed SIGKILL in
        either is not 'died at TERM'), elapsed summed."""
        kill = _uniq(self.needed_kill + other.needed_kill)
        unkillable = _uniq(self.unkillable + other.unkillable)
        term = [p for p in _uniq(self.died_at_term + other.died_at_term) if p not in kill]
        return ReapReport(term, kill, unkillable, self.elapsed + other.elapsed)

    @property
    def clean(self) -> bool:
        return not self.unkillable


def _uniq(pids):
    return list(dict.fromkeys(pids))


class Watch:
    """A set of processes watched through verified pidfds; a zombie counts as gone."""

    def __init__(self):
        self.fds: dict[int, int] = {}       # pid -> pidfd
        self.idents: dict[int, Identity] = {}
        self.done: set[int] = set()

    def add(self, ident: Identity) -> int | None:
        """Start watching; returns the pidfd, or None if gone, stale or protected."""
        if ident.pid in self.fds or ident.pid in self.done:
            return self.fds.get(ident.pid)
        if ident.pid in signals.protected_pids():
            return None
        fd, _ = signals.open_pidfd(ident)
        if fd is None:
            return None
        self.fds[ident.pid] = fd
        self.idents[ident.pid] = ident
        return fd

    def send(self, pid, sig) -> bool:
        fd = self.fds.get(pid)
        if fd is None:
            return False
        try:
            signal.pidfd_send_signal(fd, sig)
        except ProcessLookupError:
            return False
        return True

    def discard(self, pid) -> None:
        fd = self.fds.pop(pid, None)
        self.idents.pop(pid, None)
        if fd is not None:
            os.close(fd)

    def alive(self) -> list[int]:
        self._collect(0)
        return [p for p in self.fds if p not in self.done]

    def wait(self, deadline) -> bool:
        """Until every watched process has exited or the monotonic deadline passes."""
        while True:
            pending = [p for p in self.fds if p not in self.done]
            if not pending:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._collect(remaining)

    def _collect(self, timeout):
        poller = select.poll()
        by_fd = {}
        for pid, fd in self.fds.items():
            if pid not in self.done:
                poller.register(fd, select.POLLIN)
                by_fd[fd] = pid
        if not by_fd:
            return
        for fd, _ in poller.poll(max(0, int(timeout * 1000 + 0.999))):
            self.done.add(by_fd[fd])

    def close(self):
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


def _living_group(pgid, stats=None) -> list[Identity]:
    out = []
    for st in signals.group_stats(pgid) if stats is None else stats:
        if not st.zombie:
            out.append(Identity(st.pid, st.pgid, st.sid, st.start_ticks, identity.boot_id()))
    return out


def _wait_group_empty(pgid, deadline, known: dict, first=None) -> list[Identity]:
    """Wait until no living member is left in the group or the deadline passes; returns
    the members still alive. Re-scans after each exit, since members may fork. `first`:
    the members just seen, to spare the first scan."""
    while True:
        living, first = (_living_group(pgid) if first is None else first), None
        for ident in living:
            known.setdefault(ident.pid, ident)
        if not living or time.monotonic() >= deadline:
            return living
        watch = Watch()
        try:
            for ident in living:
                watch.add(ident)
            if not watch.fds:
                continue  # all died between scan and open: re-scan at once
            watch._collect(deadline - time.monotonic())
        finally:
            watch.close()


def reap_group(pgid, kill_grace, *, members=(), run_id=None, confirm_timeout=CONFIRM_TIMEOUT) -> ReapReport:
    """SIGTERM the group, wait until it is empty or kill_grace passes, SIGKILL what is
    left, confirm. Returns as soon as the group is empty."""
    t0 = time.monotonic()
    report = ReapReport()
    known = {m.pid: m for m in members}
    stats = signals.group_stats(pgid)
    at_term = _living_group(pgid, stats)
    for ident in at_term:
        known.setdefault(ident.pid, ident)
    if not at_term or not signals.signal_group(pgid, signal.SIGTERM, members=list(known.values()), run_id=run_id,
                                               stats=stats):
        report.elapsed = time.monotonic() - t0
        return report
    # Members seen at TERM time were verified as ours by the guard above, so they may
    # vouch for the group at KILL time even after the recorded leader is gone.
    left = _wait_group_empty(pgid, t0 + kill_grace, known, first=at_term)
    report.died_at_term = [i.pid for i in at_term if i.pid not in {x.pid for x in left}]
    if left:
        report.needed_kill = [i.pid for i in left]
        signals.signal_group(pgid, signal.SIGKILL, members=list(known.values()), run_id=run_id)  # group-reaper-sigkill
        still = _wait_group_empty(pgid, time.monotonic() + confirm_timeout, known)
        report.unkillable = [i.pid for i in still]
        if still:
            log.error("process group %d: pids %s survived SIGKILL", pgid, report.unkillable)
    report.elapsed = time.monotonic() - t0
    return report


def reap_pid(ident: Identity, kill_grace, *, confirm_timeout=CONFIRM_TIMEOUT) -> ReapReport:
    """The pid route: SIGTERM the one process, wait up to kill_grace, SIGKILL, confirm.
    The pidfd opened (and verified) once is used for every signal: race-free."""
    t0 = time.monotonic()
    report = ReapReport()
    watch = Watch()
    try:
        if watch.add(ident) is None or not watch.send(ident.pid, signal.SIGTERM):
            report.elapsed = time.monotonic() - t0
            return report
        if watch.wait(t0 + kill_grace):
            report.died_at_term = [ident.pid]
        else:
            report.needed_kill = [ident.pid]
            watch.send(ident.pid, signal.SIGKILL)  # pid-route-sigkill
            if not watch.wait(time.monotonic() + confirm_timeout):
                report.unkillable = [ident.pid]
                log.error("pid %d survived SIGKILL", ident.pid)
    finally:
        watch.close()
    report.elapsed = time.monotonic() - t0
    return report


def _kill_groups(group_known, run_id):
    for pgid, known in group_known.items():
        signals.signal_group(pgid, signal.SIGKILL, members=list(known.values()), run_id=run_id)


def _kill_pids(watch, pids):
    for ident in pids:
        watch.send(ident.pid, signal.SIGKILL)


def _kill_tagged(watch, idents) -> list[int]:
    """SIGKILL every tagged process; returns those it reached."""
    hit = []
    for ident in idents:
        if watch.add(ident) is not None and watch.send(ident.pid, signal.SIGKILL):
            hit.append(ident.pid)
    return hit


def kill_everything(*, groups, pids, run_id, kill_grace, cgroup=None, cgroup_scope="all",
                    confirm_timeout=CONFIRM_TIMEOUT) -> ReapReport:
    """The immediate stop: SIGTERM to every group, every pid and every tagged process at
    once; wait (event-driven) up to kill_grace; then SIGKILL the groups, the pids, the
    tag sweep and the cgroup; confirm within confirm_timeout. Bounded by about
    kill_grace + confirm_timeout whatever the processes do; survivors are reported as
    unkillable, never waited for."""
    from . import sweep  # sweep.kill_tagged uses this function

    t0 = time.monotonic()
    watch = Watch()
    group_known: dict[int, dict[int, Identity]] = {}
    try:
        for pgid, members in groups:
            known = {m.pid: m for m in members}
            living = _living_group(pgid)
            for ident in living:
                known.setdefault(ident.pid, ident)
            if not living:
                continue
            # Watch first, signal second: a cooperative member can die before a pidfd
            # opened after the signal would find it, and its death would go unreported.
            added = [i.pid for i in living if i.pid not in watch.fds and watch.add(i) is not None]
            if signals.signal_group(pgid, signal.SIGTERM, members=list(known.values()), run_id=run_id):
                group_known[pgid] = known
            else:
                for pid in added:
                    watch.discard(pid)
        for ident in pids:
            if watch.add(ident) is not None:
                watch.send(ident.pid, signal.SIGTERM)
        for ident in sweep.tagged(run_id) if run_id else ():
            if watch.add(ident) is not None:
                watch.send(ident.pid, signal.SIGTERM)
        if cgroup is not None:
            for ident in cgroup.member_identities(cgroup_scope):
                if watch.add(ident) is not None:
                    watch.send(ident.pid, signal.SIGTERM)
        at_term = set(watch.fds)

        watch.wait(t0 + kill_grace)
        for pgid, known in group_known.items():
            for ident in _living_group(pgid):  # forked after the TERM snapshot
                known.setdefault(ident.pid, ident)
                watch.add(ident)
        left = set(watch.alive())

        if left:
            _kill_groups(group_known, run_id)  # kill-everything-group-sigkill
            _kill_pids(watch, pids)  # kill-everything-pid-sigkill
        left.update(_kill_tagged(watch, sweep.tagged(run_id) if run_id else []))  # tag-sweep-sigkill
        if cgroup is not None:
            for ident in cgroup.member_identities(cgroup_scope):
                if watch.add(ident) is not None:
                    left.add(ident.pid)
            cgroup.kill(cgroup_scope, timeout=confirm_timeout)  # cgroup-kill

        watch.wait(time.monotonic() + confirm_timeout)
        survivors = watch.alive()
        report = ReapReport(
            died_at_term=sorted(at_term - left),
            needed_kill=sorted(left),
            unkillable=sorted(survivors),
        )
        if survivors:
            log.error("stop left pids %s alive after SIGKILL", survivors)
    finally:
        watch.close()
    report.elapsed = time.monotonic() - t0
    return report

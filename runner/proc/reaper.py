"""Stopping processes: the one reaper every stop runs.

`kill_everything` composes four routes: the group route (SIGTERM and SIGKILL to each
process group proven the run's), the pid route (each recorded process, through its own
pidfd), the tag sweep (every process carrying RUNNER_RUN_ID) and the cgroup kill. The
tests that attribute a route drive this same function with only that route's input;
there is no second reaper for them to measure instead.

Every signal goes through a `Watch`: a pidfd opened, the start ticks compared, then
membership proven (membership.py), and only then the signal, through that pidfd.
Every wait is event-driven (pidfd readiness), never a blind sleep. Each route's SIGKILL
escalation carries an `# ablate:` marker, so a mutation that deletes it is attributed
to the test that turns red.
"""

from __future__ import annotations

import os
import select
import signal
import time
from collections.abc import Collection, Iterable, Mapping, Sequence

from runner import defaults
from runner import log as _log
from runner.ident import Identity
from runner.proc import identity, signals, sweep
from runner.proc.membership import Membership, Proof
from runner.values import Value

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up cost, see log.py)

if TYPE_CHECKING:
    from runner.proc.cgroup import RunCgroup

log = _log.get("runner.proc.reaper")

CONFIRM_TIMEOUT = defaults.CONFIRM_TIMEOUT
"""After SIGKILL, how long to wait for the kernel to confirm each death. Only a process
that cannot die (uninterruptible sleep, a frozen cgroup) costs this much."""


class ReapReport(Value):
    """What a stop did to each pid. A plain class, not a dataclass (see values.py)."""

    __slots__ = ("died_at_term", "needed_kill", "unkillable", "elapsed", "refused", "left_running")

    def __init__(
        self,
        died_at_term: list[int] | None = None,
        needed_kill: list[int] | None = None,
        unkillable: list[int] | None = None,
        elapsed: float = 0.0,
        refused: list[str] | None = None,
        left_running: list[int] | None = None,
    ) -> None:
        self.died_at_term: list[int] = [] if died_at_term is None else died_at_term
        self.needed_kill: list[int] = [] if needed_kill is None else needed_kill
        self.unkillable: list[int] = [] if unkillable is None else unkillable
        self.elapsed = elapsed
        self.refused: list[str] = [] if refused is None else refused
        """What a recorded identity or group named but membership did not prove: never
        signalled. One short reason each, for the journal and the command's output."""
        self.left_running: list[int] = [] if left_running is None else left_running
        """Alive at the end but not in uninterruptible sleep: new ones kept coming past
        the kill rounds' bound, or a SIGKILLed one was still dying. Never `unkillable`."""


class Watch:
    """Processes proven the run's, watched through verified pidfds; a zombie counts as gone."""

    def __init__(self, membership: Membership) -> None:
        self.membership = membership
        self.fds: dict[int, int] = {}  # pid -> pidfd
        self.done: set[int] = set()
        self.sigkilled: set[int] = set()  # seen dead of a SIGKILL someone else sent
        # Read from each death's wait status until the grace is over; after our own
        # SIGKILL nobody asks (at a thousand deaths, a thousand reads of /proc saved).
        self.track_sigkilled = True
        self.by_tag: set[int] = set()  # reached through the tag sweep (its KILL round kills them again)
        self.by_lineage: set[int] = set()  # reached through the roots' lineage (likewise)
        self.early: set[int] = set()  # group members already dead of our signal when first seen
        self.proven: dict[tuple[int, int], Proof] = {}
        self.refused: list[str] = []
        self.protected = signals.protected_pids()  # asked once per stop, not per group or round
        self._by_fd: dict[int, int] = {}  # pidfd -> pid
        self._epoll = select.epoll()

    def refuse(self, why: str) -> None:
        if why not in self.refused:
            self.refused.append(why)
            log.warning("refusing to signal %s", why)

    def proves(self, pid: int, start_ticks: int, zombie: bool = False) -> bool:
        key = (pid, start_ticks)
        if key in self.proven:
            return True
        # A zombie has no environment or cgroup left to read: only what was proven
        # while it lived (or is known) still counts.
        proof = None if zombie and key not in self.membership.known else self.membership.proof(pid, start_ticks)
        if proof is not None:
            self.proven[key] = proof
        return proof is not None

    def add(
        self, ident: Identity, *, named: bool = True, proof: Proof | None = None, vouched: bool = False
    ) -> int | None:
        """Watch `ident` if it is alive, still itself and the run's; returns its pidfd.

        `named`: the identity came from a record (a file, the registry), so a refusal is
        worth reporting; a scan's candidate that fails is a pid reused in between.
        `proof`: how the caller already proved it at these start ticks (the tag sweep).
        `vouched`: a member of a group proven the run's, signalled with the group."""
        if ident.pid in self.fds or ident.pid in self.done:
            return self.fds.get(ident.pid)
        if ident.pid in self.protected:
            if named:
                self.refuse(f"pid {ident.pid}: this process or one of its ancestors")
            return None
        fd, outcome = signals.open_pidfd(ident)
        if fd is None:
            if named and outcome is signals.Delivery.STALE:
                self.refuse(f"pid {ident.pid}: it is no longer the recorded process (pid reused)")
            return None
        if proof is not None:
            self.proven[(ident.pid, ident.start_ticks)] = proof
        # After the pidfd is open and its start ticks matched: what /proc says now is
        # about the very process the pidfd pins (or, if it died since, harmlessly moot).
        if not vouched and not self.proves(ident.pid, ident.start_ticks):  # ablate: membership-proof
            os.close(fd)
            if named:
                self.refuse(self.membership.why_not(ident.pid))
            return None
        self.fds[ident.pid] = fd
        self._by_fd[fd] = ident.pid
        self._epoll.register(fd, select.EPOLLIN)
        return fd

    def send(self, pid: int, sig: int) -> bool:
        fd = self.fds.get(pid)
        if fd is None:
            return False
        try:
            signal.pidfd_send_signal(fd, sig)
        except ProcessLookupError:
            return False
        return True

    def discard(self, pid: int) -> None:
        fd = self.fds.pop(pid, None)
        if fd is not None:
            self._by_fd.pop(fd, None)
            if pid not in self.done:
                self._epoll.unregister(fd)
            os.close(fd)

    def alive(self) -> list[int]:
        self._collect(0)
        return [p for p in self.fds if p not in self.done]

    def wait(self, deadline: float) -> bool:
        """Until every watched process has exited or the monotonic deadline passes."""
        while True:
            pending = [p for p in self.fds if p not in self.done]
            if not pending:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._collect(remaining)

    def _collect(self, timeout: float) -> None:
        # epoll, each pidfd registered once (in add): a round over a thousand processes
        # that die one after another costs one wake-up per batch of deaths, not a
        # re-registration of every pidfd per wake-up.
        for fd, _ in self._epoll.poll(max(0.0, timeout)):
            pid = self._by_fd.get(fd)
            if pid is None or pid in self.done:
                continue
            self.done.add(pid)
            self._epoll.unregister(fd)
            # Readable pidfd: the process is a zombie now, its exit status still in
            # /proc until its parent reaps it. A SIGKILL there was not ours yet (a
            # concurrent stopper's, or the engine's own kill of its children): such a
            # death is never reported as a death at SIGTERM.
            if self.track_sigkilled and identity.killed_by(pid) == signal.SIGKILL:
                self.sigkilled.add(pid)

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()
        self._by_fd.clear()
        self._epoll.close()


def group_verdict(pgid: int, members: Iterable[Identity], stats: Sequence[identity.Stat], watch: Watch) -> str | None:
    """None when process group `pgid` is proven the run's, else why not.

    Proven: its leader (the recorded member whose pid is the group id) is alive, or our
    unreaped zombie, with the recorded start time, and proven a member; it pins the
    group id, so the group cannot be someone else's. Or, the leader gone, every living
    member proves itself. The members a scan finds are never their own proof."""
    why = signals.refusal(pgid, watch.protected)
    if why is not None:
        return why
    leader = next((m for m in members if m.pid == pgid), None)
    by_pid = {st.pid: st for st in stats}
    if leader is not None:
        st = by_pid.get(pgid)
        if st is not None and identity.matches(leader, st) and watch.proves(pgid, st.start_ticks, zombie=st.zombie):
            return None
    living = [st for st in stats if not st.zombie]
    if not living:
        return "it has no living member"
    strangers = [st.pid for st in living if not watch.proves(st.pid, st.start_ticks)]
    if not strangers:
        return None
    return (
        f"its leader is not the recorded, proven process and pids {strangers[:5]} are not the run's (group id reused?)"
    )


def signal_group(
    pgid: int, members: Iterable[Identity], sig: int, watch: Watch, scan: identity.Scan | None = None
) -> bool:
    """The group route: killpg if the group is proven the run's (its living members
    watched first, so a fast death is still seen). Otherwise the group is refused and
    only those of its members that prove themselves are signalled, each through its
    own pidfd. True if the group signal was sent.

    Remaining race: a group has no pidfd, so between the verdict and killpg every
    member could exit and the group id be reused by a new leader. That needs the pid
    space to wrap in microseconds; it is impossible while the proven leader is our
    unreaped zombie."""
    never = signals.refusal(pgid, watch.protected)
    if never is not None:  # ours, an ancestor's, or 0/1: not even member by member
        watch.refuse(never)
        return False
    stats = scan.group(pgid) if scan is not None else signals.group_stats(pgid)
    living = [st for st in stats if not st.zombie]
    if not living:
        return False
    why = group_verdict(pgid, members, stats, watch)  # ablate: group-membership
    if why is None:
        for st in living:
            watch.add(identity.from_stat(st), named=False, vouched=True)
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return False
        return True
    watch.refuse(f"process group {pgid}: {why}")
    for st in living:
        if watch.add(identity.from_stat(st), named=False) is not None:
            watch.send(st.pid, sig)
    return False


class _Scan:
    """The round's one pass over /proc, taken when first needed: after the signals that
    need no scan have gone out, so the kernel tears the tree down while we read /proc."""

    def __init__(self) -> None:
        self._scan: identity.Scan | None = None

    def __call__(self) -> identity.Scan:
        if self._scan is None:
            self._scan = identity.Scan()
        return self._scan


def _signal_proven_leader(pgid: int, members: Sequence[Identity], sig: int, watch: Watch) -> bool:
    """killpg at once, with no scan first, when the group's recorded leader is alive with
    its recorded start time and proven the run's: a living leader pins the group id
    (group_verdict's first case). Its members are watched after the signal."""
    if signals.refusal(pgid, watch.protected) is not None:
        return False
    leader = next((m for m in members if m.pid == pgid), None)
    fd = None if leader is None else watch.add(leader, named=False)
    # Alive, not merely watched: a leader that died since the TERM no longer pins the
    # group id (once reaped, its pid and so the id can be handed out again). Its own
    # pidfd says so without a race on /proc: it turns readable when the process exits.
    if fd is None or pgid in watch.done or _exited(fd):
        return False
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def _exited(pidfd: int) -> bool:
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(0))


def _signal_groups(
    watch: Watch, groups: Iterable[tuple[int, Sequence[Identity]]], sig: int, scan: _Scan
) -> dict[int, list[Identity]]:
    """The group route for one round: the groups whose leader proves itself are
    signalled first; the rest need the scan (signal_group). Returns the groups signalled."""
    signalled: dict[int, list[Identity]] = {}
    deferred: list[tuple[int, Sequence[Identity]]] = []
    for pgid, members in groups:
        if _signal_proven_leader(pgid, members, sig, watch):
            signalled[pgid] = list(members)
        else:
            deferred.append((pgid, members))
    for pgid, members in deferred:
        if signal_group(pgid, members, sig, watch, scan()):
            signalled[pgid] = list(members)
    return signalled


def _watch_members(watch: Watch, groups: Iterable[int], sig: int, scan: identity.Scan) -> set[int]:
    """Watch the living members of groups signalled the run's (vouched by the group);
    returns those newly watched. A member already a zombie of this very signal (it died
    before the scan) still counts as having died of it."""
    new: set[int] = set()
    for pgid in groups:
        for st in scan.group(pgid):
            if st.zombie:
                if st.wait_status is not None and st.wait_status & 0x7F == sig:
                    watch.early.add(st.pid)
            elif st.pid not in watch.fds and watch.add(identity.from_stat(st), named=False, vouched=True) is not None:
                new.add(st.pid)
    return new


def _kill_groups(watch: Watch, signalled: Mapping[int, Sequence[Identity]], left: set[int], scan: _Scan) -> None:
    """The group route's SIGKILL: when anything is left, each group signalled at TERM is
    killed, leader-proven ones before any scan. Its members forked since the TERM are
    found by the kill rounds (find_new), as every route's new members are."""
    if left:
        _signal_groups(watch, signalled.items(), signal.SIGKILL, scan)


def _signal_pids(watch: Watch, pids: Iterable[Identity], sig: int) -> None:
    for ident in pids:
        if watch.add(ident) is not None:
            watch.send(ident.pid, sig)


def _kill_watched(watch: Watch, pids: Iterable[int]) -> list[int]:
    """SIGKILL each of `pids` still alive through the pidfd it is watched by; those reached."""
    return [pid for pid in sorted(pids) if pid not in watch.done and watch.send(pid, signal.SIGKILL)]


def _kill_tagged_round(watch: Watch) -> list[int]:
    """The tag sweep's SIGKILL: what it found at TERM and still lives, through the
    pidfds it holds (no environment read again: the same pidfd is the same process).
    The tagged processes new since the TERM round are found by the kill rounds
    (find_new). Returns those reached."""
    return [pid for pid in sorted(watch.by_tag) if pid not in watch.done and watch.send(pid, signal.SIGKILL)]


def _signal_cgroup_members(
    watch: Watch, cgroup: RunCgroup, scope: str, sig: int, signalled: Collection[int] = ()
) -> list[int]:
    """The cgroup route: each member proven and signalled through its pidfd. A member of
    a group in `signalled` had the group's signal already: it is watched, vouched for by
    its proven group as _watch_members does (no read of its own), and not signalled
    twice (a trap may count its signals)."""
    hit = []
    for ident in cgroup.member_identities(scope, skip=watch.fds.keys()):
        grouped = ident.pgid in signalled
        if watch.add(ident, named=False, vouched=grouped) is not None and (grouped or watch.send(ident.pid, sig)):
            hit.append(ident.pid)
    return hit


def kill_everything(
    *,
    groups: Iterable[tuple[int, Sequence[Identity]]],
    pids: Sequence[Identity],
    run_id: str | None,
    kill_grace: float,
    cgroup: RunCgroup | None = None,
    cgroup_scope: str | None = "all",
    tag_sweep: bool | None = None,
    known: Iterable[Identity] = (),
    confirm_timeout: float = CONFIRM_TIMEOUT,
    untagged: set[tuple[int, int]] | None = None,
    roots: Sequence[Identity] = (),
    last: Sequence[Identity] = (),
) -> ReapReport:
    """The stop: SIGTERM every route at once; wait (event-driven) up to kill_grace; then
    SIGKILL what is left by the same routes and the cgroup kill; confirm within
    confirm_timeout. Its waits are bounded by kill_grace + confirm_timeout whatever the
    processes do; survivors are reported as unkillable, never waited for. On top come
    its reads of /proc (two scans, and the environments of processes it has not seen
    yet), which a machine short of CPU stretches: under 50 concurrent stops on 2 cores a
    `--now` took longer than that sum (docs/stop-latency.md, "At scale and under load").

    groups: (pgid, recorded identities) pairs; pids: recorded identities.
    run_id: the run's tag, for membership and (unless tag_sweep=False) the tag sweep.
    cgroup: the run's validated RunCgroup, for membership and (unless cgroup_scope is
    None) the cgroup kill of that scope. known: identities the caller itself saw become
    the run's (the engine's registry). Nothing is signalled that membership does not
    prove; what a record named but was refused is in the report's `refused`.
    untagged: (pid, start ticks) an earlier stop of the same caller read without the tag,
    not read again (the engine's clean-up after its stop's kill); filled in here.
    roots: processes proven the run's whose living descendants, read live by parent
    links, are the run's (a stopper's engine, the engine itself): each kill round reads
    them again (find_new), so what a trapping member starts through the kill grace is
    found however it left its group and its environment. last: recorded processes
    SIGTERMed with the rest but SIGKILLed only once the rounds found nothing new (a
    stopper's engine: a child subreaper, it adopts what a killed member had just
    forked, where the rounds find it; killed with the rest, it would hand it to init).
    Contained, no rounds run (what it adopts stays in the cgroup): `last` has its SIGKILL
    first in the KILL round, its teardown beside the tree's."""
    t0 = time.monotonic()
    membership = Membership(
        run_id,
        cgroup.relative if cgroup is not None else None,
        frozenset((i.pid, i.start_ticks) for i in known),
    )
    sweep_tag = bool(run_id) if tag_sweep is None else (tag_sweep and bool(run_id))
    watch = Watch(membership)
    # What the TERM round's sweep read without the tag is not read again at KILL: that
    # round reads the environment of new processes only (forked since), not the machine's.
    if untagged is None:
        untagged = set()
    try:
        # Signals first, scans after: the groups whose leader proves itself and the
        # recorded pids need no pass over /proc, so they are signalled before it. Then
        # one pass per round (TERM, then KILL) serves every other route.
        scan = _Scan()
        signalled = _signal_groups(watch, groups, signal.SIGTERM, scan)
        _signal_pids(watch, [*pids, *last], signal.SIGTERM)
        if cgroup is not None and cgroup_scope is not None:
            # Kill first, look later: the cgroup lists its members without a pass over
            # /proc, so they have their SIGTERM (and die) while the scans below run.
            _signal_cgroup_members(watch, cgroup, cgroup_scope, signal.SIGTERM, signalled)
        # The TERM round's discovery is every round's (find_new), against what the
        # signals above watch: every watched process has had its SIGTERM (group, pid or
        # cgroup route), so the tag sweep reads the environment of the others only. The
        # new members of a signalled group had the group's SIGTERM: never sent twice (a
        # trap may count its signals).
        grouped: set[int] = set()
        tag = run_id if sweep_tag else None
        new = find_new(
            watch,
            scan(),
            groups=signalled,
            run_id=tag,
            untagged=untagged,
            roots=roots,
            sig=signal.SIGTERM,
            grouped=grouped,
        )
        for pid in sorted(new - grouped):
            watch.send(pid, signal.SIGTERM)
        at_term = set(watch.fds) | watch.early
        if not at_term and not signalled:
            # Nothing of the run was alive: a KILL round could find only what a process
            # of the run forked after the scan, and there was none to fork. (The engine's
            # own clean-up lands here on every stop: two scans of /proc saved.)
            return ReapReport(refused=list(watch.refused), elapsed=time.monotonic() - t0)

        watch.wait(t0 + kill_grace)
        left = set(watch.alive()) | (watch.sigkilled & at_term)  # ablate: died-at-term-accuracy
        watch.track_sigkilled = False

        scan = _Scan()
        # Contained, the cgroup kill reaches whatever of the run forked since the TERM
        # round, and cgroup.events confirms it: this round reads nothing of /proc (reads
        # of /proc during a thousand exits are slow, and slow the exits). Uncontained,
        # the kill rounds below find the new members of the groups, the new tagged
        # processes and the roots' new descendants (find_new), one scan a round.
        contained = cgroup is not None and cgroup_scope is not None

        if contained:
            # `last` waits for the rounds, and contained there are none: the cgroup kill
            # reaches what it adopts. Its SIGKILL goes first, so its own teardown (an
            # engine: a Python process, the slowest to die) overlaps the tree's instead of
            # following the cgroup's emptying (about 20 ms at a thousand processes).
            _kill_last(watch, last, left)  # ablate: contained-last-killed-first
        if left:
            _signal_pids(watch, pids, signal.SIGKILL)  # ablate: kill-everything-pid-sigkill
        _kill_groups(watch, signalled, left, scan)  # ablate: kill-everything-group-sigkill
        if sweep_tag:
            left.update(_kill_tagged_round(watch))  # ablate: tag-sweep-sigkill
        # What the roots' lineage found at TERM (an env-less setsid process of a trapping
        # member): its route's SIGKILL, as the tag sweep's above.
        left.update(_kill_watched(watch, watch.by_lineage))  # ablate: lineage-sigkill
        if cgroup is not None and cgroup_scope is not None:
            # Members not watched yet (what a watched one needs, `left` has): a thousand
            # watched members cost no /proc read here.
            for ident in cgroup.member_identities(cgroup_scope, skip=watch.fds.keys()):
                if watch.add(ident, named=False) is not None:
                    left.add(ident.pid)
            emptied = False
            emptied = cgroup.kill(cgroup_scope, timeout=confirm_timeout, deaths=watch.wait)  # ablate: cgroup-kill
            if not emptied:
                # Still populated after the kill by pid too: what is left is watched, so
                # the confirmation below names it (never an exit 0 over a live member).
                for ident in cgroup.member_identities(cgroup_scope, skip=watch.fds.keys()):
                    watch.add(ident, named=False)

        if not contained:
            # Uncontained, what a process forked between its TERM and its KILL (or since
            # the last scan) is new: rounds repeat until one finds nothing new.
            tag = run_id if sweep_tag else None
            left |= kill_until_nothing_new(watch, tag, signalled, untagged, roots)  # ablate: kill-rounds-repeat
            # Nothing new was found with it alive: now it goes too.
            _kill_last(watch, last, left)

        watch.wait(time.monotonic() + confirm_timeout)
        survivors = watch.alive()
        if survivors:
            survivors = _wait_slow_deaths(watch, survivors)
        unkillable, left_running = classify(survivors)
        report = ReapReport(
            died_at_term=sorted(at_term - left),
            needed_kill=sorted(left),
            unkillable=sorted(unkillable),
            refused=list(watch.refused),
            left_running=sorted(left_running),
        )
        if survivors:
            log.error(
                "stop left pids alive after SIGKILL: %s in uninterruptible sleep, %s not",
                sorted(unkillable),
                sorted(left_running),
            )
    finally:
        watch.close()
    report.elapsed = time.monotonic() - t0
    return report


def _kill_last(watch: Watch, last: Sequence[Identity], left: set[int]) -> None:
    """SIGKILL each of `last` still alive (through its proven pidfd); added to `left`."""
    for ident in last:
        if watch.add(ident) is not None and ident.pid not in watch.done and watch.send(ident.pid, signal.SIGKILL):
            left.add(ident.pid)


def kill_until_nothing_new(
    watch: Watch,
    run_id: str | None,
    groups: Mapping[int, Sequence[Identity]],
    untagged: set[tuple[int, int]],
    roots: Sequence[Identity] = (),
    bound: float = defaults.KILL_ROUNDS_BOUND,
) -> set[int]:
    """KILL rounds without a cgroup, after the routes' own KILL round (which SIGKILLs what
    each route found at TERM and reads no /proc): one pass over /proc a round finds what
    is new since the last one, the TERM round's first (find_new), and SIGKILLs it. Each round's scan
    begins after every process known so far was SIGKILLed, and a SIGKILLed process forks
    no more: a round that finds nothing new has found everything the groups, the tag and
    the roots' lineage can show. Nothing already watched is signalled again here, so
    each route stays the one that kills what it found (a route that failed shows as a
    survivor, never covered up). Bounded by `bound` seconds (what is still found then is
    left to the caller's report). Returns the pids newly found and killed."""
    hit: set[int] = set()
    until = time.monotonic() + bound
    while True:
        if time.monotonic() >= until:
            return hit
        new = find_new(watch, identity.Scan(), groups=groups, run_id=run_id, untagged=untagged, roots=roots)
        for pid in new:
            watch.send(pid, signal.SIGKILL)
        if not new:
            return hit
        hit |= new


def find_new(
    watch: Watch,
    scan: identity.Scan,
    *,
    groups: Mapping[int, Sequence[Identity]],
    run_id: str | None,
    untagged: set[tuple[int, int]],
    roots: Sequence[Identity] = (),
    sig: int = signal.SIGKILL,
    grouped: set[int] | None = None,
) -> set[int]:
    """The one route that finds the run's members not watched yet, from one pass over
    /proc, for every mode and every round: the TERM round's (kill_everything, against
    what its signals before the scan watch) and the kill rounds' (kill_until_nothing_new).
    It finds the living members of the run's signalled groups, the processes that carry
    its tag (`run_id`; None: no tag sweep), and the living descendants of `roots` by
    parent links (each root checked alive as itself after the scan, so the links read
    were its own: Proof.KNOWN, as the stopper's lineage before its first signal). Each is
    watched (pidfd, start ticks, membership), never signalled here. Returns the pids
    newly watched. `sig`: the round's signal (a group member found a zombie of it died
    of it: `early`); `grouped`: filled with the new members of `groups`, which had the
    group's signal already."""
    new = _watch_members(watch, groups, sig, scan)
    if grouped is not None:
        grouped |= new
    if run_id:
        for ident in sweep.tagged(run_id, scan, skip=set(watch.fds), untagged=untagged, protected=watch.protected):
            if watch.add(ident, named=False, proof=Proof.TAG) is not None:
                watch.by_tag.add(ident.pid)
                new.add(ident.pid)
    alive = [r.pid for r in roots if identity.is_running(r)]
    for ident in sweep.lineage(alive, scan) if alive else ():  # ablate: reach-in-rounds
        if ident.pid not in watch.fds and watch.add(ident, named=False, proof=Proof.KNOWN) is not None:
            watch.by_lineage.add(ident.pid)
            new.add(ident.pid)
    return new


def _wait_slow_deaths(watch: Watch, survivors: list[int], bound: float = defaults.KILL_ROUNDS_BOUND) -> list[int]:
    """Survivors of the confirm wait that the kernel does not show in uninterruptible
    sleep, with their SIGKILL pending, are certain to die: on a starved machine they are
    merely slow, and are waited for (up to `bound`), never named unkillable. Nothing is
    sent here: a survivor no route SIGKILLed stays one, and is reported."""
    if all(uninterruptible(pid) for pid in survivors):
        return survivors
    watch.wait(time.monotonic() + bound)
    return watch.alive()


def uninterruptible(pid: int) -> bool:
    """The kernel shows `pid` in uninterruptible sleep (state D in /proc/PID/stat): a
    SIGKILL stays pending until it leaves it."""
    st = identity.stat(pid)
    return st is not None and st.state == "D"


def classify(survivors: Iterable[int]) -> tuple[list[int], list[int]]:
    """Survivors of a stop past its bound: (unkillable: in uninterruptible sleep, left
    running: any other)."""
    unkillable = [pid for pid in survivors if uninterruptible(pid)]  # ablate: d-state-check
    return unkillable, [pid for pid in survivors if pid not in unkillable]


def kill_tagged(
    run_id: str | None,
    kill_grace: float,
    *,
    cgroup: RunCgroup | None = None,
    untagged: set[tuple[int, int]] | None = None,
) -> ReapReport:
    """The tag sweep alone: TERM every tagged process, wait up to kill_grace, SIGKILL
    the rest, confirm (the engine's last clean-up, and test teardowns). `untagged`: see
    kill_everything."""
    return kill_everything(
        groups=[], pids=[], run_id=run_id, kill_grace=kill_grace, cgroup=cgroup, cgroup_scope=None, untagged=untagged
    )

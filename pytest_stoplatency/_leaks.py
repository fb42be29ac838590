"""Leak detection for any test: the processes a scope started and left alive.

A scope is a test (setup, call and teardown of its function-scoped fixtures) or a fixture
of wider scope (its own setup; it is checked when it is torn down). Which processes are
a scope's, without touching anybody else's:

- NEW: its pid was handed out after the scope opened (the namespace's ns_last_pid, read
  at open and at check: only that pid window is read from /proc, so a test that starts
  nothing costs two small reads), and it started no earlier than the scope (start ticks:
  a pid that wrapped around is not new). A process that existed before is never a
  candidate.
- TAG: the scope's tag (TAG_ENV=<pytest pid>.<pytest start ticks>.<n>) is in its
  environment, or, for a process that dropped its environment, in its nearest tagged
  ancestor's. Another scope's tag, another worker's or another pytest session's (their
  prefix differs) makes it theirs: never touched.
- TREE: a process with no tag anywhere up its ancestry is the scope's only when it
  descends from this pytest process (which is a child subreaper, _subreaper.py, so a
  double-forked process comes back to it instead of leaving the tree) and its pid was
  handed out during the scope's own activity (a wider fixture records the pid windows
  of its set-up).
- CGROUP (--process-leaks-cgroup, where cgroup v2 is writable): it sits in the scope's
  own cgroup, which pytest was in while the scope ran (_cgroup.py). The one route that
  sees a process which dropped its environment and left the tree.

The survivors are killed by pidfd after an identity check (_procs.signal_identified),
round after round, and the zombies pytest adopted are reaped.
"""

from __future__ import annotations

import itertools
import os
import select
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import _cgroup, _procs, _subreaper

TAG_ENV = "STOPLATENCY_LEAK_TAG"
_TAG_KEY = TAG_ENV.encode() + b"="
CLK_TCK = os.sysconf("SC_CLK_TCK")

ROUTE_ENV_DROPPED = "environment dropped"
ROUTE_REPARENTED = "re-parented"
ROUTE_OWN_SESSION = "own session"
ROUTE_CHILD = "still a child"
ROUTE_LEFT_TREE = "environment dropped, left the tree (found by cgroup)"
ROUTES = (ROUTE_LEFT_TREE, ROUTE_ENV_DROPPED, ROUTE_REPARENTED, ROUTE_OWN_SESSION, ROUTE_CHILD)

ROUNDS = 3  # a forker may fork between our scan and our kill
SETTLE = 2.0  # how long the killed get to be gone, per round
_MAX_DEPTH = 64  # ancestry walk: deeper than any real tree, short of a loop

_Window = tuple[int | None, int | None]

# Module-level, not per tracker: an in-process pytester session runs a second tracker in
# the same process (same owner prefix), and its tags must not repeat the outer one's.
_ids = itertools.count(1)


def last_pid() -> int | None:
    """The last pid handed out in this pid namespace (None where the kernel hides it)."""
    try:
        with open("/proc/sys/kernel/ns_last_pid", "rb") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def interpreter_helpers() -> list[int]:
    """Pids of multiprocessing's per-interpreter helpers, where this process started them
    (read from the modules only if already imported: no import on the test's path)."""
    out = []
    tracker = sys.modules.get("multiprocessing.resource_tracker")
    server = sys.modules.get("multiprocessing.forkserver")
    for owner, attr in (
        (getattr(tracker, "_resource_tracker", None), "_pid"),
        (getattr(server, "_forkserver", None), "_forkserver_pid"),
    ):
        pid = getattr(owner, attr, None)
        if isinstance(pid, int):
            out.append(pid)
    return out


def scan_tags() -> dict[int, str]:
    """Every process on the machine that carries a leak tag: {pid: tag} (for the sweep of
    dead owners' processes, _cleanup.sweep_ownerless)."""
    found = {}
    for pid in _pids(None):
        tag = _procs.env_value(pid, _TAG_KEY)
        if tag:
            found[pid] = tag
    return found


def now_ticks() -> int:
    """Now, on the clock /proc/<pid>/stat's start time uses (ticks since boot)."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * CLK_TCK)


def _in_window(pid: int, window: _Window) -> bool:
    lo, hi = window
    if lo is None or hi is None:
        return True  # no ns_last_pid: the start-ticks floor alone decides
    if lo == hi:
        return False
    return lo < pid <= hi if lo < hi else (pid > lo or pid <= hi)  # hi < lo: the pid counter wrapped


def _pids(window: _Window | None) -> list[int]:
    pids = [int(e) for e in os.listdir("/proc") if e.isdigit()]
    return pids if window is None else [p for p in pids if _in_window(p, window)]


@dataclass(frozen=True)
class Proc:
    pid: int
    ticks: int
    state: str
    ppid: int
    sid: int


def _proc(pid: int) -> Proc | None:
    f = _procs._stat(pid)
    if f is None:
        return None
    return Proc(pid, int(f[19]), f[0].decode(), int(f[1]), int(f[3]))


@dataclass
class Scope:
    tag: str
    label: str  # a test's node id, or "fixture 'name' (session scope)"
    is_fixture: bool
    floor: int  # start ticks: nothing older is this scope's
    lo: int | None  # ns_last_pid when it opened
    windows: list[_Window] = field(default_factory=list)  # a fixture's own activity
    cgroup: Path | None = None  # its cgroup, with --process-leaks-cgroup (_cgroup.py)

    def untagged_is_mine(self, pid: int, hi: int | None) -> bool:
        if self.is_fixture:
            return any(_in_window(pid, w) for w in self.windows)
        return _in_window(pid, (self.lo, hi))


@dataclass
class Found:
    proc: Proc
    route: str


class Tracker:
    """One per pytest process that runs tests (each xdist worker has its own)."""

    def __init__(self, helpers=lambda: (), *, cgroups: bool = False):
        self.me = os.getpid()
        self._want_cgroups = cgroups
        self.cgroups: _cgroup.Session | None = None  # created with the first checked scope
        me_ticks = _procs.start_ticks(self.me)
        self.prefix = f"{self.me}.{me_ticks}."
        self.sid = os.getsid(0)
        self.fixtures: dict[str, Scope] = {}  # open fixture scopes, by tag
        self._helpers = helpers  # pids of the plugin's own long-lived helpers (the guardian)
        self._tracked_now: set[int] | None = None

    def open(self, label: str, *, is_fixture: bool = False, checked: bool = True) -> Scope:
        # An unchecked scope's tag does not name its owner: no sweep ever takes its
        # processes, which its test (process_leaks(enabled=False)) keeps on purpose.
        prefix = self.prefix if checked else f"off.{self.prefix}"
        n = next(_ids)
        scope = Scope(f"{prefix}{n}", label, is_fixture, now_ticks(), last_pid())
        if checked and self._want_cgroups:
            if self.cgroups is None:
                self.cgroups = _cgroup.Session.create()
                self._want_cgroups = self.cgroups is not None  # asked once
            if self.cgroups is not None:
                scope.cgroup = self.cgroups.scope_dir(str(n))
        if is_fixture:
            self.fixtures[scope.tag] = scope
        return scope

    def enter(self, scope: Scope | None) -> Path | None:
        """Move pytest into the scope's cgroup (None: back home), so that what it starts
        from now on starts there; returns the cgroup pytest was in. A no-op without one."""
        if self.cgroups is None:
            return None
        was = self.cgroups.inside
        self.cgroups.enter(scope.cgroup if scope is not None else None)
        return was

    def enter_path(self, path: Path | None) -> None:
        if self.cgroups is not None:
            self.cgroups.enter(path)

    def close(self) -> None:
        """At session end: pytest back home, the session cgroup removed."""
        if self.cgroups is not None:
            # An interrupted test's cgroup may still hold pytest's own helpers: they are not
            # what the kill of the leftovers is for.
            self.cgroups.evict(self.cgroups.path, list(self._helpers()))
            self.cgroups.close()
            self.cgroups = None

    # -- finding ----------------------------------------------------------------

    def _tag(self, pid: int, cache: dict[int, str | None]) -> str | None:
        if pid not in cache:
            cache[pid] = _procs.env_value(pid, _TAG_KEY)
        return cache[pid]

    def find(self, scope: Scope, *, full: bool = False) -> tuple[list[Found], list[int]]:
        """(the scope's living processes, zombie children of pytest seen on the way)."""
        hi = last_pid()
        if not full and scope.lo is not None and hi == scope.lo:
            return [], []  # no pid handed out since the scope opened: nothing can be new
        helpers = set(self._helpers())
        found: list[Found] = []
        zombies: list[int] = []
        tags: dict[int, str | None] = {}
        for pid in _pids(None if full else (scope.lo, hi)):
            if pid == self.me or pid in helpers:
                continue
            p = _proc(pid)
            if p is None or p.ticks < scope.floor:
                continue
            if p.state in ("Z", "X", "x"):
                if p.ppid == self.me:
                    zombies.append(pid)
                continue
            own = self._tag(pid, tags)
            tag, in_tree = self._ancestry(p, own, tags)
            if tag is None:
                if not in_tree or not scope.untagged_is_mine(pid, hi) or self._in_open_fixture(pid, scope):
                    continue  # outside the tree with no tag: not visible without a cgroup
            elif tag != scope.tag:
                continue  # another scope's, another worker's or another session's
            found.append(Found(p, self._route(p, own, in_tree)))
        if scope.cgroup is not None:
            # Everything in the scope's cgroup started while pytest was in it: the scope's,
            # wherever its environment, session or parent went.
            seen = {f.proc.pid for f in found}
            for pid in _cgroup.members(scope.cgroup):  # ablate: leak-cgroup
                if pid == self.me or pid in helpers or pid in seen:
                    continue
                p = _proc(pid)
                if p is None or p.state in ("Z", "X", "x"):
                    continue
                own = self._tag(pid, tags)
                _, in_tree = self._ancestry(p, own, tags)
                found.append(Found(p, ROUTE_LEFT_TREE if own is None and not in_tree else self._route(p, own, in_tree)))
        return found, zombies

    def _route(self, p: Proc, own: str | None, in_tree: bool) -> str:
        if own is None:
            return ROUTE_ENV_DROPPED
        if not in_tree:
            return ROUTE_REPARENTED
        if p.ppid == self.me:
            return ROUTE_REPARENTED if p.pid not in self._tracked() else self._session_route(p)
        return self._session_route(p)

    def _tracked(self) -> set[int]:
        """The children some object here will wait for: one gc walk per check, and only
        when a suspect is pytest's own child."""
        if self._tracked_now is None:
            self._tracked_now = _subreaper.tracked_children()
        return self._tracked_now

    def _session_route(self, p: Proc) -> str:
        return ROUTE_OWN_SESSION if p.sid != self.sid else ROUTE_CHILD

    def _ancestry(self, p: Proc, own: str | None, tags: dict[int, str | None]) -> tuple[str | None, bool]:
        """(the tag that decides whose it is, whether it descends from this pytest process)."""
        tag = own
        q: Proc | None = p
        for _ in range(_MAX_DEPTH):
            assert q is not None
            if q.ppid == self.me:
                return tag, True
            if q.ppid <= 1:
                return tag, False
            q = _proc(q.ppid)
            if q is None:
                return tag, False
            if tag is None:
                tag = self._tag(q.pid, tags)
        return tag, False

    def _in_open_fixture(self, pid: int, scope: Scope) -> bool:
        return any(f is not scope and f.untagged_is_mine(pid, None) for f in self.fixtures.values())

    # -- checking ---------------------------------------------------------------

    def check(self, scope: Scope, *, full: bool = False) -> list[dict]:
        """Find, report and kill the scope's survivors; reap what pytest adopted."""
        if scope.is_fixture:
            self.fixtures.pop(scope.tag, None)
        self._tracked_now = None
        found, zombies = self.find(scope, full=full)
        leaks: dict[tuple[int, int], dict] = {}
        killed: list[tuple[int, int]] = []
        for _ in range(ROUNDS):
            new = [f for f in found if (f.proc.pid, f.proc.ticks) not in leaks]
            if not new:
                break
            for f in new:
                key = (f.proc.pid, f.proc.ticks)
                killed.append(key)
                # Already on its way out (SIGKILL pending, or in do_exit: its cmdline reads
                # empty): someone stopped it, and it is only waited for. Looked at twice,
                # as _cleanup.kill_lineage does: between dequeuing SIGKILL and setting
                # PF_EXITING the kernel shows neither.
                if _procs.dying(*key) or _procs.dying(*key):
                    leaks[key] = {}
                    continue
                leaks[key] = self._describe(f, scope)
                _procs.signal_identified(f.proc.pid, f.proc.ticks, signal.SIGKILL)  # ablate: leak-kill
            found, more = self.find(scope, full=True)
            zombies += more
        if scope.cgroup is not None and self.cgroups is not None:
            self._kill_cgroup(scope.cgroup)
        alive = wait_dead(killed, SETTLE)
        for key, leak in leaks.items():
            leak["killed"] = key not in alive
        ours = [pid for pid, _ in killed] + zombies
        if ours:
            _subreaper.reap(ours, self._tracked())
        return [leak for leak in leaks.values() if "pid" in leak]

    def _kill_cgroup(self, path: Path) -> None:
        """The backstop for what forked after the last round: cgroup.kill, once pytest's own
        helpers (started during the scope, they serve pytest) are moved out; then rmdir."""
        assert self.cgroups is not None
        if self.cgroups.inside == path:
            self.cgroups.enter(None)  # never inside what is killed
        self.cgroups.evict(path, list(self._helpers()))
        if _cgroup.members(path):
            _cgroup.kill(path, SETTLE)
        _cgroup.remove_tree(path)

    def _describe(self, f: Found, scope: Scope) -> dict:
        return {
            "pid": f.proc.pid,
            "start_ticks": f.proc.ticks,
            "cmdline": _procs.cmdline(f.proc.pid),
            "age": round(max(now_ticks() - f.proc.ticks, 0) / CLK_TCK, 2),
            "route": f.route,
            "scope": scope.label,
        }

    def reap_adopted(self) -> int:
        """Every zombie child nobody here will wait for (at session end)."""
        zombies = []
        for pid in _pids(None):
            p = _proc(pid)
            if p is not None and p.ppid == self.me and p.state == "Z":
                zombies.append(pid)
        return _subreaper.reap(zombies, _subreaper.tracked_children()) if zombies else 0


def wait_dead(procs: list[tuple[int, int]], timeout: float) -> set[tuple[int, int]]:
    """Wait (pidfd readiness) until each (pid, ticks) has exited; return those still alive."""
    deadline = time.monotonic() + timeout
    fds = {}
    for pid, ticks in procs:
        fd = _procs.open_pidfd(pid, ticks)
        if fd is not None:
            fds[fd] = (pid, ticks)
    try:
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        left = set(fds)
        while left and (remaining := deadline - time.monotonic()) > 0:
            for fd, _ in poller.poll(remaining * 1000):
                poller.unregister(fd)
                left.discard(fd)
        return {fds[fd] for fd in left}
    finally:
        for fd in fds:
            os.close(fd)


def format_leaks(leaks: list[dict]) -> str:
    return "\n".join(
        f"  pid {x['pid']}, age {x['age']:.2f} s, escaped: {x['route']}"
        f"{'' if x.get('killed', True) else ' (could NOT kill)'}: {x['cmdline']}"
        for x in leaks
    )

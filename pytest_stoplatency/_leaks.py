"""Leak detection for any test: the processes a scope started and left alive.

A scope is a test (setup, call and teardown of its function-scoped fixtures), a fixture
of wider scope (its own set-up and teardown; it is checked when it is torn down), or a
gap: the time between one test's end and the next test's start, and after the last test
(session level: what a test's thread, finaliser or atexit handler starts after the test
returned). Which processes are a scope's, without touching anybody else's:

- NEW: its pid was handed out after the scope opened (the namespace's ns_last_pid, read
  at open and at check: only that pid window is read from /proc, so a test that starts
  nothing costs two small reads), and it started no earlier than the scope (start ticks:
  a pid that wrapped around is not new). A process that existed before is never a
  candidate.
- TAG: the scope's tag (TAG_ENV=<pytest pid>.<pytest start ticks>.<n>) is in its
  environment, or, for a process that dropped its environment, in its nearest tagged
  ancestor's. Another scope's tag, another worker's or another pytest session's (their
  prefix differs) makes it theirs: never touched. The tag is process-wide (os.environ):
  a thread of an earlier test that starts a process while another test runs gives it
  that test's tag.
- TREE: a process with no tag anywhere up its ancestry is the scope's only when it
  descends from this pytest process and its pid was handed out during the scope's own
  activity (a wider fixture records the pid windows of its set-up and teardown). With
  --process-leaks-subreaper pytest is a child subreaper (_subreaper.py), so a double-
  forked process comes back to it instead of leaving the tree.
- CGROUP (--process-leaks-cgroup, where cgroup v2 is writable): it sits in the scope's
  own cgroup, which pytest was in while the scope ran (_cgroup.py). The one route that
  sees a process which dropped its environment and left the tree.

The candidates are taken in one snapshot with the garbage collector held off: a
finaliser (pexpect's, which kills its child) that a collection runs in the middle of the
check would otherwise hide a process that was alive when the check began. They get a grace
to exit (one wait on all their pidfds, the collector still held off): a process already
told to exit is no leak. What is left is reported once and kept: never a candidate again,
and what it starts later is its own (its lineage). The kept are killed by pidfd after an
identity check (_procs.signal_identified), round after round, at the session's check
(check_session), or at once with kill_at_check (--process-leaks-kill=teardown). Zombies
are left to whoever waits for them (a Popen, pexpect, multiprocessing) unless pytest is a
subreaper, whose adopted orphans nobody else will reap.
"""

from __future__ import annotations

import gc
import itertools
import os
import re
import select
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import _cgroup, _forks, _procs, _subreaper

TAG_ENV = "STOPLATENCY_LEAK_TAG"
_TAG_KEY = TAG_ENV.encode() + b"="
CLK_TCK = os.sysconf("SC_CLK_TCK")

ROUTE_LEFT_TREE = "no run tag, left the tree (found by cgroup)"
ROUTE_REPARENTED = "re-parented"
ROUTE_NO_TAG = "no run tag"
ROUTE_OWN_SESSION = "own session"
ROUTE_CHILD = "still a child"
ROUTES = (ROUTE_LEFT_TREE, ROUTE_REPARENTED, ROUTE_NO_TAG, ROUTE_OWN_SESSION, ROUTE_CHILD)

KIND_TEST = "test"
KIND_FIXTURE = "fixture"
KIND_SESSION = "session"  # started between tests, after the last one, or after its scope's check

ROUNDS = 3  # a forker may fork between our scan and our kill
SETTLE = 2.0  # how long the killed get to be gone, per round
_MAX_DEPTH = 64  # ancestry walk: deeper than any real tree, short of a loop

_Window = tuple[int | None, int | None]
_Key = tuple[int, int]

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
    image: tuple[bytes, ...]  # arg_start, arg_end, env_start, env_end: shared by a fork that never exec'd


def _proc(pid: int) -> Proc | None:
    f = _procs._stat(pid)
    if f is None:
        return None
    return Proc(pid, int(f[19]), f[0].decode(), int(f[1]), int(f[3]), tuple(f[45:49]))


@dataclass(slots=True)
class Scope:
    tag: str
    label: str  # a test's node id, "fixture 'name' (session scope, conftest.py)", or a gap's
    kind: str  # KIND_TEST, KIND_FIXTURE or KIND_SESSION
    floor: int  # start ticks: nothing older is this scope's
    lo: int | None  # ns_last_pid when it opened
    running: bool = True  # a test until its check, a gap until the next test: (lo, now] is its window
    windows: list[_Window] = field(default_factory=list)  # closed windows of its own activity
    cgroup: Path | None = None  # its cgroup, with --process-leaks-cgroup (_cgroup.py)
    # A test's function-scoped fixtures: the pid windows of their set-up and teardown, by
    # label ("set-up of fixture 'gw' (function scope, conftest.py)"): what one started is
    # named after it.
    fixture_windows: list[tuple[int | None, int | None, str]] = field(default_factory=list)

    def started_by(self, pid: int) -> str | None:
        """The function fixture's set-up or teardown during which `pid` was handed out (the
        innermost, where one fixture's set-up asked for another's), or None."""
        best: tuple[int, str] | None = None
        for lo, hi, label in self.fixture_windows:
            if lo is None or hi is None or not _in_window(pid, (lo, hi)):
                continue
            span = (hi - lo) % (1 << 32)
            if best is None or span < best[0]:
                best = (span, label)
        return best[1] if best is not None else None

    def untagged_is_mine(self, pid: int, hi: int | None) -> bool:
        if any(_in_window(pid, w) for w in self.windows):
            return True
        return self.running and _in_window(pid, (self.lo, hi))


@dataclass
class Found:
    proc: Proc
    route: str
    scope: Scope
    fork: bool  # a fork of pytest that never exec'd


class Tracker:
    """One per pytest process that runs tests (each xdist worker has its own).

    kill_at_check: kill a leak as soon as it is reported (--process-leaks-kill=teardown);
    otherwise it is kept, alive, until the session's check (check_session), which kills it:
    the suite goes on exactly as it would without the check. grace: seconds the candidates
    of a check get to exit on their own (one wait, on their pidfds) before they are leaks.
    exclude: a pattern of command lines that are never reported (kept, and killed at the
    session's end). on_keep(key) is told of every process kept alive for later (the plugin
    records it for the sweep that ends it should pytest die first)."""

    def __init__(
        self,
        helpers=lambda: (),
        *,
        cgroups: bool = False,
        session: int | None = None,
        reap: bool = False,
        kill_at_check: bool = True,
        grace: float = 0.0,
        exclude: re.Pattern[str] | None = None,
        on_keep=lambda key: None,
    ):
        self.me = os.getpid()
        self.kill_at_check = kill_at_check
        self.grace = grace
        self.exclude = exclude
        self._on_keep = on_keep
        # Leaks reported and kept alive (and excluded ones, never reported), by identity:
        # their report, which the session's check completes ("alive_at_end", "killed").
        self.kept: dict[_Key, dict] = {}
        self.lineage: set[_Key] = set()  # what a kept process started since: its, not a new leak
        self._want_cgroups = cgroups
        self.session = session  # the pytest session's number in this process: its cgroup's name
        self.cgroups: _cgroup.Session | None = None  # created with the first checked scope
        me = _proc(self.me)
        assert me is not None  # this very process
        self.prefix = f"{self.me}.{me.ticks}."
        self._born = now_ticks()
        self.sid = os.getsid(0)
        self._image = me.image if len(me.image) == 4 else None
        self.reap = reap  # pytest is a subreaper: its adopted zombies are its own to reap
        self.fixtures: dict[str, Scope] = {}  # open fixture scopes, by tag
        self._closing: list[Scope] = []  # the fixtures the running check checks
        self.gap: Scope | None = None  # the gap since the last test ended
        self.gaps: list[Scope] = []  # closed gaps in which some pid was handed out
        self._past: dict[str, tuple[str, str]] = {}  # checked scopes: tag -> (kind, label)
        self._helpers = helpers  # pids of the plugin's own long-lived helpers (the guardian)
        self._gc_holds = 0
        self._gc_was = False

    # -- scopes -------------------------------------------------------------------

    def open(self, label: str, *, kind: str = KIND_TEST, checked: bool = True) -> Scope:
        # An unchecked scope's tag does not name its owner: no sweep ever takes its
        # processes, which its test (process_leaks(enabled=False)) keeps on purpose.
        prefix = self.prefix if checked else f"off.{self.prefix}"
        n = next(_ids)
        lo = last_pid()
        if kind == KIND_TEST:
            self.close_gap(lo)  # a test opens: the gap before it ends (the same read)
        scope = Scope(f"{prefix}{n}", label, kind, now_ticks(), lo, running=kind == KIND_TEST)
        if checked and self._want_cgroups:
            if self.cgroups is None:
                self.cgroups = _cgroup.Session.create(self.session)
                self._want_cgroups = self.cgroups is not None  # asked once
            if self.cgroups is not None:
                scope.cgroup = self.cgroups.scope_dir(str(n))
        if kind == KIND_FIXTURE:
            self.fixtures[scope.tag] = scope
        return scope

    def open_gap(self, after: str) -> Scope:
        """The gap after test `after` returned, until the next test opens (or the process exits)."""
        self.close_gap(last_pid())
        label = f"started after {after} returned; possibly a thread or a finaliser of that test"
        self.gap = Scope(f"{self.prefix}{next(_ids)}", label, KIND_SESSION, now_ticks(), last_pid())
        return self.gap

    def close_gap(self, hi: int | None) -> None:
        gap, self.gap = self.gap, None
        if gap is None:
            return
        gap.running = False
        if gap.lo is None or hi != gap.lo:  # no pid handed out meanwhile: nothing can have started
            gap.windows.append((gap.lo, hi))
            self.gaps.append(gap)

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

    # -- the garbage collector ----------------------------------------------------

    def hold_gc(self) -> None:
        """No automatic collection (so no finaliser) until release_gc(): while a snapshot of
        what is alive is taken. Nests."""
        if self._gc_holds == 0:
            self._gc_was = gc.isenabled()
            gc.disable()  # ablate: leak-gc-snapshot
        self._gc_holds += 1

    def release_gc(self) -> None:
        self._gc_holds -= 1
        if self._gc_holds == 0 and self._gc_was:
            gc.enable()

    # -- finding ------------------------------------------------------------------

    def _tag(self, pid: int, cache: dict[int, str | None]) -> str | None:
        if pid not in cache:
            cache[pid] = _procs.env_value(pid, _TAG_KEY)
        return cache[pid]

    def _past_scope(self, tag: str) -> Scope | None:
        """A checked scope's tag on a process still alive: it started after that check (a
        thread or a finaliser of the scope, or it forked from one we killed)."""
        past = self._past.get(tag)
        if past is None:
            return None
        kind, label = past
        if kind != KIND_SESSION:
            by = f"test {label}" if kind == KIND_TEST else label
            label = f"started by {by} after its check; possibly a thread or a finaliser of it"
        return Scope(tag, label, KIND_SESSION, 0, None, running=False)

    def find(self, scopes: list[Scope], *, window: _Window | None, past: bool = False) -> tuple[list[Found], list[int]]:
        """(the scopes' living processes, zombie children of pytest seen on the way). A kept
        leak is nobody's new leak, nor is what it started (that joins self.lineage)."""
        hi = window[1] if window is not None else last_pid()
        by_tag = {s.tag: s for s in scopes}
        floor = min(s.floor for s in scopes)
        helpers = set(self._helpers())
        found: list[Found] = []
        zombies: list[int] = []
        tags: dict[int, str | None] = {}
        for pid in _pids(window):
            if pid == self.me or pid in helpers:
                continue
            p = _proc(pid)
            if p is None or p.ticks < floor:
                continue
            if p.state in ("Z", "X", "x"):
                if p.ppid == self.me:
                    zombies.append(pid)
                continue
            key = (pid, p.ticks)
            if key in self.kept:  # ablate: leak-reported-once
                continue  # reported once, at the first check that found it
            if key in self.lineage:
                continue
            own = self._tag(pid, tags)
            tag, in_tree, kept_by = self._ancestry(p, own, tags)
            if kept_by is not None:
                self.lineage.add(key)
                continue
            if tag is not None:
                scope = by_tag.get(tag) or (self._past_scope(tag) if past else None)
                if scope is None or p.ticks < scope.floor:
                    continue  # another scope's, another worker's or another session's
            else:
                if not in_tree:
                    continue  # outside the tree with no tag: not visible without a cgroup
                scope = self._untagged_owner(p, scopes, hi)
                if scope is None:
                    continue
            found.append(self._found(p, own, tag, in_tree, scope))
        seen = {f.proc.pid for f in found}
        for scope in scopes:
            if scope.cgroup is None:
                continue
            # Everything in the scope's cgroup started while pytest was in it: the scope's,
            # wherever its environment, session or parent went.
            for pid in _cgroup.members(scope.cgroup):  # ablate: leak-cgroup
                if pid == self.me or pid in helpers or pid in seen:
                    continue
                p = _proc(pid)
                if p is None or p.state in ("Z", "X", "x"):
                    continue
                if (pid, p.ticks) in self.kept or (pid, p.ticks) in self.lineage:
                    continue
                own = self._tag(pid, tags)
                tag, in_tree, kept_by = self._ancestry(p, own, tags)
                if kept_by is not None:
                    self.lineage.add((pid, p.ticks))
                    continue
                found.append(self._found(p, own, tag, in_tree, scope))
        return found, zombies

    def _untagged_owner(self, p: Proc, scopes: list[Scope], hi: int | None) -> Scope | None:
        for scope in scopes:
            if p.ticks >= scope.floor and scope.untagged_is_mine(p.pid, hi):
                return None if self._in_open_fixture(p.pid, scope) else scope
        return None

    def _found(self, p: Proc, own: str | None, tag: str | None, in_tree: bool, scope: Scope) -> Found:
        fork = own is None and self._image is not None and p.image == self._image
        if not in_tree:
            route = ROUTE_REPARENTED if tag is not None else ROUTE_LEFT_TREE
        elif own is None and not fork:
            route = ROUTE_NO_TAG  # its own environment lacks the tag (copied before it was set, or scrubbed)
        else:
            route = ROUTE_OWN_SESSION if p.sid != self.sid else ROUTE_CHILD
        return Found(p, route, scope, fork)

    def _ancestry(self, p: Proc, own: str | None, tags: dict[int, str | None]) -> tuple[str | None, bool, _Key | None]:
        """(the tag that decides whose it is, whether it descends from this pytest process,
        the kept leak it descends from, if any)."""
        tag = own
        q: Proc | None = p
        for _ in range(_MAX_DEPTH):
            assert q is not None
            if q.ppid == self.me:
                return tag, True, None
            if q.ppid <= 1:
                return tag, False, None
            q = _proc(q.ppid)
            if q is None:
                return tag, False, None
            if (q.pid, q.ticks) in self.kept or (q.pid, q.ticks) in self.lineage:
                return tag, False, (q.pid, q.ticks)
            if tag is None:
                tag = self._tag(q.pid, tags)
        return tag, False, None

    def _in_open_fixture(self, pid: int, scope: Scope) -> bool:
        # The fixtures torn down in a test's teardown count as open for that test's own claim:
        # a module fixture set up and torn down within one test (the only test of its module
        # on an xdist worker) started what its set-up started, not the test.
        closing = self._closing if scope.kind == KIND_TEST else []  # ablate: leak-fixture-in-test
        fixtures = [*self.fixtures.values(), *closing]
        return any(f is not scope and f.untagged_is_mine(pid, None) for f in fixtures)

    # -- checking -----------------------------------------------------------------

    def check(self, scope: Scope | None, fixtures: Sequence[Scope] = (), *, held: bool = False) -> list[dict]:
        """One test's check (its new pids), and that of the wider fixtures torn down during
        its teardown (everything since each opened): their leaks, reported now; killed now
        (kill_at_check) or kept until check_session. held: the caller holds the collector off
        (hold_gc) since its first line, and the check releases that hold once the grace is
        over."""
        return self._check(scope, list(fixtures), past=False, final=False, held=held)

    def check_session(self, *, held: bool = False) -> list[dict]:
        """At the session's end (and again at exit): what started between tests or after
        the last one, what carries the tag of a scope already checked, and the fixtures
        never torn down (an interrupted session), reported; then every process of this
        session still alive is killed: those leaks, the kept ones and what they started."""
        scopes = [*self.gaps, *([self.gap] if self.gap is not None else []), *self.fixtures.values()]
        # And the tags of the scopes already checked, on anything started since the session began.
        scopes.append(Scope(f"{self.prefix}none", "", KIND_SESSION, self._born, None, running=False))
        leaks = self._check(None, scopes, past=True, final=True, held=held)
        for gap in self.gaps:
            self._past[gap.tag] = (gap.kind, gap.label)
        self.gaps.clear()
        return leaks

    def _check(self, test: Scope | None, full: list[Scope], *, past: bool, final: bool, held: bool) -> list[dict]:
        # The snapshot: what is alive now is what the scopes left, and no finaliser may
        # change that before it is taken, nor during the grace (a process a finaliser kills
        # was alive after the teardown: a leak, not one on its way out). The caller may
        # already hold the collector (a test's teardown does, from its first line).
        self.hold_gc()
        self._closing = [scope for scope in full if scope.kind == KIND_FIXTURE]
        for scope in self._closing:
            self.fixtures.pop(scope.tag, None)
        scopes = [*([test] if test is not None else []), *full]
        zombies: list[int] = []
        try:
            found: dict[_Key, Found] = {}
            hi = last_pid()
            # A test's window: the pids handed out since it opened (none: nothing is new).
            if test is not None and (test.lo is None or hi != test.lo):
                got, more = self.find([test], window=(test.lo, hi))
                found.update(((f.proc.pid, f.proc.ticks), f) for f in got)
                zombies += more
            if full:
                got, more = self.find(full, window=None, past=past)
                for f in got:
                    found.setdefault((f.proc.pid, f.proc.ticks), f)
                zombies += more
            kept = [*self.kept, *self.lineage] if final else []
            alive = self._grace([*found, *kept])
            first = {key: self._leak_or_dying(f) for key, f in found.items() if key in alive}
        finally:
            self.release_gc()
            if held:
                self.release_gc()  # the caller's: a finaliser may run from here on
        self._retire(scopes, last_pid())
        leaks: dict[_Key, dict] = {}
        for key, leak in first.items():
            if not leak:
                continue  # on its way out: only waited for
            if self.exclude is not None and self.exclude.search(leak["cmdline"]):
                self._keep(key, {**leak, "excluded": True, "killed": False, "kept": True})  # killed at the end
                continue
            leaks[key] = leak
        kept_pids = {pid for pid, _ in self.kept}
        if final or self.kill_at_check:
            targets = list(leaks)
            if final:
                targets += [key for key in kept if key in alive]  # ablate: leak-kill-at-end
            killed = self._kill_rounds(targets, scopes, past, leaks, zombies)
            for scope in scopes:
                if scope.cgroup is None or self.cgroups is None:
                    continue
                if final or not kept_pids.intersection(_cgroup.members(scope.cgroup)):
                    self._kill_cgroup(scope.cgroup)
                else:
                    self._tidy_cgroup(scope.cgroup)  # an excluded process lives in it: until the end
            left = wait_dead(killed, SETTLE)
            for key, leak in leaks.items():
                leak["killed"] = key not in left
                if final:
                    leak["alive_at_end"] = True
            if final:
                for key, leak in self.kept.items():
                    if "alive_at_end" not in leak:
                        leak["alive_at_end"] = key in alive
                        if key in alive:
                            leak["killed"] = key not in left
            if self.reap and (killed or zombies):
                _subreaper.reap([pid for pid, _ in killed] + zombies, _subreaper.tracked_children())
            for key, leak in leaks.items():
                self.kept[key] = leak  # reported once: never a candidate again
                if not leak["killed"]:
                    self._on_keep(key)
        else:
            for key, leak in leaks.items():
                leak.update(killed=False, kept=True)
                self._keep(key, leak)
            for scope in scopes:
                if scope.cgroup is not None and self.cgroups is not None:
                    self._tidy_cgroup(scope.cgroup)
            if self.reap and zombies:
                _subreaper.reap(zombies, _subreaper.tracked_children())
        return list(leaks.values())

    def _grace(self, keys: list[_Key]) -> set[_Key]:
        """The candidates still alive after the grace: one wait for all of them on their
        pidfds, which ends as soon as the last one has exited (or at once, none being left)."""
        if not keys:
            return set()
        return wait_dead(keys, self.grace)  # ablate: leak-grace

    def _keep(self, key: _Key, leak: dict) -> None:
        self.kept[key] = leak
        self._on_keep(key)

    def _kill_rounds(
        self, targets: list[_Key], scopes: list[Scope], past: bool, leaks: dict[_Key, dict], zombies: list[int]
    ) -> list[_Key]:
        """SIGKILL each target by identity, round after round: what the scopes start
        meanwhile (a forker's new child) is found, reported (into leaks) and killed in the
        next round, and so is what a kept process started. Returns what was signalled."""
        signalled: list[_Key] = []
        todo = list(targets)
        for _ in range(ROUNDS):
            todo = [key for key in dict.fromkeys(todo) if key not in signalled]
            if not todo:
                break
            for key in todo:
                signalled.append(key)
                _procs.signal_identified(*key, signal.SIGKILL)  # ablate: leak-kill
            found, more = self.find(scopes, window=None, past=past)
            zombies += more
            todo = []
            for f in found:
                key = (f.proc.pid, f.proc.ticks)
                if key not in leaks:
                    leak = self._leak_or_dying(f)
                    if not leak:
                        continue
                    leaks[key] = leak
                todo.append(key)
            if past:  # the session's end: what a kept process started is ended with it
                todo += [key for key in self.lineage if _procs.is_alive(*key)]
        return signalled

    def _retire(self, scopes: list[Scope], hi: int | None) -> None:
        """A checked test or fixture: what carries its tag from now on started after its check."""
        for scope in scopes:
            if scope.kind == KIND_TEST and scope.running:
                scope.running = False
                scope.windows.append((scope.lo, hi))
            if scope.kind != KIND_SESSION and not scope.tag.startswith("off."):
                self._past[scope.tag] = (scope.kind, scope.label)

    def _leak_or_dying(self, f: Found) -> dict:
        """Its report, or {} when it is on its way out (SIGKILL pending, or in do_exit: its
        cmdline reads empty) after the grace: someone stopped it, and it is only waited
        for. Looked at twice, as _cleanup.kill_lineage does: between dequeuing SIGKILL and
        setting PF_EXITING the kernel shows neither."""
        key = (f.proc.pid, f.proc.ticks)
        if _procs.dying(*key) or _procs.dying(*key):
            return {}
        if f.fork:
            what = _forks.describe(f.proc.pid, _comm(f.proc.pid))
        else:
            what = _procs.cmdline(f.proc.pid)
        leak = {
            "pid": f.proc.pid,
            "start_ticks": f.proc.ticks,
            "cmdline": what,
            "age": round(max(now_ticks() - f.proc.ticks, 0) / CLK_TCK, 2),
            "route": f.route,
            "scope": f.scope.label,
            "kind": f.scope.kind,
        }
        started_by = f.scope.started_by(f.proc.pid)
        if started_by is not None:
            leak["started_by"] = started_by
        return leak

    def _tidy_cgroup(self, path: Path) -> None:
        """A checked scope's cgroup whose leaks are kept: pytest's own helpers moved out,
        removed if empty; else left for the session's end (Session.close kills it)."""
        assert self.cgroups is not None
        if self.cgroups.inside == path:
            self.cgroups.enter(None)
        self.cgroups.evict(path, list(self._helpers()))
        if not _cgroup.members(path):
            _cgroup.remove_tree(path)

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

    def reap_adopted(self) -> int:
        """Every zombie child nobody here will wait for (at session end; subreaper only)."""
        if not self.reap:
            return 0
        zombies = []
        for pid in _pids(None):
            p = _proc(pid)
            if p is not None and p.ppid == self.me and p.state == "Z":
                zombies.append(pid)
        return _subreaper.reap(zombies, _subreaper.tracked_children()) if zombies else 0


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", "rb") as f:
            return f.read().decode(errors="replace").strip()
    except OSError:
        return "?"


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


def one_line(cmdline: str) -> str:
    """A command line on one line of a report (`python -c` code has newlines)."""
    return cmdline.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def format_leaks(leaks: list[dict]) -> str:
    def note(x: dict) -> str:
        started = f" (started in the {x['started_by']})" if x.get("started_by") else ""
        failed = " (could NOT kill)" if not x.get("killed", True) and not x.get("kept") else ""
        return started + failed

    return "\n".join(
        f"  pid {x['pid']}, age {x['age']:.2f} s, escaped: {x['route']}: {one_line(x['cmdline'])}{note(x)}"
        for x in leaks
    )

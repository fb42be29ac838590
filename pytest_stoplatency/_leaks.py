"""Leak detection for any test: the processes a scope started and left alive.

A scope is a test (setup, call and teardown of its function-scoped fixtures), a fixture
of wider scope (its own set-up and teardown; it is checked when it is torn down), or a
gap: the time between one test's end and the next test's start, and after the last test
(session level: what a test's thread, finaliser or atexit handler starts after the test
returned). Which processes are a scope's, without touching anybody else's:

- NEW: it started no earlier than the scope opened (its start ticks, /proc/<pid>/stat,
  against the scope's window on the boot clock): the start time decides, not the pid. A
  process that existed before is never a candidate. The pid window (the namespace's
  ns_last_pid, read at open and at check) only narrows which pids are read, and only
  where it is complete: the machine's fork count (/proc/stat) rose by no more than the
  counter moved, so the counter cannot have come round (a fork-heavy neighbour, pid_max
  32768) nor been set back (a write to ns_last_pid). Otherwise every pid is read. A test
  that starts nothing (no fork on the machine since it opened) costs three small reads.
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
told to exit is no leak. A candidate told to stop (told_to_stop: exiting, a stop signal
pending, or one sent by this process) gets the stop grace after that, with the collector
back on: a thread of the suite that goes on working sets off its collections as it would
without the check. What is left is reported once and kept: never a candidate again,
and what it starts later is its own (its lineage). The kept are killed by pidfd after an
identity check (_procs.signal_identified), round after round, at the session's check
(check_session), or at once with kill_at_check (--process-leaks-kill=teardown). Zombies
are left to whoever waits for them (a Popen, pexpect, multiprocessing) unless pytest is a
subreaper, whose adopted orphans nobody else will reap.
"""

from __future__ import annotations

import functools
import gc
import itertools
import os
import re
import select
import signal
import sys
import time
from collections import deque
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


@functools.cache
def pid_max() -> int:
    """The pid counter's cycle (read once, at the first check: an unused plugin reads nothing)."""
    try:
        with open("/proc/sys/kernel/pid_max", "rb") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 1 << 22  # the kernel's limit


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


def forks() -> int | None:
    """Processes and threads created on the machine since boot (/proc/stat's "processes"):
    each takes a pid in this namespace (and in every namespace above it)."""
    try:
        with open("/proc/stat", "rb") as f:
            for line in f:
                if line.startswith(b"processes "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


@dataclass(frozen=True, slots=True)
class Mark:
    """A moment: the last pid handed out, the boot clock in ticks, the machine's forks."""

    pid: int | None
    ticks: int
    forks: int | None


def mark() -> Mark:
    return Mark(last_pid(), now_ticks(), forks())


@dataclass(frozen=True, slots=True)
class Span:
    """What started between two marks: by start ticks (both ends included: a tick is 10 ms),
    and by pid only where the pid window is complete (`complete`)."""

    lo: int | None
    hi: int | None
    t0: int
    t1: int
    complete: bool  # every pid handed out in the span is in (lo, hi]
    idle: bool  # no process or thread was created on the machine in the span

    def has(self, pid: int, ticks: int) -> bool:
        if not self.t0 <= ticks <= self.t1:
            return False
        return not self.complete or _in_window(pid, (self.lo, self.hi))

    @property
    def window(self) -> _Window | None:
        """The pids to read for it (None: every pid)."""
        return (self.lo, self.hi) if self.complete else None

    def size(self) -> tuple[int, int]:
        return self.t1 - self.t0, ((self.hi or 0) - (self.lo or 0)) % pid_max() if self.complete else pid_max()


def span(since: Mark, until: Mark) -> Span:
    idle = since.forks is not None and since.forks == until.forks
    complete = (
        since.pid is not None
        and until.pid is not None
        and since.forks is not None
        and until.forks is not None
        # A counter that came round (or was set back) moved less than the forks it served.
        and until.forks - since.forks <= (until.pid - since.pid) % pid_max()  # ablate: start-time-attribution
    )
    return Span(since.pid, until.pid, since.ticks, until.ticks, complete or idle, idle)


# -- told to stop ------------------------------------------------------------------------

STOP_SIGNALS = frozenset((signal.SIGTERM, signal.SIGINT, signal.SIGHUP))
_STOP_MASK = sum(1 << (sig - 1) for sig in STOP_SIGNALS)
# The stop signals pytest's own process sent: (pid, or -pgid for a group; ticks when sent).
# Bounded: only what was sent since a check's candidates started matters.
_sent: deque[tuple[int, int]] = deque(maxlen=4096)
_watching = False


def _audit(event: str, args: tuple) -> None:
    """os.kill and os.killpg, through which Popen.terminate() and send_signal(), psutil's
    and pexpect's kill, and multiprocessing's terminate() all go: a stop signal's target."""
    if event != "os.kill" and event != "os.killpg":
        return
    try:
        target, sig = int(args[0]), int(args[1])
    except (TypeError, ValueError, IndexError):
        return
    if sig not in STOP_SIGNALS or target in (0, -1):
        return  # pytest's own group, or every process: nobody's stop in particular
    _sent.append((-target if event == "os.killpg" else target, now_ticks()))


def watch_stop_signals() -> None:
    """Record the stop signals this process sends from now on (an audit hook: it cannot be
    removed, so one per process, added only when the check is on)."""
    global _watching
    if not _watching:
        sys.addaudithook(_audit)  # ablate: told-to-stop-patience
        _watching = True


def told_to_stop(p: Proc) -> bool:
    """Exiting, a stop signal pending (sent by anyone, not yet delivered), or one sent to it
    (or its process group) by this process since it started. Once a signal has reached a
    handler, /proc shows nothing of it (SigPnd, ShdPnd and SigBlk are empty while a Python
    handler runs): only the sender knows."""
    if _procs.dying(p.pid, p.ticks) or _procs.pending(p.pid) & _STOP_MASK:
        return True
    return any(ticks >= p.ticks and target in (p.pid, -p.pgid) for target, ticks in _sent)


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
    pgid: int
    sid: int
    image: tuple[bytes, ...]  # arg_start, arg_end, env_start, env_end: shared by a fork that never exec'd


def _proc(pid: int) -> Proc | None:
    f = _procs._stat(pid)
    if f is None:
        return None
    return Proc(pid, int(f[19]), f[0].decode(), int(f[1]), int(f[2]), int(f[3]), tuple(f[45:49]))


@dataclass(slots=True)
class Scope:
    tag: str
    label: str  # a test's node id, "fixture 'name' (session scope, conftest.py)", or a gap's
    kind: str  # KIND_TEST, KIND_FIXTURE or KIND_SESSION
    floor: int  # start ticks: nothing older is this scope's
    opened: Mark | None  # when it opened
    running: bool = True  # a test until its check, a gap until the next test: (opened, now] is its span
    windows: list[Span] = field(default_factory=list)  # closed spans of its own activity
    cgroup: Path | None = None  # its cgroup, with --process-leaks-cgroup (_cgroup.py)
    # A test's function-scoped fixtures: the spans of their set-up and teardown, by label
    # ("set-up of fixture 'gw' (function scope, conftest.py)"): what one started is named
    # after it.
    fixture_windows: list[tuple[Span, str]] = field(default_factory=list)

    def started_by(self, pid: int, ticks: int) -> str | None:
        """The function fixture's set-up or teardown during which `pid` started (the
        innermost, where one fixture's set-up asked for another's), or None."""
        best: tuple[tuple[int, int], str] | None = None
        for window, label in self.fixture_windows:
            if not window.has(pid, ticks):
                continue
            if best is None or window.size() < best[0]:
                best = (window.size(), label)
        return best[1] if best is not None else None

    def untagged_is_mine(self, pid: int, ticks: int, now: Mark | None) -> bool:
        if any(w.has(pid, ticks) for w in self.windows):
            return True
        return self.running and self.opened is not None and now is not None and span(self.opened, now).has(pid, ticks)


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
        stop_grace: float = 0.0,
        exclude: re.Pattern[str] | None = None,
        on_keep=lambda key: None,
    ):
        self.me = os.getpid()
        self.kill_at_check = kill_at_check
        self.grace = grace
        self.stop_grace = max(stop_grace, grace)
        if self.stop_grace > grace:
            watch_stop_signals()
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
        # What the tracker keeps per test is kept as strings, which the garbage collector does
        # not track: objects it tracks would count towards its thresholds and move the
        # suite's own collections (and so its finalisers) to other tests.
        self._gaps: list[str] = []  # closed gaps in which something may have started (_gap_text)
        self._past: dict[str, str] = {}  # checked scopes: tag -> "kind\0ticks at check\0label"
        self._helpers = helpers  # pids of the plugin's own long-lived helpers (the guardian)
        self._gc_holds = 0
        self._gc_was = False

    # -- scopes -------------------------------------------------------------------

    def open(self, label: str, *, kind: str = KIND_TEST, checked: bool = True) -> Scope:
        # An unchecked scope's tag does not name its owner: no sweep ever takes its
        # processes, which its test (process_leaks(enabled=False)) keeps on purpose.
        prefix = self.prefix if checked else f"off.{self.prefix}"
        n = next(_ids)
        now = mark()
        if kind == KIND_TEST:
            self.close_gap(now)  # a test opens: the gap before it ends (the same reads)
        scope = Scope(f"{prefix}{n}", label, kind, now.ticks, now, running=kind == KIND_TEST)
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
        now = mark()
        self.close_gap(now)
        label = f"started after {after} returned; possibly a thread or a finaliser of that test"
        self.gap = Scope(f"{self.prefix}{next(_ids)}", label, KIND_SESSION, now.ticks, now)
        return self.gap

    def close_gap(self, now: Mark) -> None:
        gap, self.gap = self.gap, None
        if gap is None or gap.opened is None:
            return
        gap.running = False
        window = span(gap.opened, now)
        if not window.idle:  # nothing created on the machine meanwhile: nothing can have started
            self._gaps.append(_gap_text(gap, window))

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

    def _past_scope(self, tag: str, ticks: int) -> Scope | None:
        """A checked scope's tag on a process still alive: it started after that check (a
        thread or a finaliser of the scope, or it forked from one we killed)."""
        past = self._past.get(tag)
        if past is None:
            return None
        kind, at, label = past.split("\0", 2)
        checked = int(at) if at else None
        if checked is not None and ticks < checked:
            # It started before that check (which saw everything started by then): the
            # scope's own, found now (it was on its way out then, or is of an opted-out scope).
            return Scope(tag, label, kind, 0, None, running=False)
        if kind != KIND_SESSION:
            by = f"test {label}" if kind == KIND_TEST else label
            label = f"started by {by} after its check; possibly a thread or a finaliser of it"
        return Scope(tag, label, KIND_SESSION, 0, None, running=False)

    def find(
        self, scopes: list[Scope], *, window: _Window | None, now: Mark | None = None, past: bool = False
    ) -> tuple[list[Found], list[int]]:
        """(the scopes' living processes, zombie children of pytest seen on the way). A kept
        leak is nobody's new leak, nor is what it started (that joins self.lineage). window:
        the pids to read (None: all); now: the end of a running scope's span."""
        hi = now if now is not None else mark()
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
                scope = by_tag.get(tag) or (self._past_scope(tag, p.ticks) if past else None)
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

    def _untagged_owner(self, p: Proc, scopes: list[Scope], hi: Mark) -> Scope | None:
        for scope in scopes:
            if p.ticks >= scope.floor and scope.untagged_is_mine(p.pid, p.ticks, hi):
                return None if self._in_open_fixture(p, scope) else scope
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

    def _in_open_fixture(self, p: Proc, scope: Scope) -> bool:
        # The fixtures torn down in a test's teardown count as open for that test's own claim:
        # a module fixture set up and torn down within one test (the only test of its module
        # on an xdist worker) started what its set-up started, not the test.
        closing = self._closing if scope.kind == KIND_TEST else []  # ablate: leak-fixture-in-test
        fixtures = [*self.fixtures.values(), *closing]
        return any(f is not scope and f.untagged_is_mine(p.pid, p.ticks, None) for f in fixtures)

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
        gaps = [_gap_scope(text) for text in self._gaps]
        scopes = [*gaps, *([self.gap] if self.gap is not None else []), *self.fixtures.values()]
        # And the tags of the scopes already checked, on anything started since the session began.
        scopes.append(Scope(f"{self.prefix}none", "", KIND_SESSION, self._born, None, running=False))
        leaks = self._check(None, scopes, past=True, final=True, held=held)
        for gap in gaps:
            self._past[gap.tag] = f"{gap.kind}\0\0{gap.label}"
        self._gaps.clear()
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
        # Back on for the stop grace (below), which only told-to-stop processes wait out.
        gc_back = True  # ablate: stop-grace-gc-on
        try:
            found: dict[_Key, Found] = {}
            hi = mark()
            # A test's span: what started since it opened, by start time (nothing created on
            # the machine since: nothing is new); the pids handed out meanwhile narrow what is
            # read only where that pid window is complete.
            window = span(test.opened, hi) if test is not None and test.opened is not None else None
            if test is not None and (window is None or not window.idle):
                got, more = self.find([test], window=window.window if window is not None else None, now=hi)
                found.update(((f.proc.pid, f.proc.ticks), f) for f in got)
                zombies += more
            if full:
                got, more = self.find(full, window=None, past=past)
                for f in got:
                    found.setdefault((f.proc.pid, f.proc.ticks), f)
                zombies += more
            kept = [*self.kept, *self.lineage] if final else []
            start = time.monotonic()
            told = self._told(found)
            alive = self._grace([*found, *kept])
            # Decided now, the collector still held off: what is not told to stop.
            first = {key: self._leak_or_dying(f) for key, f in found.items() if key in alive and key not in told}
        finally:
            if gc_back:
                self._release(held)
        # The stop grace, with the collector back on: a suite's thread that allocates in the
        # meantime sets off its collections (its finalisers) when it would without the check.
        patient = [key for key in alive if key in told]
        if patient:
            left = wait_dead(patient, self.stop_grace - (time.monotonic() - start))
            alive = (alive - set(patient)) | left
            first.update((key, self._leak_or_dying(found[key])) for key in left)
        if not gc_back:
            self._release(held)
        self._retire(scopes, mark())
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

    def _release(self, held: bool) -> None:
        self.release_gc()
        if held:
            self.release_gc()  # the caller's: a finaliser may run from here on

    def _told(self, found: dict[_Key, Found]) -> set[_Key]:
        """The candidates told to stop (told_to_stop), or whose parent or an ancestor below
        pytest was (a server's children are stopped by the server, with signals only it
        sent), decided before the grace: they get the stop grace, counted from the same
        start, once the ordinary grace is over."""
        if self.stop_grace <= self.grace:
            return set()
        told: dict[_Key, bool] = {}
        out = set()
        for key, f in found.items():
            p: Proc | None = f.proc
            for _ in range(_MAX_DEPTH):
                if p is None or p.pid in (self.me, 1) or p.ppid == 0:
                    break
                k = (p.pid, p.ticks)
                if k not in told:
                    told[k] = told_to_stop(p)
                if told[k]:
                    out.add(key)
                    break
                p = _proc(p.ppid)  # ablate: told-to-stop-ancestry
        return out

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

    def _retire(self, scopes: list[Scope], now: Mark) -> None:
        """A checked test or fixture: what carries its tag from now on started after its check."""
        for scope in scopes:
            if scope.kind == KIND_TEST and scope.running:
                scope.running = False
                if scope.opened is not None:
                    scope.windows.append(span(scope.opened, now))
            if scope.kind != KIND_SESSION and not scope.tag.startswith("off."):
                self._past[scope.tag] = f"{scope.kind}\0{now.ticks}\0{scope.label}"

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
        started_by = f.scope.started_by(f.proc.pid, f.proc.ticks)
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


def _gap_text(gap: Scope, window: Span) -> str:
    """A closed gap as one string (Tracker._gaps), _gap_scope's inverse."""
    w = window
    ends = "\0".join("" if x is None else str(x) for x in (w.lo, w.hi))
    return f"{gap.tag}\0{gap.floor}\0{ends}\0{w.t0}\0{w.t1}\0{int(w.complete)}\0{int(w.idle)}\0{gap.label}"


def _gap_scope(text: str) -> Scope:
    tag, floor, lo, hi, t0, t1, complete, idle, label = text.split("\0", 8)
    window = Span(int(lo) if lo else None, int(hi) if hi else None, int(t0), int(t1), complete == "1", idle == "1")
    return Scope(tag, label, KIND_SESSION, int(floor), None, running=False, windows=[window])


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

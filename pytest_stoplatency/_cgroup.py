"""Per-scope cgroups for --process-leaks: the one route that sees a process which dropped
its environment (no tag) AND left pytest's process tree (handed to a daemon outside it).

Layout: <pytest's own cgroup>/stoplatency/<pid>.<start ticks>.<session>/<scope id>. A session
cgroup per pytest session that runs tests (each xdist worker has its own), a child per checked
scope. A process starts in its parent's cgroup, so pytest itself moves into the scope's
cgroup while the scope runs (setup to teardown) and back home before the check; what
the test started, and everything that descends from it, stays in that cgroup whatever it
does to its environment, session or parent. Nested under pytest's own cgroup, not at the
hierarchy's root: whoever put pytest there (a run orchestrator, a service manager, a
container) still contains all of it.

No controllers are enabled: containment only. Moving pytest costs a write to cgroup.procs
each way, which write-locks the per-CPU cgroup_threadgroup_rwsem and so waits for an RCU
grace period when migrations are rare (milliseconds; back-to-back moves share one): the
route is opt-in (--process-leaks-cgroup). bench/process_leaks_cost.py measures it.

A session cgroup is removed at the session's end; one whose owner died is killed and
removed by the next sweep (sweep_dead, from _cleanup.sweep_ownerless).
"""

from __future__ import annotations

import errno
import os
import re
import select
import time
from pathlib import Path

from . import _token

SUBDIR = "stoplatency"
_GONE = (errno.ENOENT, errno.ENODEV, errno.ESRCH)  # a cgroup removed (or being removed) under us
_CGROUP_LINE = re.compile(r"0::(/.*)")
_SESSION_NAME = re.compile(r"(\d+)\.(\d+)(?:\.\d+)?(?:\.[a-z]+)?")  # Owner.session_name, with a kind (.hold)


def root() -> Path | None:
    """The cgroup2 mount point (from /proc/self/mountinfo). Not required writable itself:
    a user may own a delegated cgroup below a root-owned mount; whether pytest can make
    cgroups where it lives is found by trying (probe, Session.create)."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        left, sep, right = line.partition(" - ")
        if not sep or right.split()[0] != "cgroup2":
            continue
        return Path(left.split()[4].replace("\\040", " "))
    return None


def cgroup_of(pid: int) -> str | None:
    """A process's cgroup v2 path relative to the hierarchy's root ("/stoplatency/…/3")."""
    try:
        with open(f"/proc/{int(pid)}/cgroup", "rb") as f:
            raw = f.read(64 * 1024)
    except OSError:
        return None
    for line in raw.decode("utf-8", "replace").splitlines():
        match = _CGROUP_LINE.fullmatch(line)
        if match:
            return match.group(1)
    return None


def own() -> Path | None:
    """The cgroup directory this process lives in (None without a writable cgroup2)."""
    base = root()
    here = cgroup_of(os.getpid())
    if base is None or here is None:
        return None
    return base / here.lstrip("/")


def parent_dir() -> Path | None:
    """Where this process's sessions (and a dead sibling's) live: <own cgroup>/stoplatency."""
    home = own()
    return None if home is None else home / SUBDIR


def members(path: Path) -> list[int]:
    """Pids in the cgroup and every cgroup below it (a member may create its own)."""
    pids: list[int] = []
    for leaf, _, _ in os.walk(path):
        try:
            pids.extend(int(x) for x in (Path(leaf) / "cgroup.procs").read_text().split())
        except OSError as exc:
            if exc.errno not in _GONE:
                raise
    return pids


def _move(pid: int, into: Path) -> None:
    (into / "cgroup.procs").write_text(f"{pid}\n")


def kill(path: Path, timeout: float = 2.0) -> bool:
    """cgroup.kill (recursive: SIGKILL to every member, and to what one forks meanwhile),
    confirmed by cgroup.events reading `populated 0`; True if empty within timeout. Refuses
    a cgroup that holds this very process: it never kills anything outside the cgroup, and
    never pytest."""
    if os.getpid() in members(path):
        raise RuntimeError(f"{path} holds this pytest process: not killing it")
    try:
        (path / "cgroup.kill").write_text("1\n")
    except OSError as exc:
        if exc.errno not in _GONE:
            raise
    return wait_empty(path, timeout)


def wait_empty(path: Path, timeout: float) -> bool:
    """Until cgroup.events says `populated 0` (the kernel flags a change as POLLPRI)."""
    deadline = time.monotonic() + timeout
    try:
        fd = os.open(path / "cgroup.events", os.O_RDONLY)
    except FileNotFoundError:
        return True
    try:
        poller = select.poll()
        poller.register(fd, select.POLLPRI | select.POLLERR)
        while True:
            os.lseek(fd, 0, os.SEEK_SET)
            try:
                events = os.read(fd, 4096)
            except OSError as exc:
                if exc.errno in _GONE:
                    return True
                raise
            if b"populated 0" in events.split(b"\n"):
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            poller.poll(min(50, max(1, int(remaining * 1000))))
    finally:
        os.close(fd)


def remove_tree(path: Path) -> bool:
    """rmdir the cgroup and every cgroup below it, deepest first; True if it is gone."""
    for leaf, _, _ in sorted(os.walk(path), key=lambda w: -len(Path(w[0]).parts)):
        try:
            Path(leaf).rmdir()
        except FileNotFoundError:
            pass
        except OSError:
            return False
    return not path.exists()


class Session:
    """This pytest process's session cgroup and the scope cgroups under it."""

    def __init__(self, path: Path, home: Path) -> None:
        self.path = path
        self.home = home  # where pytest lives outside a scope
        self.inside: Path | None = None  # the scope cgroup pytest is in now

    @classmethod
    def create(cls, session: int | None = None, kind: str = "") -> Session | None:
        """None where cgroup v2 is not writable here, or has no cgroup.kill (Linux < 5.14).
        `kind` (lower-case letters) names a session of another user of this layout than
        --process-leaks-cgroup (pytest_stoplatency.hold: "hold"), beside it in the same
        process, swept the same way once the owner is dead."""
        home = own()
        if home is None:
            return None
        owner = _token.me()
        # one per pytest session (_session.py); a kind's beside it
        path = home / SUBDIR / (owner.session_name(session) + (f".{kind}" if kind else ""))
        for _ in range(3):  # a concurrent session's end may rmdir the shared parent meanwhile
            try:
                path.mkdir(parents=True, exist_ok=True)
                break
            except FileNotFoundError:
                continue
            except OSError:
                return None
        else:
            return None
        if not (path / "cgroup.kill").exists():
            remove_tree(path)
            return None
        return cls(path, home)

    def scope_dir(self, scope_id: str) -> Path:
        path = self.path / scope_id
        path.mkdir(exist_ok=True)
        return path

    def enter(self, path: Path | None) -> None:
        """Move pytest into a scope cgroup (None: back home); its children start there."""
        if path == self.inside:
            return  # a write to cgroup.procs can cost an RCU grace period: none for nothing
        _move(os.getpid(), path if path is not None else self.home)  # ablate: leak-cgroup-enter
        self.inside = path

    def evict(self, path: Path, pids: list[int]) -> None:
        """Move pytest's own long-lived helpers (not a scope's) home before a kill of `path`."""
        inside = set(members(path))
        for pid in pids:
            if pid not in inside:
                continue
            try:
                _move(pid, self.home)
            except OSError:
                pass  # gone, or never there

    def close(self) -> None:
        """Back home; whatever is still in the session cgroup is killed; remove it."""
        if self.inside is not None:
            self.enter(None)
        if members(self.path):
            kill(self.path)
        remove_tree(self.path)
        try:
            self.path.parent.rmdir()  # the shared parent, if no other session uses it
        except OSError:
            pass


def probe() -> bool:
    """Whether a session cgroup can be made here (for the session header, asked once)."""
    parent = parent_dir()
    if parent is None:
        return False
    path = parent / f".probe-{os.getpid()}"
    try:
        path.mkdir(parents=True, exist_ok=True)
        try:
            return (path / "cgroup.kill").exists()
        finally:
            path.rmdir()
    except OSError:
        return False


def sweep_dead() -> int:
    """Kill and remove every session cgroup beside ours whose owner is dead; return how
    many processes were in them."""
    parent = parent_dir()
    if parent is None or not parent.is_dir():
        return 0
    killed = 0
    for entry in os.scandir(parent):
        match = _SESSION_NAME.fullmatch(entry.name)
        if not match or not entry.is_dir(follow_symlinks=False):
            continue
        if _token.Owner(int(match[1]), int(match[2])).alive():
            continue
        path = Path(entry.path)
        try:
            killed += len(members(path))
            kill(path)
            remove_tree(path)
        except (OSError, RuntimeError):
            continue
    return killed

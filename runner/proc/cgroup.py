"""cgroup v2 containment: each run in its own cgroup, killed with cgroup.kill.

Layout: <cgroup2 root>/runner/<run key>/{engine,work} (the key: RunDir.key). The engine moves itself into
engine/; every child moves itself into work/ before exec (a shell trampoline), so a
descendant that scrubbed its environment and left its group is still in work/. No
controllers are enabled: containment only, no limits.

The engine's stop asks nothing new of the kernel that a limit could refuse: the thread
that takes the engine out of its cgroup and the descriptors of the files its stop
writes (work/cgroup.kill, the home cgroup's cgroup.procs) and reads (work/cgroup.events)
are made at start-up (`enter_engine`). A run that filled its pids cgroup (pids.max) or
the user's RLIMIT_NPROC could otherwise refuse the engine the thread its stop starts
("can't start new thread"), and the stop would wait for its fallback.
"""

from __future__ import annotations

import errno
import os
import select
import signal
import stat
import time
from pathlib import Path

from runner import defaults
from runner import log as _log
from runner.errors import BadInput
from runner.ident import Identity
from runner.proc import identity, signals
from runner.proc.membership import Membership, cgroup_of

TYPE_CHECKING = False

if TYPE_CHECKING:
    import threading
    from collections.abc import Callable, Collection, Sequence

log = _log.get("runner.proc.cgroup")

_fallback_said = False
_available: bool | None = None


_root: tuple[Path | None] | None = None


def cgroup2_root() -> Path | None:
    """The cgroup2 mount point from /proc/self/mountinfo, if writable. Found once per
    process: `stop --all` and the dashboard ask it for every run (500 reads of
    mountinfo were a third of a 500-run `stop --all`), and a process's mounts do not
    move under it."""
    global _root
    if _root is None:
        _root = (_find_cgroup2_root(),)
    return _root[0]


def _find_cgroup2_root() -> Path | None:
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        left, sep, right = line.partition(" - ")
        if not sep or right.split()[0] != "cgroup2":
            continue
        mount_point = Path(left.split()[4].replace("\\040", " "))
        if os.access(mount_point, os.W_OK):
            return mount_point
    return None


def available() -> bool:
    """A writable cgroup2 where a child cgroup has cgroup.kill (Linux 5.14+). Probed once."""
    global _available
    if _available is None:
        _available = _probe()
    return _available


def _probe() -> bool:
    root = cgroup2_root()
    if root is None:
        return False
    probe = root / "runner" / f".probe-{os.getpid()}"
    try:
        probe.mkdir(parents=True, exist_ok=True)
        try:
            return (probe / "cgroup.kill").exists()
        finally:
            probe.rmdir()
    except OSError:
        return False


def resolve_containment(mode: str) -> str:
    """ "cgroup" or "group". "auto" falls back to group with one message; "cgroup"
    where it is unavailable refuses to start."""
    global _fallback_said
    if mode == "group":
        return "group"
    if mode not in ("auto", "cgroup"):
        raise BadInput(f"containment: expected 'auto', 'group' or 'cgroup', got {mode!r}")
    if available():
        return "cgroup"
    if mode == "cgroup":
        raise BadInput("containment = 'cgroup': no writable cgroup v2 hierarchy with cgroup.kill on this machine")
    if not _fallback_said:
        _fallback_said = True
        log.warning("no writable cgroup v2 hierarchy: containment falls back to process groups and the run tag")
    return "group"


# What the kernel answers about a cgroup that is gone or being removed.
_GONE = (errno.ENOENT, errno.ENODEV, errno.ESRCH)


def _own_cgroup() -> Path | None:
    """The cgroup v2 directory the calling process lives in."""
    root = cgroup2_root()
    if root is None:
        return None
    here = cgroup_of(os.getpid())
    return root if here is None else root / here.lstrip("/")


def run_cgroup_path(run_id: str) -> Path | None:
    """The one cgroup a run may have: <cgroup2 root>/runner/<run key>. A path read back
    from a run directory is used only if it is this one (survey.py)."""
    root = cgroup2_root()
    return None if root is None else root / "runner" / run_id


def leftover(key: str | None, root: Path | None = None) -> Path | None:
    """The run's cgroup (run_cgroup_path) if it exists: while no engine of the run is
    live, what an engine killed before it could remove it left on the host (a SIGKILLed
    container's PID 1 takes its pid namespace down, never the host's cgroup). `root`:
    the cgroup2 root, when the caller has already found it (`runner list`, once for all
    its runs)."""
    if not key:
        return None
    root = root if root is not None else cgroup2_root()
    if root is None:
        return None
    try:
        # One lstat of the path as a string: no pathlib for the many runs that have none.
        st = os.stat(f"{root}/runner/{key}", follow_symlinks=False)
    except OSError:
        return None
    return root / "runner" / key if stat.S_ISDIR(st.st_mode) else None


def leftovers(root: Path | None = None) -> frozenset[str]:
    """The names of every run cgroup there is (<cgroup2 root>/runner/<key>, a real
    directory, not a link), in one look: a reader of many runs (`runner list`) asks of
    each dead run whether its key is among them, rather than looking for each (leftover).
    Empty where there is no cgroup2."""
    root = root if root is not None else cgroup2_root()
    if root is None:
        return frozenset()
    try:
        with os.scandir(root / "runner") as it:
            return frozenset(e.name for e in it if e.is_dir(follow_symlinks=False))
    except OSError:
        return frozenset()


def remove_leftover(key: str | None) -> Path | None:
    """Remove the run's cgroup if it is a leftover: no process in it or below it (the
    caller has proven the run's engine gone: it holds the run's lock). Every cgroup below
    it goes too, deepest first (a member may have made its own). Returns the path removed;
    None when there was none, or when it still holds a process (then nothing is touched)."""
    path = leftover(key)
    if path is None or RunCgroup(path).populated("all"):
        return None
    for here, _, _ in sorted(os.walk(path), key=lambda w: -len(Path(w[0]).parts)):
        try:
            Path(here).rmdir()  # ablate: resume-removes-leftover-cgroup
        except FileNotFoundError:
            pass
        except OSError:
            return None  # a process came in meanwhile: the cgroup is not a leftover
    return path


class RunCgroup:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._home: Path | None = None  # where enter_engine() moved the caller from
        self._home_procs: int | None = None  # its cgroup.procs, opened by enter_engine()
        self._ready: dict[Path, int] = {}  # the stop's files, opened by enter_engine()
        self._leave_asked: threading.Event | None = None
        self._left: threading.Event | None = None

    @property
    def relative(self) -> str | None:
        """This cgroup as /proc/PID/cgroup spells it: relative to the cgroup2 root
        ("/runner/<run key>"), which is what membership.py compares against."""
        root = cgroup2_root()
        if root is None:
            return None
        try:
            return "/" + str(self.path.relative_to(root))
        except ValueError:
            return None

    @classmethod
    def create(cls, run_id: str) -> RunCgroup:
        path = run_cgroup_path(run_id)
        if path is None:
            raise BadInput("no writable cgroup v2 hierarchy")
        for sub in (path / "engine", path / "work"):
            sub.mkdir(parents=True, exist_ok=True)
        return cls(path)

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> RunCgroup:
        path = Path(path)
        if path.is_symlink() or not (path / "cgroup.procs").exists():
            raise FileNotFoundError(f"{path}: not a cgroup")
        return cls(path)

    def _dir(self, which: str) -> Path:
        return {"engine": self.path / "engine", "work": self.path / "work", "all": self.path}[which]

    def enter_engine(self) -> None:
        """Move the engine in, and make ready what its stop will need: the descriptors of
        work/cgroup.kill and work/cgroup.events, of the home cgroup's cgroup.procs, and
        the thread that leaves (leave_in_background). Nothing of the stop starts a thread
        or opens a cgroup file then (see the module's docstring)."""
        home = _own_cgroup()
        if home is not None:
            self._home_procs = os.open(home / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
        self._home = home
        work = self.path / "work"
        self._ready[work / "cgroup.kill"] = os.open(work / "cgroup.kill", os.O_WRONLY | os.O_CLOEXEC)
        self._ready[work / "cgroup.events"] = os.open(work / "cgroup.events", os.O_RDONLY | os.O_CLOEXEC)
        (self.path / "engine" / "cgroup.procs").write_text(f"{os.getpid()}\n")
        self._start_leaver()

    def _start_leaver(self) -> None:
        """The thread that will take the engine out of its cgroup, started now and parked
        until the stop (or the run's end) asks. Where even this one thread is refused
        (the limit is already reached at start-up), the leave is done in place."""
        import threading  # the engine's alone: a stopper never leaves a cgroup

        asked, left = threading.Event(), threading.Event()

        def leave_when_asked() -> None:
            asked.wait()
            try:
                self.leave()
            except OSError:
                pass  # remove() tries again and reports
            finally:
                left.set()

        try:
            threading.Thread(target=leave_when_asked, name="cgroup-leave", daemon=True).start()
        except RuntimeError:  # can't start new thread
            return
        self._leave_asked, self._left = asked, left

    def wrap_argv(self, argv: Sequence[str]) -> list[str]:
        # The child writes its own pid before exec: no moment exists where it (or
        # anything it forks) runs outside work/. Not preexec_fn, which is unsafe once
        # the engine has threads.
        import shlex  # only a child's preexec wrapper needs it

        procs = shlex.quote(str(self.path / "work" / "cgroup.procs"))
        return ["/bin/sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh", *argv]

    def members(self, which: str = "all") -> list[int]:
        """Pids in the cgroup `which` and every cgroup below it (a member may create its
        own). A concurrent stopper may remove cgroups under us: os.walk skips a vanished
        directory (no onerror), and a vanished cgroup simply has no members."""
        pids: list[int] = []
        for leaf, _, _ in os.walk(self._dir(which)):
            try:
                pids.extend(int(x) for x in (Path(leaf) / "cgroup.procs").read_text().split())
            except OSError as exc:
                if exc.errno not in _GONE:
                    raise
        return pids

    def member_identities(self, which: str = "all", skip: Collection[int] = ()) -> list[Identity]:
        """The living members' identities, but for the pids in `skip` (already known)."""
        out: list[Identity] = []
        for pid in self.members(which):
            if pid in skip:
                continue
            ident = identity.current(pid)
            if ident is not None:
                out.append(ident)
        return out

    def populated(self, which: str = "all") -> bool:
        base = self._dir(which)
        try:
            text = (base / "cgroup.events").read_text()
        except FileNotFoundError:
            return False
        return "populated 1" in text.split("\n")

    def _empty_now(self, base: Path) -> bool:
        """cgroup.events says `populated 0` at one read (through the descriptor
        enter_engine() opened, if any; a read takes no lock a migration holds)."""
        fd = self._ready.get(base / "cgroup.events")
        try:
            events = os.pread(fd, 4096, 0) if fd is not None else (base / "cgroup.events").read_bytes()
        except OSError:
            return False  # the kill and its confirmation decide
        return b"populated 0" in events.split(b"\n")

    def kill(self, which: str = "work", timeout: float = 1.0, deaths: Callable[[float], object] | None = None) -> bool:
        """cgroup.kill, confirmed by cgroup.events showing `populated 0`; True if empty
        within timeout. If this process or an ancestor is inside (a `runner stop` from a
        hook), the cgroup.kill would take it too: then each other member is SIGKILLed
        through its pidfd instead. `deaths(deadline)`: the caller's own wait for the
        members it watches through pidfds, run before cgroup.events is first read."""
        base = self._dir(which)
        ready = self._ready.get(base / "cgroup.kill")
        if ready is None and not base.exists():
            return True
        if self._empty_now(base):
            # Nothing to kill, nor can anything come in (only a migration brings a process
            # into an empty cgroup, and the engine starts none while it stops). The write
            # would wait for the engine's own migration out of its cgroup (cgroup.kill
            # takes the lock a migration holds for its RCU grace period: 7 ms measured on
            # the engine's clean-up after every stop, contained).
            return True  # ablate: empty-cgroup-not-killed
        protected = signals.protected_pids()
        if protected & set(self.members(which)):
            log.warning("%s holds this process or an ancestor: killing its other members one by one", base)
            members = Membership(cgroup=self.relative)
            for ident in self.member_identities(which):
                signals.signal_process(ident, signal.SIGKILL, members)
        else:
            try:
                if ready is not None:
                    os.pwrite(ready, b"1\n", 0)
                else:
                    (base / "cgroup.kill").write_text("1\n")
            except OSError as exc:
                # The kernel answers ENOENT (ENODEV) on the write, with no file name, when
                # the cgroup is being removed: a dying cgroup holds nothing left to kill.
                if exc.errno not in _GONE:
                    raise
            # cgroup.kill does not end a process whose leader thread exited while
            # another thread runs (seen on Linux 6.18: populated 1 after it, the process
            # alive): such a process is in cgroup.procs, its leader not in
            # cgroup.threads. Killed by its pid (kill(2) of it reaches every thread).
            self._kill_by_pid(which, self.leaderless(which))  # ablate: threads-as-liveness-cgroup
        first = time.monotonic() + timeout / 2
        if deaths is not None:
            # A pidfd turns readable the moment its process exits; cgroup.events says an
            # emptying late (its poll backs off to 50 ms, its notification is rate-limited):
            # at a thousand members, tens of milliseconds past the last death. The deaths
            # the caller watches are waited for first, in the same half of the timeout,
            # and cgroup.events read once they are over (what it did not watch keeps the
            # cgroup populated). After the write: some of them only cgroup.kill kills.
            deaths(first)  # ablate: cgroup-kill-waits-deaths-first
        if self.wait_empty(which, max(0.0, first - time.monotonic())):
            return True
        # Still populated: not empty, whatever was written. What is left is found in the
        # cgroup's own lists and killed by its pid (proven as every signal is); the
        # caller's confirmation names what even that leaves.
        # Said as a warning only when even that leaves it populated: on a busy machine the
        # kill's deaths alone can outlast half the timeout, and a stop that ends whole
        # has nothing to warn of.
        left = self.members(which)
        log.info("%s still populated after cgroup.kill: killing pids %s by pid", base, sorted(left)[:20])
        self._kill_by_pid(which, left)
        if self.wait_empty(which, timeout / 2):
            return True
        log.warning("%s still populated after cgroup.kill and a kill by pid of %s", base, sorted(left)[:20])
        return False

    def leaderless(self, which: str = "work") -> list[int]:
        """Processes in the cgroup `which` (and below) whose leader thread exited while
        another thread of theirs runs: in cgroup.procs, not in cgroup.threads."""
        out: list[int] = []
        for leaf, _, _ in os.walk(self._dir(which)):
            try:
                procs = (Path(leaf) / "cgroup.procs").read_bytes().split()
                threads = set((Path(leaf) / "cgroup.threads").read_bytes().split())
            except OSError as exc:
                if exc.errno not in _GONE:
                    raise
                continue
            out += [int(p) for p in procs if p not in threads]
        return out

    def _kill_by_pid(self, which: str, pids: Collection[int]) -> None:
        """SIGKILL each of `pids` through its own pidfd, once proven a member of this
        cgroup (membership.py); never this process or an ancestor."""
        if not pids:
            return
        members = Membership(cgroup=self.relative)
        protected = signals.protected_pids()
        for pid in pids:
            ident = identity.current(pid)
            if ident is not None and pid not in protected:
                signals.signal_process(ident, signal.SIGKILL, members)

    def wait_empty(self, which: str = "all", timeout: float = 1.0) -> bool:
        """Until cgroup.events says `populated 0`. The kernel signals a change of
        cgroup.events as POLLPRI on an open fd, but late: through a work queue, and at
        most once per 20 ms per file (cgroup_file_notify). A read shows the truth at
        once, so the poll between reads starts at 1 ms and doubles up to 50 ms: a stop
        whose last process is leaving as the wait begins waits about a millisecond,
        not the notification's 10-20 ms (measured in the engine's stop), and a long wait
        costs a read per 50 ms."""
        path = self._dir(which) / "cgroup.events"
        deadline = time.monotonic() + timeout
        fd = self._ready.get(path)
        if fd is None:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                return True
            return self._wait_events(fd, deadline, close=True)
        return self._wait_events(fd, deadline, close=False)

    @staticmethod
    def _wait_events(fd: int, deadline: float, *, close: bool) -> bool:
        try:
            poller = select.poll()
            poller.register(fd, select.POLLPRI | select.POLLERR)
            cap = 1  # ms  # ablate: cgroup-wait-polls-fast
            while True:
                try:
                    # pread: the engine's descriptor is shared by its threads (the
                    # watchdog's kill, the main thread's clean-up), never seeked.
                    events = os.pread(fd, 4096, 0)
                except OSError as exc:
                    if exc.errno in _GONE:
                        return True  # removed under us: a removed cgroup is empty
                    raise
                if b"populated 0" in events.split(b"\n"):
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                poller.poll(min(cap, max(1, int(remaining * 1000))))
                cap = min(2 * cap, 50)
        finally:
            if close:
                os.close(fd)

    def leave(self) -> None:
        """Move the engine back to the cgroup it came from: a cgroup that holds a
        process cannot be removed. Through the descriptor enter_engine() opened; a move
        into a cgroup is never refused by its pids limit (only a fork is)."""
        if self._home is None:
            return
        if _own_cgroup() == self._home:
            # Out already (the parked thread left beside the kill): a write to
            # cgroup.procs migrates even a process that is where it asks to go, and waits
            # out another RCU grace period (about 12 ms measured, on the exit a stopper
            # waits for, after every record) once the first one's is long past, as it is
            # after a trapping call's kill grace.
            return  # ablate: leave-once
        line = f"{os.getpid()}\n".encode()
        if self._home_procs is not None:
            os.write(self._home_procs, line)
        else:
            (self._home / "cgroup.procs").write_bytes(line)

    def leave_in_background(self) -> None:
        """Have the thread enter_engine() parked leave(), once nothing of the run is left
        to contain. The kernel's migration is milliseconds of waiting (an RCU grace
        period) on the exit path a stopper waits on; the engine's last writes (state,
        journal, its watchdog's exit) overlap it now. No thread is started here: the stop
        path needs none (a full pids cgroup would refuse it). remove() waits for it."""
        asked = self._leave_asked
        if self._home is None or asked is None:
            return  # no thread was made ready: remove() leaves in place
        asked.set()  # ablate: stop-needs-no-new-thread

    def remove(self) -> None:
        """rmdir the run's cgroup and every cgroup below it, deepest first: work/,
        engine/, and the cgroups a member made below them (only possible once empty).
        What could not be removed is named in the OSError raised, after every other
        one was tried."""
        busy = False  # the parked thread was asked and has not said it is done
        if self._leave_asked is not None and self._left is not None and self._leave_asked.is_set():
            busy = not self._left.wait(timeout=defaults.CONFIRM_TIMEOUT)
        self._leave_asked = self._left = None
        self.leave()
        for fd in self._ready.values():
            os.close(fd)
        self._ready.clear()
        if self._home_procs is not None and not busy:  # a busy thread may still write to it
            os.close(self._home_procs)
            self._home_procs = None
        failed = remove_tree(self.path)
        if failed:
            raise OSError(errno.EBUSY, f"cgroups not removed: {'; '.join(failed)}")


def remove_tree(path: Path) -> list[str]:
    """rmdir `path` and every directory below it, deepest first (a cgroup holds no files
    of its own to remove: the kernel's go with it). Returns what could not be removed
    ("PATH (why)"); one already gone is not a failure."""
    failed: list[str] = []
    deepest_first = [here for here, _, _ in os.walk(path, topdown=False)]  # ablate: sub-cgroups-removed
    for here in deepest_first:
        try:
            os.rmdir(here)
        except FileNotFoundError:
            pass
        except OSError as exc:
            failed.append(f"{here} ({exc.strerror})")
    return failed

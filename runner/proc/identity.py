"""Process identity read live from /proc: a process's stat, its age, and whether a
recorded identity (runner/ident.py: pid, start ticks, boot id) still names it. The
identity files of the run directory are files/identity_file.py's.
"""

from __future__ import annotations

import os
import time

from runner import ident
from runner.ident import Identity
from runner.values import FrozenValue

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Final


class Stat(FrozenValue):
    """The few fields of /proc/PID/stat the runner needs. Treated as immutable; slotted,
    since a scan of /proc creates one per process."""

    __slots__ = ("pid", "state", "ppid", "pgid", "sid", "start_ticks", "wait_status", "flags", "tid")

    def __init__(
        self,
        pid: int,
        state: str,
        ppid: int,
        pgid: int,
        sid: int,
        start_ticks: int,
        wait_status: int | None = None,
        flags: int = 0,
        tid: int | None = None,
    ) -> None:
        self.pid: Final = pid
        self.state: Final = state
        self.ppid: Final = ppid
        self.pgid: Final = pgid
        self.sid: Final = sid
        self.start_ticks: Final = start_ticks
        self.wait_status: Final = wait_status
        """Field 52 (exit_code): a zombie's wait(2) status, until its parent reaps it."""
        self.flags: Final = flags
        """Field 9: the kernel's PF_* flags of the task."""
        self.tid: Final = pid if tid is None else tid
        """The thread whose state and flags these are: the leader (`pid`), or, when the
        leader has exited (a zombie) while another thread of the process runs, that
        thread (see `stat`). Its /proc/PID/task/TID is where the process's environment
        and command line are still read."""

    @property
    def zombie(self) -> bool:
        # X (dead) is only ever seen in the instant before the entry vanishes.
        return self.state in ("Z", "X")

    @property
    def exiting(self) -> bool:
        """On its way out (PF_EXITING): it runs no more code of its own. The kernel detaches
        its memory, and with it /proc/PID/environ, before it becomes a zombie; freeing a
        large address space keeps it there, state R, for as long as a second."""
        return self.zombie or bool(self.flags & _PF_EXITING)

    @property
    def kernel(self) -> bool:
        """A kernel thread (PF_KTHREAD, which no process can set on itself): it has no
        environment, so never the run's tag."""
        return bool(self.flags & _PF_KTHREAD)


_PF_EXITING = 0x4  # include/linux/sched.h


def exiting(pid: int) -> bool:
    """Gone, a zombie, or on its way out (Stat.exiting)."""
    st = stat(pid)
    return st is None or st.exiting


_PF_KTHREAD = 0x00200000


def stat(pid: int) -> Stat | None:
    """Parse /proc/PID/stat; None if the process is gone (zombies are returned).

    Alive means any live thread. A leader thread that exited (`pthread_exit` from main,
    some runtimes' launchers) shows `Z` in /proc/PID/stat while another thread of the
    process runs on: the kernel keeps the process (its pidfd stays unreadable, kill(2)
    of its pid reaches the whole thread group), and so does this reading: its state and
    flags are then those of a live thread (one in uninterruptible sleep first), `tid`
    names it. Only a process all of whose threads exited reads as a zombie. The cost is
    one listing of /proc/PID/task, for a leader that reads `Z` with other threads
    counted (field 20) only: a plain zombie (a stop's rounds see hundreds) costs none."""
    # os.open and one os.read, not open(): a stop's scan reads every process's stat, and
    # the buffered file object costs 40 % more per read (1.39 against 0.87 ms a pass
    # over 116 processes, measured). The file is under a page: one read takes it whole.
    try:
        fd = os.open(f"/proc/{int(pid)}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, ProcessLookupError):
        return None
    try:
        raw = os.read(fd, 4096)
    except ProcessLookupError:  # the process was reaped between the open and the read
        return None
    finally:
        os.close(fd)
    if not raw:
        return None
    # comm (field 2) may hold spaces and parentheses: split after the LAST ')'.
    rest = raw[raw.rindex(b")") + 2 :].split()
    # rest[0] is field 3 (state), so field n is rest[n - 3].
    state, flags, tid = rest[0].decode(), int(rest[6]), int(pid)
    if state == "Z" and int(rest[17]) > 1:  # field 20, num_threads: 1 for a plain zombie
        thread = live_thread(int(pid))  # ablate: threads-as-liveness
        if thread is not None:
            tid, state, flags = thread
    return Stat(
        pid=int(pid),
        state=state,
        ppid=int(rest[1]),
        pgid=int(rest[2]),
        sid=int(rest[3]),
        start_ticks=int(rest[19]),
        wait_status=int(rest[49]) if len(rest) >= 50 else None,
        flags=flags,
        tid=tid,
    )


def live_thread(pid: int) -> tuple[int, str, int] | None:
    """A thread of process `pid` other than its leader that has not exited: (tid, state,
    flags), one in uninterruptible sleep (D) before any other; None when there is none
    (the whole process exited, or it is gone)."""
    try:
        tids = os.listdir(f"/proc/{int(pid)}/task")
    except OSError:
        return None
    found: tuple[int, str, int] | None = None
    for name in tids:
        if name == str(pid):
            continue
        try:
            fd = os.open(f"/proc/{int(pid)}/task/{name}/stat", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            raw = os.read(fd, 4096)
        except OSError:
            continue
        finally:
            os.close(fd)
        if not raw:
            continue
        rest = raw[raw.rindex(b")") + 2 :].split()
        state = rest[0].decode()
        if state in ("Z", "X"):
            continue
        if found is None or state == "D":
            found = (int(name), state, int(rest[6]))
        if state == "D":
            break
    return found


def proc_dir(st: Stat) -> str:
    """Where a process's environment, command line and descriptors are read: /proc/PID,
    or, its leader exited while another thread runs, that thread's /proc/PID/task/TID
    (the leader's own read ESRCH or empty then)."""
    return f"/proc/{st.pid}" if st.tid == st.pid else f"/proc/{st.pid}/task/{st.tid}"


def killed_by(pid: int) -> int | None:
    """For a zombie not yet reaped: the signal that killed it (from its wait status), or
    None (alive, reaped, exited normally)."""
    st = stat(pid)
    if st is None or not st.zombie or st.wait_status is None:
        return None
    return st.wait_status & 0x7F or None


def descriptors(pid: int) -> Iterator[tuple[str, os.stat_result]]:
    """Each open descriptor of `pid` (its number in /proc/PID/fd) and what it names,
    stat'ed through the link; one that closes meanwhile is passed over. Empty for a
    process gone or not ours to read."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return
    for fd in fds:
        try:
            yield fd, os.stat(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue


def all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


class Scan:
    """One pass over /proc: every process's stat, read once. A stop round takes its
    process groups and its tag sweep's candidates from one Scan, instead of one pass
    over every process per group (the cost that grows with the machine, not the run)."""

    def __init__(self) -> None:
        self.stats: dict[int, Stat] = {}
        for pid in all_pids():
            st = stat(pid)
            if st is not None:
                self.stats[pid] = st
        self._groups: dict[int, list[Stat]] | None = None

    def group(self, pgid: int) -> list[Stat]:
        """Every process (zombies included) that was in process group `pgid`."""
        if self._groups is None:
            self._groups = {}
            for st in self.stats.values():
                self._groups.setdefault(st.pgid, []).append(st)
        return list(self._groups.get(pgid, ()))


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def age(start_ticks: int) -> float:
    """Seconds since the process that started at `start_ticks` started: field 22 of its
    stat against the boot clock (CLOCK_BOOTTIME, the clock /proc/uptime and the start
    ticks count on: time asleep included), never negative."""
    return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / _CLK_TCK)


def start_ticks(pid: int) -> int | None:
    st = stat(pid)
    return None if st is None else st.start_ticks


def from_stat(st: Stat, boot: str | None = None) -> Identity:
    """The identity a stat reading proves (`boot`: ident.boot_id(), when the caller has it)."""
    return Identity(st.pid, st.pgid, st.sid, st.start_ticks, ident.boot_id() if boot is None else boot)


def current(pid: int) -> Identity | None:
    """Identity of a living process; None if it is gone or a zombie."""
    st = stat(pid)
    if st is None or st.zombie:
        return None
    return from_stat(st)


def current_or_zombie(pid: int) -> Identity | None:
    """Identity even of a zombie: an unreaped child still pins its pid, so its identity
    is exactly as good as a living one's (used when registering a child that died fast)."""
    st = stat(pid)
    return None if st is None else from_stat(st)


def matches(recorded: Identity, st: Stat | None) -> bool:
    return st is not None and st.start_ticks == recorded.start_ticks and recorded.boot_id == ident.boot_id()


def is_running(recorded: Identity) -> bool:
    """Same boot, alive, not a zombie, same start ticks."""
    if recorded.boot_id != ident.boot_id():
        return False
    st = stat(recorded.pid)
    return st is not None and not st.zombie and st.start_ticks == recorded.start_ticks

"""Identity-guarded signals.

One process: open a pidfd, compare start ticks, prove membership of the run
(membership.py), signal through the pidfd. The pidfd pins the process it was opened on,
so once the start ticks read after opening it match, the signal cannot land on a
newcomer that took the pid over. Groups are the reaper's (reaper.signal_group): a group
has no pidfd, so it is signalled only once its leader or every member is proven.
"""

from __future__ import annotations

import enum
import errno
import os
import select
import signal
import time

from runner import log as _log
from runner.ident import Identity, boot_id
from runner.proc import identity

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Collection

    from runner.proc.membership import Membership

log = _log.get("runner.proc.signals")

# Attempts at pidfd_open while it says ENOENT yet /proc shows the process (see open_pidfd).
_ENOENT_RETRIES = 20


class Delivery(enum.Enum):
    """What became of one signal (events.Outcome is what became of a command)."""

    SENT = "sent"
    GONE = "gone"  # already dead (or a zombie): nothing to do
    STALE = "stale"  # the pid now belongs to another process (or another boot): refused
    PROTECTED = "protected"  # ourselves or an ancestor: refused
    NOT_MEMBER = "not-member"  # alive and itself, but not proven the run's: refused


def protected_pids() -> set[int]:
    """This process and every ancestor up to init (and pid 0/1 themselves).

    A `runner stop` started from inside a run's hook carries the run's tag and lives in
    the run's tree, so a tag sweep or group kill would otherwise kill the stopper."""
    seen = {0, 1}
    pid = os.getpid()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        st = identity.stat(pid)
        if st is None:
            break
        pid = st.ppid
    return seen


def open_pidfd(ident: Identity) -> tuple[int | None, Delivery]:
    """A pidfd verified to refer to `ident`'s process, or (None, why not).

    Order matters: open first, then compare. If the pid was reused before the open, the
    ticks differ (STALE). If it dies after the open, the pidfd still names the old
    process and a signal through it is a harmless ESRCH."""
    if ident.boot_id != boot_id():
        log.warning("refusing pid %d: its identity is from another boot", ident.pid)
        return None, Delivery.STALE
    for attempt in range(_ENOENT_RETRIES):
        try:
            fd = os.pidfd_open(ident.pid)
            break
        except ProcessLookupError:
            return None, Delivery.GONE
        except OSError as exc:
            if exc.errno == errno.EINVAL:
                # The pid now names a thread that leads no process: certainly not ours.
                log.warning("refusing pid %d: it now names a thread of another process", ident.pid)
                return None, Delivery.STALE
            if exc.errno != errno.ENOENT:
                raise
            # Not in the man page, but seen on Linux 6.18 (pidfs) for the pid of a
            # process already dead while tests handed pids out again through
            # ns_last_pid (most likely the number caught between owners). A process of
            # ours that is alive can always be opened, so this reads as gone, unless
            # /proc still shows our process there: then the state is transient and
            # worth a short retry, never a crash.
            st = identity.stat(ident.pid)
            if st is None or st.zombie:
                return None, Delivery.GONE
            if not identity.matches(ident, st):
                log.warning("refusing pid %d: it now names another process", ident.pid)
                return None, Delivery.STALE
            time.sleep(0.001 * (attempt + 1))
    else:
        raise OSError(errno.ENOENT, f"pidfd_open({ident.pid}) kept failing while /proc shows the process")
    st = identity.stat(ident.pid)
    if st is None or st.zombie:
        os.close(fd)
        return None, Delivery.GONE
    if st.start_ticks != ident.start_ticks:  # ablate: identity-check
        return _refuse_stale(fd, ident, st)
    return fd, Delivery.SENT


def _refuse_stale(fd: int, ident: Identity, st: identity.Stat) -> tuple[None, Delivery]:
    os.close(fd)
    log.warning(
        "refusing to signal pid %d: start ticks %d, expected %d (pid reused by another process)",
        ident.pid,
        st.start_ticks,
        ident.start_ticks,
    )
    return None, Delivery.STALE


def signal_process(ident: Identity, sig: int, membership: Membership) -> Delivery:
    """Signal one recorded process, if it is still itself and proven the run's."""
    if ident.pid in protected_pids():
        log.warning("refusing to signal pid %d: it is this process or one of its ancestors", ident.pid)
        return Delivery.PROTECTED
    fd, outcome = open_pidfd(ident)
    if fd is None:
        return outcome
    if membership.proof(ident.pid, ident.start_ticks) is None:
        os.close(fd)
        log.warning("refusing to signal %s", membership.why_not(ident.pid))
        return Delivery.NOT_MEMBER
    try:
        signal.pidfd_send_signal(fd, sig)
    except ProcessLookupError:
        return Delivery.GONE
    finally:
        os.close(fd)
    return Delivery.SENT


def group_stats(pgid: int) -> list[identity.Stat]:
    """Every process (zombies included) currently in process group `pgid`."""
    out: list[identity.Stat] = []
    for pid in identity.all_pids():
        st = identity.stat(pid)
        if st is not None and st.pgid == pgid:
            out.append(st)
    return out


def refusal(pgid: int, protected: Collection[int] | None = None) -> str | None:
    """Why a group may never be signalled, or None. `protected`: protected_pids(), when
    the caller already has it (the reaper asks for every group of every round)."""
    if pgid <= 1:
        return f"process group {pgid} is never signalled"
    if pgid == os.getpgrp():
        return f"process group {pgid} is this process's own group"
    for pid in protected_pids() if protected is None else protected:
        if pid <= 1:
            continue
        st = identity.stat(pid)
        if st is not None and st.pgid == pgid:
            return f"process group {pgid} holds pid {pid}, this process or one of its ancestors"
    return None


def wait_gone(engine: Identity, timeout: float) -> bool:
    """Wait until the engine process is gone (a zombie counts as gone), event-driven: a
    pidfd becomes readable when the process exits, child of ours or not (every machine
    the runner runs on has pidfd_open: cli.unsupported asks first). A stop signal to
    this command (Ctrl-C) ends the wait at once however it lands (_Wakeup)."""
    deadline = time.monotonic() + timeout
    try:
        fd = os.pidfd_open(engine.pid)
    except OSError:
        return not identity.is_running(engine)  # gone already (ESRCH), or not ours to open
    wake = _Wakeup()
    try:
        # The pidfd is only ours to trust once the start time still matches.
        if not identity.is_running(engine):
            return True
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return not identity.is_running(engine)
            ready, _, _ = select.select([fd, *wake.fds], [], [], left)
            if wake.fd is not None and wake.fd in ready:
                wake.drain()  # its handler (KeyboardInterrupt) runs by this call at the latest
            if not identity.is_running(engine):
                return True
    finally:
        wake.close()
        os.close(fd)


class _Wakeup:
    """The interpreter's wakeup fd, for the length of one wait: a pipe its C-level signal
    handler writes each signal's number to the moment the signal arrives. A Python
    handler (Ctrl-C's KeyboardInterrupt) only runs when the main thread runs bytecode: a
    signal that lands after the interpreter's last check and before the select() blocks
    (a waiter preempted there, on a busy machine), or on another thread, would otherwise
    leave the select asleep for its whole timeout (an hour, for `runner wait`). Off the
    main thread, or where a wakeup fd is set already (the engine's), none: `fd` is None.
    Python cannot read back the warn_on_full_buffer flag of a wakeup fd set already: it
    is set back with the flag off (no caller of wait_gone has one today)."""

    __slots__ = ("fd", "_write")

    def __init__(self) -> None:
        self.fd: int | None = None  # the read end, the one a select waits on
        self._write: int | None = None
        r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            previous = signal.set_wakeup_fd(w, warn_on_full_buffer=False)  # ablate: wait-gone-wakes-on-signal
        except ValueError:  # not the main thread: its signals are the main thread's to hear
            os.close(r)
            os.close(w)
            return
        if previous != -1:  # someone else's: theirs again
            signal.set_wakeup_fd(previous, warn_on_full_buffer=False)
            os.close(r)
            os.close(w)
            return
        self.fd, self._write = r, w

    @property
    def fds(self) -> list[int]:
        """What a select waits on: the read end, or nothing."""
        return [] if self.fd is None else [self.fd]

    def drain(self) -> None:
        if self.fd is None:
            return
        try:
            while os.read(self.fd, 512):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        if self.fd is not None and self._write is not None:
            signal.set_wakeup_fd(-1)  # before the close: the fd number may be reused
            os.close(self.fd)
            os.close(self._write)
            self.fd = self._write = None

"""/proc helpers: identity (pid + start ticks), zombie-is-dead, token scans, pidfd waits.

Every signal goes through a pidfd opened BEFORE the identity check, so a pid reused
between the check and the kill can never be hit.
"""

from __future__ import annotations

import os
import select
import signal
import time

_TOKEN_KEY = b"STOPLATENCY_VICTIM="


def _fields(path: str) -> list[bytes] | None:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rfind(b")") + 2 :].split() or None


def _live_thread(pid: int) -> int | None:
    """A thread of `pid` other than its leader that has not exited, or None."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tids:
        if tid != str(pid):
            f = _fields(f"/proc/{pid}/task/{tid}/stat")
            if f is not None and f[0] not in (b"Z", b"X", b"x"):
                return int(tid)
    return None


def _stat(pid: int) -> list[bytes] | None:
    """Fields 3.. of /proc/<pid>/stat (index 0 = state), or None if gone.

    Alive means any live thread: a process whose leader thread exited (pthread_exit from
    main) reads Z in its own stat while another thread runs it on. Its state (and flags)
    are then that thread's, so it is alive here, as it is to the kernel."""
    f = _fields(f"/proc/{pid}/stat")
    if f is not None and f[0] == b"Z" and int(f[17]) > 1 and (tid := _live_thread(pid)) is not None:
        t = _fields(f"/proc/{pid}/task/{tid}/stat")
        if t is not None:
            f = [t[0], *f[1:6], t[6], *f[7:]]
    return f


def proc_dir(pid: int) -> str:
    """Where `pid`'s environment and command line are read: /proc/<pid>, or, its leader
    exited while another thread runs, that thread's /proc/<pid>/task/<tid> (the
    leader's read empty, or fail, then)."""
    f = _fields(f"/proc/{pid}/stat")
    if f is not None and f[0] == b"Z" and int(f[17]) > 1 and (tid := _live_thread(pid)) is not None:
        return f"/proc/{pid}/task/{tid}"
    return f"/proc/{pid}"


def start_ticks(pid: int) -> int | None:
    f = _stat(pid)
    return int(f[19]) if f else None


def state(pid: int) -> str | None:
    f = _stat(pid)
    return f[0].decode() if f else None


def ids(pid: int) -> tuple[int, int, int] | None:
    """(ppid, pgid, sid)."""
    f = _stat(pid)
    return (int(f[1]), int(f[2]), int(f[3])) if f else None


def is_alive(pid: int, ticks: int | None = None) -> bool:
    """Alive and the same process; a zombie is dead (PID 1 reaps orphans late here)."""
    f = _stat(pid)
    if f is None or f[0] in (b"Z", b"X", b"x"):
        return False
    return ticks is None or int(f[19]) == ticks


_PF_EXITING = 0x4  # include/linux/sched.h: set once the process is inside do_exit()
_SIGKILL_BIT = 1 << (signal.SIGKILL - 1)


def _sigkill_pending(pid: int) -> bool:
    """SIGKILL pending on the process (SigPnd) or its thread group (ShdPnd).

    The kernel also marks it for any fatal signal (default action, neither caught nor
    ignored): complete_signal() turns such a signal into a group-wide SIGKILL.
    """
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith((b"SigPnd:", b"ShdPnd:")) and int(line.split()[1], 16) & _SIGKILL_BIT:
                    return True
    except (OSError, ValueError, IndexError):
        return False
    return False


def pending(pid: int) -> int:
    """The signals pending on the process or its thread group (SigPnd | ShdPnd), as a mask."""
    mask = 0
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith((b"SigPnd:", b"ShdPnd:")):
                    mask |= int(line.split()[1], 16)
    except (OSError, ValueError, IndexError):
        return 0
    return mask


def dying(pid: int, ticks: int | None = None) -> bool:
    """Gone, a zombie, or on its way out: SIGKILL (or a fatal signal) pending, or already exiting."""
    f = _stat(pid)
    if f is None or f[0] in (b"Z", b"X", b"x") or (ticks is not None and int(f[19]) != ticks):
        return True
    return bool(int(f[6]) & _PF_EXITING) or _sigkill_pending(pid)


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read(1 << 20)
    except OSError:
        return None


def token_of(pid: int) -> str | None:
    """The victim token a process carries: in its environment, or, before the victim
    program proper has started, as a whole argument of its launcher (a prepared victim's
    argv is `/usr/bin/env STOPLATENCY_VICTIM=<token> ...`, possibly behind a shell
    trampoline; until env execs the victim, the token is only in that argv).

    While a process is inside execve its environ and cmdline read as the old image, the
    new one, or nothing, and may disagree: that is exactly when a prepared victim's
    launcher becomes the victim, and a test that returns the instant after starting one
    must still have it found. So an answer counts only when cmdline reads the same,
    non-empty, before and after environ; otherwise it is read again (briefly)."""
    where = f"/proc/{pid}"
    for attempt in range(20):
        before = _read(f"{where}/cmdline")
        env = _read(f"{where}/environ")
        after = _read(f"{where}/cmdline")
        if (before is None or env is None or after is None or not after) and where != (there := proc_dir(pid)):
            where = there  # its leader exited while another thread runs: read that thread
            continue
        if before is None or env is None or after is None:
            return None  # gone (or not ours to read)
        i = env.find(_TOKEN_KEY)
        if i >= 0 and (i == 0 or env[i - 1] == 0):
            end = env.find(b"\0", i)
            return env[i + len(_TOKEN_KEY) : end if end >= 0 else None].decode(errors="replace")
        for arg in after.split(b"\0"):
            if arg.startswith(_TOKEN_KEY):
                return arg[len(_TOKEN_KEY) :].decode(errors="replace")
        if before == after and after:
            return None  # one whole image throughout, with no token
        f = _stat(pid)
        if f is None or f[0] in (b"Z", b"X", b"x") or int(f[1]) == 2 or pid == 2:
            return None  # gone, dead, or a kernel thread (which has no cmdline)
        time.sleep(0.0005 * (attempt + 1))  # mid-exec: at most ~100 ms in all
    return None


def scan_tokens() -> dict[int, str]:
    """Every process on the machine that carries a token: {pid: token}."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            tok = token_of(int(entry))
            if tok:
                found[int(entry)] = tok
    return found


def lineage(tokens, extras=()) -> list[tuple[int, int]]:
    """Living (pid, start_ticks) carrying one of ``tokens``, plus living ``extras``."""
    tokens = set(tokens)
    out = {}
    for pid, tok in scan_tokens().items():
        if tok in tokens:
            ticks = start_ticks(pid)
            if ticks is not None and is_alive(pid, ticks):
                out[pid] = ticks
    for pid, ticks in extras:
        if pid not in out and is_alive(pid, ticks):
            out[pid] = ticks
    return sorted(out.items())


def open_pidfd(pid: int, ticks: int) -> int | None:
    """A pidfd that surely names (pid, ticks), or None if that process is gone."""
    try:
        fd = os.pidfd_open(pid)
    except (ProcessLookupError, OSError):
        return None
    if not is_alive(pid, ticks):  # checked after opening: the fd now pins the process
        os.close(fd)
        return None
    return fd


def signal_identified(pid: int, ticks: int, sig: int) -> bool:
    """Send ``sig`` to (pid, ticks) only; False if that process no longer exists."""
    fd = open_pidfd(pid, ticks)
    if fd is None:
        return False
    try:
        signal.pidfd_send_signal(fd, sig)
        return True
    except ProcessLookupError:
        return False
    finally:
        os.close(fd)


def wait_gone(tokens, extras=(), timeout: float = 10.0, rescan: float = 0.05) -> list[tuple[int, int]]:
    """Wait until no process of the lineage lives; return the survivors ([] = all gone).

    Event-driven: blocks on pidfd readiness of the known members and re-scans /proc
    by token whenever one exits and at least every ``rescan`` seconds, because a
    respawner starts members that a snapshot taken at entry cannot know.
    """
    deadline = time.monotonic() + timeout
    known: list[tuple[int, int]] = list(extras)
    while True:
        # A member once seen stays watched until it is a zombie: an exiting process has
        # already dropped its memory, so its environ (and token) reads empty before it dies.
        living = lineage(tokens, known)
        known = sorted(set(known) | set(living))
        left = deadline - time.monotonic()
        if not living or left <= 0:
            return living
        fds = [fd for fd in (open_pidfd(p, t) for p, t in living) if fd is not None]
        if not fds:
            continue
        try:
            poller = select.poll()
            for fd in fds:
                poller.register(fd, select.POLLIN)
            poller.poll(max(min(left, rescan), 0.0) * 1000)
        finally:
            for fd in fds:
                os.close(fd)


def env_value(pid: int, key: bytes) -> str | None:
    """The value of ``key`` (b"NAME=") in a process's environment, or None (absent, gone,
    or not ours to read). Read as token_of() reads: an answer counts only when the
    cmdline reads the same, non-empty, before and after the environ (not mid-exec)."""
    where = f"/proc/{pid}"
    for attempt in range(20):
        before = _read(f"{where}/cmdline")
        env = _read(f"{where}/environ")
        after = _read(f"{where}/cmdline")
        if (before is None or env is None or after is None or not after) and where != (there := proc_dir(pid)):
            where = there
            continue
        if before is None or env is None or after is None:
            return None
        i = env.find(key)
        if i >= 0 and (i == 0 or env[i - 1] == 0):
            end = env.find(b"\0", i)
            return env[i + len(key) : end if end >= 0 else None].decode(errors="replace")
        if before == after and after:
            return None
        f = _stat(pid)
        if f is None or f[0] in (b"Z", b"X", b"x") or int(f[1]) == 2 or pid == 2:
            return None
        time.sleep(0.0005 * (attempt + 1))
    return None

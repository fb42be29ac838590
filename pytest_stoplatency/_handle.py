"""``Victim`` (a started victim) and ``PreparedVictim`` (an argv for someone else to start)."""

from __future__ import annotations

import math
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from . import _procs, _records, _token
from .victim import KINDS

if TYPE_CHECKING:
    import psutil

VICTIMS_SH = Path(__file__).with_name("victims.sh")
LANGS = ("python", "bash")


class VictimNotReady(RuntimeError):
    pass


class Victim:
    """A victim that completed its ready handshake.

    ``pid``/``start_ticks`` name the victim process; ``token`` names its whole
    lineage (every descendant inherits it), ``extras`` the descendants that lost it.
    """

    def __init__(self, *, pid, start_ticks, token, kind, lang, extras, ready_path, process=None):
        self.pid = pid
        self.start_ticks = start_ticks
        self.token = token
        self.kind = kind
        self.lang = lang
        self.extras = extras
        self.ready_path = ready_path
        self.process = process  # the Popen when we started it (we must reap it)
        ids = _procs.ids(pid)
        if ids is None:
            raise VictimNotReady(f"victim {kind} pid {pid} vanished right after its handshake")
        _, self.pgid, self.sid = ids

    def __repr__(self):
        return f"<Victim {self.lang}/{self.kind} pid={self.pid} token={self.token}>"

    def _extra_ids(self) -> list[tuple[int, int]]:
        # The victim itself too: while it exits its environ (and token) already reads empty.
        # And what its processes recorded since the handshake (<id>.extras: each one
        # that drops its token records itself first, the setsid-spawner's every 50 ms).
        recorded = [(int(e["pid"]), int(e["start_ticks"])) for e in self.extras]
        later = _records.read_extras(_records.extras_path(self.ready_path))
        return sorted({(self.pid, self.start_ticks), *recorded, *later})

    def _reap(self) -> None:
        if self.process is not None:
            self.process.poll()

    def alive(self) -> bool:
        """The victim process itself lives (a zombie counts as dead)."""
        self._reap()
        return _procs.is_alive(self.pid, self.start_ticks)

    def members(self) -> list[tuple[int, int]]:
        """(pid, start_ticks) of every living process of the lineage."""
        return _procs.lineage([str(self.token)], self._extra_ids())

    def tree(self) -> list[psutil.Process]:
        """Every living process of the lineage: token scan of /proc plus recorded extras."""
        # Imported here, not with the plugin: psutil reads /proc/stat when imported, and a
        # session that uses no victim reads nothing of /proc.
        import psutil

        out = []
        for pid, ticks in self.members():
            try:
                p = psutil.Process(pid)
                # Alive means any live thread (psutil reads the leader's state alone, Z
                # for a process whose leader exited while another thread runs).
                if _procs.is_alive(pid, ticks):
                    out.append(p)
            except psutil.NoSuchProcess:
                pass
        return out

    def wait_gone(self, timeout: float) -> bool:
        """True once the whole lineage is gone (pidfd readiness + token re-scans)."""
        gone = not _procs.wait_gone([str(self.token)], self._extra_ids(), timeout)
        self._reap()
        return gone

    def kill(self, rounds: int = 50) -> None:
        """SIGKILL every living member (identity-checked), in rounds until one finds no
        member it had not signalled (a member that forks starts one between a look and
        its own death: the setsid-spawner). Does not wait for the deaths."""
        done: set[tuple[int, int]] = set()
        for _ in range(rounds):
            new = [m for m in self.members() if m not in done]
            if not new:
                return
            for pid, ticks in new:
                _procs.signal_identified(pid, ticks, signal.SIGKILL)
            done.update(new)


MAX_CHILDREN = 64
"""Most children one victim may fork (a forker with more would be a fork bomb)."""


def check_seconds(name: str, value: object, *, allow_zero: bool = False) -> float:
    """A duration argument of the plugin: a finite number of seconds, above 0 (or at least
    0 where 0 means something). Anything else is a pytest.UsageError naming the argument,
    never a victim that sleeps NaN seconds or a bound no latency can meet."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        seconds = None
    else:
        seconds = float(value)
    if seconds is None or seconds < 0 or (seconds == 0 and not allow_zero):
        need = "a finite number of seconds" + (" >= 0" if allow_zero else " > 0")
        raise pytest.UsageError(f"stop_latency: {name} must be {need}, got {value!r}")
    return seconds


class PreparedVictim:
    """A victim not started yet: ``argv`` is self-contained (token and ready path set by env)."""

    def __init__(
        self, kind: str, *, lang: str = "python", sleep: float = 7200, children: int = 2, cleanup: float = 1.0
    ):
        if kind not in KINDS:
            raise ValueError(f"unknown victim kind {kind!r}; one of {', '.join(KINDS)}")
        if lang not in LANGS:
            raise ValueError(f"unknown victim language {lang!r}; one of {', '.join(LANGS)}")
        check_seconds("sleep", sleep, allow_zero=True)
        check_seconds("cleanup", cleanup, allow_zero=True)
        if isinstance(children, bool) or not isinstance(children, int) or not 0 <= children <= MAX_CHILDREN:
            raise pytest.UsageError(f"victim: children must be an integer from 0 to {MAX_CHILDREN}, got {children!r}")
        self.kind, self.lang = kind, lang
        self.token = _token.new_token()
        self.ready_path = _records.ready_path(self.token)
        env = ["/usr/bin/env", f"{_token.TOKEN_ENV}={self.token}", f"{_token.READY_ENV}={self.ready_path}"]
        if lang == "python":
            prog = [
                sys.executable,
                "-m",
                "pytest_stoplatency.victim",
                kind,
                "--sleep",
                str(sleep),
                "--children",
                str(children),
                "--cleanup",
                str(cleanup),
            ]
        else:
            prog = [
                shutil.which("bash") or "/bin/bash",
                str(VICTIMS_SH),
                kind,
                str(int(sleep)),
                str(children),
                str(cleanup),
            ]
        self.argv = env + prog

    def __repr__(self):
        return f"<PreparedVictim {self.lang}/{self.kind} token={self.token}>"

    def ready_info(self) -> dict | None:
        return _records.read_ready(self.ready_path)

    def adopt(self, timeout: float = 10.0, *, process: subprocess.Popen | None = None) -> Victim:
        """Wait for the ready file (the victim is then fully armed) and return its handle.

        Event-driven where the OS allows: inotify on the ready file's directory (the
        victim publishes by rename) and, when we started it, a pidfd of the process
        (an early exit ends the wait at once). Elsewhere a short backoff poll.
        """
        deadline = time.monotonic() + timeout
        with _ReadyWaiter(self.ready_path, process) as waiter:
            # The watch exists before the first look: a rename in between still wakes us.
            while (info := self.ready_info()) is None:
                if process is not None and process.poll() is not None:
                    raise VictimNotReady(f"{self!r} exited with {process.returncode} before its handshake")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise VictimNotReady(f"{self!r}: no ready file after {timeout} s ({self.ready_path})")
                waiter.wait(left)
        if "publisher" in info:
            self._wait_publisher(int(info["publisher"]), deadline)
        pid = int(info["pid"])
        if _procs.token_of(pid) != str(self.token):
            raise VictimNotReady(f"{self!r}: pid {pid} from the ready file does not carry the token")
        v = Victim(
            pid=pid,
            start_ticks=int(info["start_ticks"]),
            token=self.token,
            kind=self.kind,
            lang=self.lang,
            extras=info.get("extras", []),
            ready_path=self.ready_path,
            process=process,
        )
        if self.kind == "stopped":
            # The victim stops itself right after writing the file: hand it over only in state T.
            pause = 0.0002
            while _procs.state(pid) not in ("T", None):
                if time.monotonic() >= deadline:
                    raise VictimNotReady(f"{v!r} did not stop itself")
                time.sleep(pause)  # microseconds away: the victim's next call is kill(SIGSTOP)
                pause = min(pause * 2, 0.005)
        return v

    def _wait_publisher(self, pid: int, deadline: float) -> None:
        """Wait until the process that renamed the ready file into place (bash's mv) is gone.

        It carries the token and is still exiting when the file appears; a handle
        returned before it is gone would show a member that dies by itself.
        """
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return
        except (AttributeError, OSError):
            fd = None
        try:
            # Checked after opening: a pid without our token has exited (a zombie's
            # environ reads empty) or was reused, and either way is not ours to wait for.
            while _procs.token_of(pid) == str(self.token):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise VictimNotReady(f"{self!r}: its ready-file publisher {pid} did not exit")
                if fd is not None:
                    select.select([fd], [], [], left)
                    return
                time.sleep(0.001)  # no pidfd: a short poll of a process already exiting
        finally:
            if fd is not None:
                os.close(fd)


# inotify(7) masks: a rename into the directory (how victims publish), and, so that any
# other publishing (a link, a direct write) cannot strand us, creation and close-after-write.
_IN_MOVED_TO, _IN_CREATE, _IN_CLOSE_WRITE = 0x80, 0x100, 0x08
_libc: Any = None  # None: not tried yet; False: no inotify here; else the CDLL
# One inotify instance per process, never closed: closing one waits for an RCU grace
# period (measured 5 to 20 ms here, more than the whole handshake). Keyed by pid, since
# a forked child must not share (and drain) its parent's event queue.
_inotify: tuple[int, int] | None = None


def _inotify_watching(directory: Path) -> int | None:
    """This process's inotify fd, now also watching ``directory``; None where unavailable."""
    global _libc, _inotify
    if _libc is False:
        return None
    try:
        if _libc is None:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.inotify_init1.argtypes = [ctypes.c_int]
            libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
            _libc = libc
    except (OSError, AttributeError):
        _libc = False  # not Linux (or no inotify symbol): poll from now on
        return None
    if _inotify is None or _inotify[0] != os.getpid():
        fd = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            return None
        _inotify = (os.getpid(), fd)
    fd = _inotify[1]
    # Idempotent for a directory already watched; a re-created directory gets a new watch.
    if _libc.inotify_add_watch(fd, os.fsencode(directory), _IN_MOVED_TO | _IN_CREATE | _IN_CLOSE_WRITE) < 0:
        return None
    return fd


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 65536):
            pass
    except BlockingIOError:
        pass


class _ReadyWaiter:
    """Sleeps until something may have changed: a directory event, the process's exit, or a cap.

    The cap bounds a missed event (a watch that silently does not fire, as on some
    network file systems, or another thread of ours draining the shared queue) to a
    short delay instead of the whole timeout.
    """

    CAP = 0.05

    def __init__(self, ready_path: Path, process: subprocess.Popen | None):
        self.pidfd = None
        self.inotify = _inotify_watching(Path(ready_path).parent)
        if self.inotify is not None:
            _drain(self.inotify)  # old events; whatever happens from now on wakes us
            if process is not None and process.returncode is None:
                try:  # not reaped yet (returncode None), so the pid is still this process
                    self.pidfd = os.pidfd_open(process.pid)
                except (AttributeError, OSError):
                    pass
        self.pause = 0.001

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.pidfd is not None:
            os.close(self.pidfd)

    def wait(self, left: float) -> None:
        if self.inotify is None:
            time.sleep(min(self.pause, left))  # a handshake poll, not a latency measurement
            self.pause = min(self.pause * 2, 0.02)
            return
        fds = [self.inotify] if self.pidfd is None else [self.inotify, self.pidfd]
        readable, _, _ = select.select(fds, [], [], min(left, self.CAP))
        if self.inotify in readable:
            _drain(self.inotify)

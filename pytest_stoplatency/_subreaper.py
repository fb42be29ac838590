"""pytest as a child subreaper: an orphan inside pytest's process tree comes back to pytest.

A double-forked daemon (fork, fork, the middle one exits) is re-parented to the nearest
ancestor that set PR_SET_CHILD_SUBREAPER, or to init when there is none. With pytest as
that ancestor, nothing a test starts can leave pytest's tree while pytest lives, so the
leak check finds it even after it dropped its environment (and with it the tag).

What pytest adopts it must also reap: an adopted orphan that exits is pytest's zombie,
and nobody else will ever wait for it. Only such strangers are reaped, never a child some
Popen object in this process will wait for (its returncode would be lost).
"""

from __future__ import annotations

import ctypes
import gc
import os
import subprocess

_PR_SET_CHILD_SUBREAPER = 36  # include/uapi/linux/prctl.h
_PR_GET_CHILD_SUBREAPER = 37


def _prctl(option: int, arg: object) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.prctl(option, arg, 0, 0, 0))


def enable() -> bool:
    """Make this process a child subreaper; False where the kernel refuses (not Linux 3.4+)."""
    try:
        return _prctl(_PR_SET_CHILD_SUBREAPER, 1) == 0  # ablate: leak-subreaper
    except (OSError, AttributeError):
        return False


def enabled() -> bool:
    value = ctypes.c_int(0)
    try:
        _prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(value))
    except (OSError, AttributeError):
        return False
    return bool(value.value)


def tracked_children() -> set[int]:
    """Pids of children that an object in this process still means to wait for: every
    live subprocess.Popen (asyncio's transports hold one too), the ones subprocess keeps
    in its _active list after their Popen object was dropped, and multiprocessing's.

    Walks the gc heap: called only when a child is a suspect (a leak or a zombie), never
    on a test's clean path."""
    pids: set[int] = set()
    for obj in gc.get_objects():
        if isinstance(obj, subprocess.Popen) and obj.returncode is None:
            pids.add(obj.pid)
    for obj in list(getattr(subprocess, "_active", None) or ()):
        pids.add(obj.pid)
    try:
        from multiprocessing import process as mp_process

        for child in list(getattr(mp_process, "_children", ())):
            popen = getattr(child, "_popen", None)
            if popen is not None and getattr(popen, "pid", None):
                pids.add(popen.pid)
    except ImportError:
        pass
    return pids


def reap(pids: list[int], tracked: set[int]) -> int:
    """waitpid each zombie child in ``pids`` that nobody tracks; return how many."""
    reaped = 0
    for pid in pids:
        if pid in tracked:
            continue
        try:
            got, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue  # not our child (or already reaped)
        reaped += got == pid
    return reaped

"""pytest as a child subreaper, with --process-leaks-subreaper only (opt-in: it changes the
process tree the code under test sees).

A double-forked daemon (fork, fork, the middle one exits) is re-parented to the nearest
ancestor that set PR_SET_CHILD_SUBREAPER, or to init when there is none. With pytest as
that ancestor, nothing a test starts can leave pytest's tree while pytest lives, so the
leak check finds it even after it dropped its environment (and with it the tag).

That is a side effect on the code under test, which is why it is off by default: such an
orphan's getppid() is pytest's pid, not 1; psutil.Process().children() lists it; a test
that expects init to reap it (psutil's test_children_recursive, test_wait_non_children)
sees pytest's child instead.

What pytest adopts it must also reap: an adopted orphan that exits is pytest's zombie,
and nobody else will ever wait for it. Only such strangers are reaped, never a child some
Popen object in this process will wait for (its returncode would be lost).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import subprocess
import sys
from collections.abc import Iterator

_PR_SET_CHILD_SUBREAPER = 36  # include/uapi/linux/prctl.h
_PR_GET_CHILD_SUBREAPER = 37

# The process that made itself a subreaper (the flag is not inherited across fork).
_enabled_in: int | None = None


def _prctl(option: int, arg: object) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.prctl(option, arg, 0, 0, 0))


def enable() -> bool:
    """Make this process a child subreaper; False where the kernel refuses (not Linux 3.4+)."""
    global _enabled_in
    try:
        ok = _prctl(_PR_SET_CHILD_SUBREAPER, 1) == 0  # ablate: leak-subreaper
    except (OSError, AttributeError):
        return False
    if ok:
        _enabled_in = os.getpid()
    return ok


def enabled() -> bool:
    value = ctypes.c_int(0)
    try:
        _prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(value))
    except (OSError, AttributeError):
        return False
    return bool(value.value)


@contextlib.contextmanager
def suspended() -> Iterator[None]:
    """No subreaper for the duration: a daemon started meanwhile (the plugin's own guardian)
    re-parents away from pytest, as it would without --process-leaks-subreaper."""
    if _enabled_in != os.getpid():
        yield
        return
    _prctl(_PR_SET_CHILD_SUBREAPER, 0)
    try:
        yield
    finally:
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def tracked_children() -> set[int]:
    """Pids of children that an object in this process still means to wait for: every
    live subprocess.Popen (asyncio's transports hold one too), the ones subprocess keeps
    in its _active list after their Popen object was dropped, and multiprocessing's.

    Walks the gc heap: called only when a child is a suspect (a leak or a zombie), never
    on a test's clean path, and never imports (an import may set off a collection)."""
    pids: set[int] = set()
    for obj in gc.get_objects():
        if isinstance(obj, subprocess.Popen) and obj.returncode is None:
            pids.add(obj.pid)
    for obj in list(getattr(subprocess, "_active", None) or ()):
        pids.add(obj.pid)
    mp_process = sys.modules.get("multiprocessing.process")
    for child in list(getattr(mp_process, "_children", None) or ()):
        popen = getattr(child, "_popen", None)
        if popen is not None and getattr(popen, "pid", None):
            pids.add(popen.pid)
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

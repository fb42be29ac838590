"""A descriptor that turns readable when a file is written or renamed into a directory
(Linux inotify, through ctypes: the standard library has no binding).

The engine's watchdog adds it to its select(), so a stop lodged on the file channel
(stop-request.json, published by an atomic rename) wakes it at once instead of at its
next poll. The poll stays as the backstop: where inotify is missing or its queue
overflows, nothing is lost, only up to one poll interval of latency.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

IN_CLOSE_WRITE = 0x00000008
IN_MOVED_TO = 0x00000080
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC


_MASK = IN_CLOSE_WRITE | IN_MOVED_TO | IN_DELETE | IN_DELETE_SELF
"""IN_DELETE: a name removed from the run directory (`rm -rf` removing its spec.toml: a
half-removed run, which the watchdog stops as a removed one)."""


_rm_watch: Callable[[int, int], int] | None = None
"""libc's inotify_rm_watch, looked up by watch_dir at the engine's start: the stop's
unwatch then loads nothing."""


def watch_dir(path: str | os.PathLike[str]) -> int | None:
    """An inotify descriptor watching `path` for files closed after writing or renamed
    into it, for names removed from it, and for its own removal (the watchdog then stops the run: see
    stop_controller); None where inotify is not available."""
    global _rm_watch
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        fd: int = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        _rm_watch = libc.inotify_rm_watch
    except (OSError, AttributeError):
        return None
    if fd < 0:
        return None
    if libc.inotify_add_watch(fd, os.fsencode(path), _MASK) < 0:  # ablate: watchdog-inotify
        os.close(fd)
        return None
    return fd


WATCH = 1
"""The one watch of a descriptor from watch_dir: the kernel numbers a new instance's
watches from 1."""


def unwatch(fd: int) -> None:
    """Remove the directory's watch, keeping the descriptor. Closing a descriptor that
    still holds a watch waits for the kernel to free the watch (an SRCU grace period:
    13-20 ms measured here, and the engine's exit waits for it too); the watch removed
    first is freed in the background, and the close that follows costs nothing."""
    if _rm_watch is not None:  # else no watch to remove: the close pays for it, nothing else changes
        _rm_watch(fd, WATCH)


def drain(fd: int) -> None:
    """Read and drop the pending events: the watchdog only needs to know that one came."""
    try:
        while os.read(fd, 64 * 1024):
            pass
    except BlockingIOError:
        pass

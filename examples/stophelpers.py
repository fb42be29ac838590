"""Stop paths the examples share: the fixes are short enough to copy into your own code."""

from __future__ import annotations

import os
import signal
import uuid

TAG_ENV = "EXAMPLE_RUN_TAG"


def new_tag() -> str:
    return uuid.uuid4().hex


def tagged_env(tag: str) -> dict[str, str]:
    """The environment to start a run's processes with: every descendant inherits the tag."""
    return {**os.environ, TAG_ENV: tag}


def _carries(pid: int, needle: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return needle in f.read().split(b"\0")
    except OSError:
        return False


def tag_sweep(tag: str) -> int:
    """SIGKILL every process whose environment carries the tag; return how many.

    Whatever session or group a process moved to, and whoever its parent is now, it keeps
    the environment it was started with. Identity: the tag is read again after the pidfd
    is open, so a pid reused in between is never signalled.
    """
    needle = f"{TAG_ENV}={tag}".encode()
    killed = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or not _carries(int(entry), needle):
            continue
        try:
            fd = os.pidfd_open(int(entry))
        except OSError:
            continue
        try:
            if _carries(int(entry), needle):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
                killed += 1
        except ProcessLookupError:
            pass
        finally:
            os.close(fd)
    return killed

"""Who is stopping a run: the stoppers' mark on the run's `lock` file.

Every stopper (control/stop.py's Stop) holds a shared open-file-description lock
(fcntl F_OFD_SETLK, F_RDLCK) on `lock` from before its first signal until its record is
written or given up: a `--now` kills the engine and records the stop a moment later, and
in between the run's lock (an flock, the engine's: rundir.py) is free while nothing is
recorded yet. A waiter that sees the engine gone asks the kernel whether any stopper
still holds its mark (F_OFD_GETLK: it takes nothing, so it never delays a stopper) and
reads the record only once none does: a run `--now` stopped is never "crashed" for the
moment between the kill and its record. The kernel drops the mark with the stopper,
however it ends (a SIGKILLed stopper leaves the run as it left it: crashed, unrecorded).

A byte-range OFD lock and the engine's flock on the same file are independent (Linux):
the mark needs no file of its own, and is never made in a directory: `lock` is opened
read-only, only if it is there (the engine made it). `struct flock` is packed as the
kernel's 64-bit layout (short, short, off_t, off_t, pid_t, padding), as the fcntl
module's documentation shows for its own example.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct

from runner.errors import Damaged
from runner.files import untrusted

TYPE_CHECKING = False

if TYPE_CHECKING:
    from runner.files.rundir import RunDir

_FLOCK = "hhqqi4x"
"""struct flock: l_type, l_whence, l_start, l_len (0: to the end), l_pid."""


def _lock(kind: int) -> bytes:
    return struct.pack(_FLOCK, kind, os.SEEK_SET, 0, 0, 0)


def mark(rd: RunDir) -> int | None:
    """This stopper's mark on the run (a descriptor, which `unmark` closes), taken before
    its first signal; None when there is no `lock` to mark (no engine ever ran there, the
    directory went away, `lock` damaged: the stop goes on, unmarked) or it cannot be
    taken (a waiter never holds a conflicting lock: only a write lock would)."""
    try:
        fd = untrusted.open_regular(rd.lock, shared=True)
    except (FileNotFoundError, Damaged, OSError):
        return None
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _lock(fcntl.F_RDLCK))
    except OSError:
        os.close(fd)
        return None
    return fd


def unmark(fd: int | None) -> None:
    """The mark dropped (its descriptor closed): this stopper's record is written, or it
    has given up."""
    if fd is not None:
        os.close(fd)


def at_work(rd: RunDir) -> bool:
    """A stopper holds its mark on the run: it is stopping the run, and its record may
    not have landed yet. False when `lock` is missing or damaged (nothing to ask)."""
    try:
        fd = untrusted.open_regular(rd.lock, shared=True)
    except (FileNotFoundError, Damaged, OSError):
        return False
    try:
        got = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, _lock(fcntl.F_WRLCK))
    except OSError as e:
        if e.errno in (errno.EINVAL, errno.ENOLCK):  # no OFD locks here: nothing can be marked either
            return False
        raise
    finally:
        os.close(fd)
    kind: int = struct.unpack(_FLOCK, got)[0]
    return kind != fcntl.F_UNLCK  # ablate: waiters-wait-for-the-record

"""The runner's exception tree.

    RunnerError                  every error the CLI turns into a one-line message
     +-- BadInput                exit BAD_INPUT
     |    +-- SpecError          the spec: file, key, what was expected
     |    +-- ControlFileError   a control file that cannot be acted on
     +-- Damaged                 exit DAMAGED: a file of the run directory cannot be read
     |    +-- IdentityError      a malformed identity file (never read as "nothing to kill")
     |    +-- Unwritable         exit NOT_RECORDED: no space, a read-only file system, EIO
     +-- NoLiveRun               exit NO_LIVE_RUN
     +-- Crashed                 exit CRASHED: the engine died without recording an end
     +-- DirectoryGone           exit STOPPED (or what was left alive): the run directory
     |                           went away while a command waited on the run
     +-- RunLocked               exit REFUSED: a live engine holds the run directory
     +-- CopyOfRun               exit COPY: the directory is a copy of a run (read-only)
     +-- ForeignDir              exit FOREIGN_DIR: another user's (or a shared) directory
     +-- NotPermitted            exit NOT_PERMITTED: no right to act on the run directory
     +-- OtherPidNamespace       exit OTHER_PID_NAMESPACE: the run's processes are out of sight

    RunStopped (BaseException)   the stop, raised at the engine's next check point

RunStopped derives from BaseException, as trio's Cancelled does, so that an
`except Exception` in phase code cannot swallow a stop: it unwinds through every
`finally` to the engine's top.
"""

from __future__ import annotations

import errno
import os

from runner.exitcodes import Exit

TYPE_CHECKING = False

if TYPE_CHECKING:
    from runner.events import Mode, Origin


# C0 and C1 controls and DEL (a terminal acts on them: ESC, CSI), and the line and
# paragraph separators: every character str.splitlines breaks at is escaped, so that one
# message stays one line (NEL, U+0085, in a spec's key made it two; found by the fuzzer).
_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)]}  # ablate: printable-c1
_CONTROL.update({0x2028: "\\u2028", 0x2029: "\\u2029"})
_CONTROL.update({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"})


def printable(text: object, limit: int | None = 200) -> str:
    """User text made safe for a one-line message: control characters (newlines, ESC)
    escaped, never sent raw to a terminal, and cut to `limit` characters."""
    out = str(text).translate(_CONTROL)
    if limit is not None and len(out) > limit:
        out = out[: limit - 3] + "..."
    return out


class RunnerError(Exception):
    exit_code = Exit.INTERNAL


class BadInput(RunnerError):
    exit_code = Exit.BAD_INPUT


class SpecError(BadInput):
    def __init__(self, path: str | os.PathLike[str], key: str, expected: str, got: object = None) -> None:
        self.path, self.key, self.expected, self.got = str(path), key, expected, got
        msg = f"{printable(self.path, 400)}: {printable(key)}: expected {expected}"
        if got is not None:
            msg += f", got {got!r}"
        super().__init__(msg)


class Damaged(RunnerError):
    """A run-directory file that is not what the runner wrote: a symlink, a FIFO, a
    directory, too large, not UTF-8, JSON too deep or of the wrong shape. The stop still
    stops the run; the file is named in one line."""

    exit_code = Exit.DAMAGED

    def __init__(self, path: str | os.PathLike[str], what: str | None = None) -> None:
        self.path = str(path)
        self.what = what or ""
        super().__init__(self.path if what is None else f"{self.path}: {what}")


class IdentityError(Damaged):
    pass


DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO)
"""A write refused by the file system itself (full, over quota, read-only), or an I/O
error (a failing disk, a file system shut down): no file is damaged and the runner has
no bug; what could not be written (or read) is said, not blamed."""


def disk_fault(exc: BaseException) -> bool:
    return isinstance(exc, Unwritable) or (isinstance(exc, OSError) and exc.errno in DISK_ERRNOS)


class Unwritable(Damaged):
    """A run-directory file that could not be written because the file system refused
    (no space, over quota, read-only), or not read or written for an I/O error. Not
    damage: a Damaged subclass only so that every place that goes on without an
    unreadable file goes on without an unwritable one; a stopper reports it apart
    (Survey.unwritten) and, where what could not be written is the record of a stop,
    exits NOT_RECORDED."""

    exit_code = Exit.NOT_RECORDED

    @classmethod
    def of(cls, path: str | os.PathLike[str], exc: OSError, doing: str = "write") -> Unwritable:
        return cls(path, f"cannot {doing} ({exc.strerror or exc})")


class ControlFileError(BadInput):
    pass


class NoLiveRun(RunnerError):
    exit_code = Exit.NO_LIVE_RUN


class Crashed(RunnerError):
    exit_code = Exit.CRASHED


class DirectoryGone(RunnerError):
    """The run directory went away (`rm -rf`) while `runner wait` or `stop --graceful
    --wait` waited on the run: its engine stops a run whose directory is removed, the
    waiter finishes the kill, and nothing could be recorded. The code is STOPPED, or what
    the kill says (LEFT_RUNNING, UNKILLABLE) when something of the run was left alive."""

    exit_code = Exit.STOPPED

    def __init__(self, message: str, code: Exit = Exit.STOPPED) -> None:
        super().__init__(message)
        self.exit_code = code


class RunLocked(RunnerError):
    exit_code = Exit.REFUSED


class CopyOfRun(RunnerError):
    """A run directory that is not the directory its run was created in (a copy, a
    restored backup, a planted directory holding another run's identity): read-only."""

    exit_code = Exit.COPY


class ForeignDir(RunnerError):
    exit_code = Exit.FOREIGN_DIR


class NotPermitted(RunnerError):
    exit_code = Exit.NOT_PERMITTED


class OtherPidNamespace(RunnerError):
    """The run lives in a pid namespace this process cannot see into: its recorded pids
    name no process here (or another one). Nothing is signalled; the line says where."""

    exit_code = Exit.OTHER_PID_NAMESPACE


class RunStopped(BaseException):
    """A stop delivered at a check point. `origin` (an events.Origin) says where it
    came from; `mode` (an events.Mode) is HARD or GRACEFUL. Built only by the
    stop controller (stop_controller.py), which owns every stop request."""

    def __init__(self, origin: Origin, mode: Mode) -> None:
        self.origin, self.mode = origin, mode
        super().__init__(f"run stopped ({mode.label}, origin {origin.value})")

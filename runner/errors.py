"""The runner's exception tree.

    RunnerError                  every error the CLI turns into a one-line message
     +-- BadInput                exit BAD_INPUT
     |    +-- SpecError          the spec: file, key, what was expected
     |    +-- ControlFileError   a control file that cannot be acted on
     +-- Damaged                 exit DAMAGED: a file of the run directory cannot be read
     |    +-- IdentityError      a malformed identity file (never read as "nothing to kill")
     +-- NoLiveRun               exit NO_LIVE_RUN
     +-- Crashed                 exit CRASHED: the engine died without recording an end
     +-- RunLocked               exit REFUSED: a live engine holds the run directory
     +-- CopyOfRun               exit COPY: the directory is a copy of a run (read-only)
     +-- ForeignDir              exit FOREIGN_DIR: another user's (or a shared) directory
     +-- NotPermitted            exit NOT_PERMITTED: no right to act on the run directory

    RunStopped (BaseException)   the stop, raised at the engine's next check point

RunStopped derives from BaseException, as trio's Cancelled does, so that an
`except Exception` in phase code cannot swallow a stop: it unwinds through every
`finally` to the engine's top.
"""

from __future__ import annotations

import os

from runner.exitcodes import Exit

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up cost, see log.py)

if TYPE_CHECKING:
    from runner.events import Mode, Origin


_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F]}
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


class ControlFileError(BadInput):
    pass


class NoLiveRun(RunnerError):
    exit_code = Exit.NO_LIVE_RUN


class Crashed(RunnerError):
    exit_code = Exit.CRASHED


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


class RunStopped(BaseException):
    """A stop delivered at a check point. `origin` (a stop_request.Origin) says where it
    came from; `mode` (a stop_request.Mode) is HARD or GRACEFUL. Built only by the
    stop controller (stop_controller.py), which owns every stop request."""

    def __init__(self, origin: Origin, mode: Mode) -> None:
        self.origin, self.mode = origin, mode
        super().__init__(f"run stopped ({mode.label}, origin {origin.value})")

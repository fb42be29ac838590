"""Exit codes of every `runner` command; docs/exit-codes.md documents them and a test
checks that the two agree. 1 and 2 are never used on purpose: 1 is what Python exits
with on an uncaught traceback, 2 is argparse's own usage error."""

from enum import IntEnum


class Exit(IntEnum):
    OK = 0
    """The run completed; a hard stop was honored by the engine; a graceful stop was lodged."""
    FAILED = 3
    """The run completed, but at least one item failed."""
    STOPPED = 4
    """The run ended because it was stopped (run, wait, resume)."""
    BAD_INPUT = 5
    """Bad spec, flags or control/identity file; nothing was started or signalled."""
    NO_LIVE_RUN = 6
    """No such run, no live run, or several live runs and no --run-dir."""
    UNKILLABLE = 7
    """A stop returned within its bound but could not kill everything (pids named)."""
    STOP_FORCED = 8
    """The engine did not honor the stop within grace; it was force-killed (fallback)."""
    REFUSED = 9
    """The run directory is locked by a live engine (second engine, resume while alive)."""
    DAMAGED = 10
    """A file of the run directory is damaged (named on one line); a stop still stopped
    every process it could prove the run's."""
    CRASHED = 11
    """The run's engine died without recording how the run ended (SIGKILL, out of
    memory); `runner resume` continues it."""
    NOT_RECORDED = 12
    """The stop ended every process of the run, but could not be recorded: a full disk
    with the engine's reserve gone, or a read-only file system (the line says which file
    and why)."""
    OTHER_PID_NAMESPACE = 13
    """The run lives in a pid namespace whose processes this command cannot see (the
    line names both namespaces); nothing was signalled."""
    INTERNAL = 70
    """An unexpected error inside the runner (see engine.log in the run directory)."""

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
    """The run ended because it was stopped (run, wait, resume, stop --graceful --wait); a
    foreground run or resume exits with it on Ctrl-C, SIGTERM or SIGHUP, which stop the run."""
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
    COPY = 12
    """The run directory is a copy of a run (or holds another directory's identity): it
    can be read (status, logs, list), never stopped, resumed or waited on; nothing was
    signalled or written."""
    FOREIGN_DIR = 13
    """`run`/`resume` refused a run directory (or the directory it is created in) owned by
    another user or writable by others, without --allow-foreign-dir; nothing was touched."""
    NOT_PERMITTED = 14
    """This user has no right to act on the run directory (another user's run): nothing
    was signalled or written."""
    INTERRUPTED = 15
    """This command was interrupted (SIGINT, SIGTERM, SIGHUP) before it finished: it says
    nothing of how the run ended. A stop it had begun is completed by the next plain
    `runner stop`. (A SIGINT while a command's modules still load, before it did anything,
    is this too, the foreground `run` and `resume` included.)"""
    LEFT_RUNNING = 16
    """A stop ended with processes of the run still alive that are not in uninterruptible
    sleep (they kept forking past the kill rounds' bound, or were still dying): pids
    named; run `runner stop` again."""
    NOT_RECORDED = 17
    """The stop ended every process of the run, but could not be recorded: a full disk
    with the engine's reserve gone, a read-only file system, or an I/O error (EIO: a
    failing disk, a file system shut down); the line says which file and why."""
    OTHER_PID_NAMESPACE = 18
    """The run lives in a pid namespace whose processes this command cannot see (the
    line names both namespaces); nothing was signalled."""
    UNSUPPORTED = 19
    """This machine cannot run the runner: not Linux, or a kernel without pidfd_open
    (Linux 5.3); the one line says which. Nothing was read, started or signalled."""
    INTERNAL = 70
    """An unexpected error inside the runner (a bug). A command's one line names the file
    with its traceback (runner-internal-error-*.log in $TMPDIR, else /tmp); an engine's
    traceback is in engine.log in the run directory."""


INTERRUPTED_LINE = "runner: interrupted before this command finished"
"""What an interrupted command says (cli._main, and __main__ before cli has loaded)."""

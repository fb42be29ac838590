"""stop.lock: one forcing stopper at a time (a second one finds the stop the first recorded)."""

from __future__ import annotations

import fcntl
import os
import time

from runner import defaults
from runner.errors import Damaged
from runner.files import untrusted
from runner.files.rundir import RunDir

TYPE_CHECKING = False

if TYPE_CHECKING:
    from runner.control.run_view import RunView


class StopLock:
    """Held by a stopper for the whole of its forced stop (stop.lock in the run
    directory): two stoppers never force at once, and the second one finds the stop the
    first recorded instead of forcing (and claiming) it again. A damaged lock file is
    named and the stop goes on without it: a stop is never blocked by the directory.
    A class, not a contextlib generator: importing contextlib costs every stop command
    about 2.9 M instructions (valgrind) of its start-up."""

    __slots__ = ("_rd", "_view", "_timeout", "_fd")

    def __init__(self, rd: RunDir, view: RunView, timeout: float) -> None:
        self._rd, self._view, self._timeout = rd, view, timeout
        self._fd: int | None = None

    def __enter__(self) -> None:
        try:
            fd = untrusted.open_regular(self._rd.path / "stop.lock", flags=os.O_RDWR | os.O_CREAT, shared=True)
        except (Damaged, FileNotFoundError) as exc:
            self._view.note(exc)
            return
        try:
            deadline = time.monotonic() + self._timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        break  # a wedged stopper never blocks this one past its bound
                    time.sleep(defaults.FILE_POLL)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def __exit__(self, *exc_info: object) -> None:
        if self._fd is not None:
            os.close(self._fd)


def force_bound(kill_grace: float) -> float:
    """How long a stopper waits for another one that is forcing: its whole forced stop."""
    return kill_grace + 2 * defaults.CONFIRM_TIMEOUT + defaults.LOCK_WAIT

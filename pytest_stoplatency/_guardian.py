"""The session guardian: kills a pytest process's victims within moments of its death.

A pytest process can die without any teardown: pytest-timeout's thread method ends it
with os._exit, a test may kill pytest's own group, the OOM killer or a CI runner may
SIGKILL it. Its victims (adversarial by design: they trap SIGTERM and would sleep two
hours) then outlive it until the next session's sweep, possibly forever on a one-off CI
machine. So the first victim a pytest process prepares starts one guardian:

    python -m pytest_stoplatency._guardian OWNER_PID OWNER_START_TICKS

in a session of its own (a signal to pytest's group never reaches it), watching the
owner through a pidfd. When the owner is gone, it runs the same sweep a new session
runs (only dead owners' victims; never a live session's) and exits. It is not a
PR_SET_PDEATHSIG on the victims: a victim that dies with its parent would hide a broken
stop in the code under test, which is what the victims are there to catch.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._token import Owner

ENV_DISABLE = "STOPLATENCY_NO_GUARDIAN"
"""Set (to anything) in pytest's environment to start no guardian (tests that prove the
next session's sweep on its own set it)."""

_started_for: int | None = None  # the pid that started one (a forked child starts its own)
_process: subprocess.Popen[bytes] | None = None  # kept: it outlives every test of the session


def ensure_started() -> None:
    """Start this process's guardian once (cheap after the first call)."""
    global _started_for, _process
    if _started_for == os.getpid() or os.environ.get(ENV_DISABLE):
        return
    from . import _token

    _process = _spawn(_token.me())  # ablate: session-guardian
    _started_for = os.getpid()


def _spawn(owner: Owner) -> subprocess.Popen[bytes]:
    from ._leaks import TAG_ENV

    # Its own leak tag, naming no scope and no owner: the guardian outlives its pytest by
    # design, so no --process-leaks check (an outer pytest's, when this one runs inside a
    # test) may take it for a leak, and no sweep for a dead owner's process.
    env = {**os.environ, TAG_ENV: f"helper.guardian.{owner.pid}.{owner.start_ticks}"}
    return subprocess.Popen(
        [sys.executable, "-m", "pytest_stoplatency._guardian", str(owner.pid), str(owner.start_ticks)],
        env=env,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        close_fds=True,
    )


def _watch(pid: int, start_ticks: int) -> None:
    from . import _procs

    fd = _procs.open_pidfd(pid, start_ticks)
    if fd is None:
        return  # already gone (or the pid is someone else's now)
    try:
        select.select([fd], [], [])
    finally:
        os.close(fd)


ENV_LOG = "STOPLATENCY_GUARDIAN_LOG"
"""If set in pytest's environment: a file the guardian appends one JSON line to when it
has swept for its dead owner (how tests tell its work from another session's sweep)."""


def main(argv: list[str]) -> int:
    pid, start_ticks = int(argv[0]), int(argv[1])
    _watch(pid, start_ticks)
    from . import _cleanup

    killed = _cleanup.sweep_ownerless()
    log = os.environ.get(ENV_LOG)
    if log:
        import json

        with open(log, "a") as f:
            f.write(json.dumps({"owner": pid, "owner_start_ticks": start_ticks, "killed": killed}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

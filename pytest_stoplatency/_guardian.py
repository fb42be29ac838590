"""The session guardian: kills a pytest process's victims within moments of its death.

A pytest process can die without any teardown: pytest-timeout's thread method ends it
with os._exit, a test may kill pytest's own group, the OOM killer or a CI runner may
SIGKILL it. Its victims (adversarial by design: they trap SIGTERM and would sleep two
hours) then outlive it until the next session's sweep, possibly forever on a one-off CI
machine. So the first victim a pytest process prepares (or its first test, with
--process-leaks) starts one guardian:

    python -m pytest_stoplatency._guardian OWNER_PID OWNER_START_TICKS

as a daemon: a shell forks it in the background, prints its pid and exits, so the
guardian is re-parented away from pytest (to init, or the nearest child subreaper above
pytest) and sits in a session of its own. It is never pytest's child: the code under test
never sees it among pytest's children (psutil.Process().children(), a reaper of strangers,
os.wait()), and a signal to pytest's group never reaches it. It watches the owner through
a pidfd. When the owner is gone, it runs the same sweep a new session runs (only dead
owners' victims; never a live session's) and exits. It is not a PR_SET_PDEATHSIG on the
victims: a victim that dies with its parent would hide a broken stop in the code under
test, which is what the victims are there to catch.

pytest holds a pidfd on its guardian: each later ensure_started() (every test's setup with
--process-leaks, every victim) polls it, without blocking and without reading /proc. A
guardian that died (a test killed it) is started again, and the session summary says so
in one line; one that cannot be started is named there too, as the session is then
unprotected.
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

ENV_LOG = "STOPLATENCY_GUARDIAN_LOG"
"""If set in pytest's environment: a file the guardian appends one JSON line to when it
has swept for its dead owner (how tests tell its work from another session's sweep)."""

# `sh` runs the guardian in the background with nothing of pytest's stdio, prints its pid
# (the background job's, which is the guardian's after exec) and exits: the guardian is an
# orphan at once.
_BACKGROUND = '"$@" </dev/null >/dev/null 2>&1 & echo $!'

_started_for: int | None = None  # the pid whose guardian this is (a forked child starts its own)
_pid: int | None = None
_pidfd: int | None = None  # pins the guardian: readable once it has exited
_restarts = 0
_failure: str | None = None


def ensure_started() -> None:
    """Start this process's guardian once, or again if it died (cheap otherwise: one poll)."""
    global _started_for, _pid, _pidfd, _restarts, _failure
    if os.environ.get(ENV_DISABLE):
        return
    me = os.getpid()
    if _started_for == me:
        if _pidfd is None or not _exited(_pidfd):
            return  # alive (or could not be started: said once, not retried per test)
        _restarts += 1
        os.close(_pidfd)
    _started_for, _pid, _pidfd = me, None, None
    from . import _token

    try:
        _pid = _spawn(_token.me())  # ablate: session-guardian
    except (OSError, ValueError) as exc:
        _failure = f"{type(exc).__name__}: {exc}"
        return
    if _pid is not None:
        try:
            _pidfd = os.pidfd_open(_pid)
        except OSError:
            _pidfd = None  # gone already: the next call cannot tell, and does not retry


def pid() -> int | None:
    """This process's guardian (None: none started here)."""
    return _pid if _started_for == os.getpid() else None


def notes() -> list[str]:
    """One line each for what the session summary must say about this process's guardian."""
    if _started_for != os.getpid():
        return []
    out = []
    if _restarts:
        out.append(f"the session guardian died during the session and was started again ({_restarts} time(s))")
    if _failure is not None:
        out.append(
            f"no session guardian could be started ({_failure}): if pytest dies without teardown, "
            "what its tests started is left to the next session's sweep"
        )
    return out


def _exited(fd: int) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


def _spawn(owner: Owner) -> int:
    from . import _subreaper
    from ._leaks import TAG_ENV

    # Its own leak tag, naming no scope and no owner: the guardian outlives its pytest by
    # design, so no --process-leaks check (an outer pytest's, when this one runs inside a
    # test) may take it for a leak, and no sweep for a dead owner's process.
    env = {**os.environ, TAG_ENV: f"helper.guardian.{owner.pid}.{owner.start_ticks}"}
    argv = [sys.executable, "-m", "pytest_stoplatency._guardian", str(owner.pid), str(owner.start_ticks)]
    # With --process-leaks-subreaper, pytest would adopt the orphan: not for this moment.
    with _subreaper.suspended():
        return _daemon(argv, env)  # ablate: guardian-daemon


def _daemon(argv: list[str], env: dict[str, str]) -> int:
    """Start argv as an orphan in a session of its own; return its pid."""
    sh = subprocess.Popen(
        ["/bin/sh", "-c", _BACKGROUND, "sh", *argv],
        env=env,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        close_fds=True,
    )
    out, _ = sh.communicate()  # the shell exits as soon as it has forked and printed
    return int(out)


def _watch(pid: int, start_ticks: int) -> None:
    from . import _procs

    fd = _procs.open_pidfd(pid, start_ticks)
    if fd is None:
        return  # already gone (or the pid is someone else's now)
    try:
        select.select([fd], [], [])
    finally:
        os.close(fd)


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

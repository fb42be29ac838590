"""The dashboard's buttons. Each calls the very code of the CLI command it stands for
(`runner stop`, `stop --now`, `stop --graceful`, `resume --detach`, the operator's PAUSE
file), with the origin `dashboard` where a stop records one. There is no stop code
here: only the threads that keep a blocking stop off the server's request threads, and
the last result of each run's action, for the page to show.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from runner.control import lifecycle, stop
from runner.errors import IdentityError, RunnerError, printable
from runner.events import Origin, StopKind
from runner.exitcodes import Exit
from runner.files import identity_file, stop_request
from runner.files.rundir import RunDir, refuse_copy
from runner.views import status

Action = Callable[[RunDir], tuple[Exit, str]]
"""One button's work: the exit code the CLI command would exit with, and its message."""

MESSAGE_CHARS = 400


def _stopping(kind: StopKind) -> Action:
    """A stop button: the CLI's own pipeline (control/stop.py), with the dashboard's origin."""

    def act(rd: RunDir) -> tuple[Exit, str]:
        result = stop.stop(rd, kind, origin=Origin.DASHBOARD)
        return result.code, " / ".join(result.lines())

    return act


def _pause(rd: RunDir) -> tuple[Exit, str]:
    refuse_copy(rd)  # a copy is read-only (its button is off; a hand-made POST still lands here)
    if stop_request.pause(rd):
        return Exit.OK, "PAUSE file put in place: the run holds at its next check point"
    return Exit.OK, "already paused (a PAUSE file is there)"


def _unpause(rd: RunDir) -> tuple[Exit, str]:
    refuse_copy(rd)
    if stop_request.unpause(rd):
        return Exit.OK, "PAUSE file removed: the run goes on"
    return Exit.OK, "not paused (no PAUSE file)"


def _resume(rd: RunDir) -> tuple[Exit, str]:
    said: list[str] = []
    code, _ = lifecycle.resume(rd.path, detach=True, say=said.append, resumable=status.resumable_run)
    if code == Exit.OK:
        _reap_engine_later(rd)
        said.insert(0, f"resumed: a new attempt of run {rd.run_id} is running")
    return Exit(code) if code in Exit._value2member_map_ else Exit.INTERNAL, " / ".join(said)


def _reap_engine_later(rd: RunDir) -> None:
    """The engine that resume started is this process's child: wait for it in a thread
    of its own, so that it never lingers as a zombie of a long-lived dashboard."""
    try:
        pid = identity_file.read(rd.engine_identity).pid
    except (IdentityError, OSError, RunnerError):
        return

    def wait() -> None:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass  # reaped by the subprocess module already, or not ours

    threading.Thread(target=wait, name=f"reap-engine-{pid}", daemon=True).start()


ACTIONS: dict[str, Action] = {
    "stop": _stopping(StopKind.HARD),
    "stop-now": _stopping(StopKind.NOW),
    "stop-graceful": _stopping(StopKind.GRACEFUL),
    "pause": _pause,
    "unpause": _unpause,
    "resume": _resume,
}
"""URL name -> the CLI's code. The page's buttons: "Stop", "Stop now", "Stop gracefully",
"Pause", "Unpause", "Resume"."""


@dataclass
class Record:
    action: str
    state: str  # "running", "done" (exit OK) or "failed"
    started: float
    message: str = ""
    code: int | None = None
    finished: float | None = None


class Actions:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[str, Record] = {}
        self._running: set[tuple[str, str]] = set()
        self._threads: list[threading.Thread] = []

    def start(self, name: str, rd: RunDir, action: str) -> bool:
        """Run `action` on the run in a thread of its own; False (nothing started) when
        the same action on the same run is still running."""
        work = ACTIONS[action]
        with self._lock:
            if (name, action) in self._running:
                return False
            self._running.add((name, action))
            started = time.time()
            self._last[name] = Record(action, "running", started)
            # Not a daemon: a dashboard told to exit finishes the stops it started
            # (each is bounded) instead of leaving one half done.
            thread = threading.Thread(target=self._run, args=(name, rd, action, work, started), name=f"{action}-{name}")
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()
        return True

    def _run(self, name: str, rd: RunDir, action: str, work: Action, started: float) -> None:
        try:
            code, message = work(rd)
        except RunnerError as exc:
            code, message = exc.exit_code, str(exc)
        except Exception as exc:  # a bug: the page says so; the server goes on
            logging.getLogger(__name__).exception("dashboard action %s on %s failed", action, name)
            code, message = Exit.INTERNAL, f"internal error: {type(exc).__name__}: {exc}"
        with self._lock:
            self._running.discard((name, action))
            state = "done" if code == Exit.OK else "failed"
            message = printable(message, MESSAGE_CHARS)
            self._last[name] = Record(action, state, started, message, int(code), time.time())

    def last(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            record = self._last.get(name)
            return asdict(record) if record is not None else None

    def join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for thread in list(self._threads):
            thread.join(max(deadline - time.monotonic(), 0.0))

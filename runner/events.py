"""The runner's vocabularies, each defined once: journal events, command outcomes, stop
origins and modes, the signals that stop.

Every record of journal.jsonl is {"event": <Event>, "t": <epoch>, ...fields}. The events
and their fields are listed in docs/architecture.md; a test checks that every event the
code writes is documented there, and that nothing documented is never written. Stop
origins and modes are here too (the request file, the journal and the state use them).
"""

from __future__ import annotations

import signal
from enum import IntEnum, StrEnum

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# getattr: off Linux (no SIGHUP on Windows) the CLI must still import, to say where the
# runner cannot run (cli.unsupported()).
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))
"""The signals that stop a run when its foreground command or its engine receives them
(Origin.SIGNAL, Origin.CTRL_C): the CLI blocks them while it starts, and a stopper holds
them while it records a stop."""


class Event(StrEnum):
    # -- the run ------------------------------------------------------------------
    CONTAINMENT = "containment"
    RUN_START = "run-start"
    RUN_COMPLETE = "run-complete"
    RESUME = "resume"
    LEFTOVERS_KILLED = "leftovers-killed"
    CONTROL_FILE_ARCHIVED = "control-file-archived"
    # -- phases and commands ------------------------------------------------------
    PHASE_START = "phase-start"
    SESSION_START = "session-start"
    SESSION_END = "session-end"
    HOOK_RESULT = "hook-result"
    HOOK_SKIPPED = "hook-skipped"
    VERIFY_RESULT = "verify-result"
    REPAIR_DISPATCH = "repair-dispatch"
    ITEM_DONE = "item-done"
    ITEM_FAILED = "item-failed"
    CALL_TIMEOUT = "call-timeout"
    IDLE_TIMEOUT = "idle-timeout"
    PAUSED = "paused"
    UNPAUSED = "unpaused"
    # -- stops --------------------------------------------------------------------
    GRACEFUL_STOP = "graceful-stop"
    TEARDOWN_COMPLETE = "teardown-complete"
    RUN_STOP = "run-stop"
    STOP_REQUEST_UNREADABLE = "stop-request-unreadable"
    STOP_REQUEST_RECEIVED_LATE = "stop-request-received-late"
    STOP_REQUEST_DISCARDED = "stop-request-discarded"
    SIGNAL_REFUSED = "signal-refused"
    UNKILLABLE = "unkillable"
    LEFT_RUNNING = "left-running"
    UNPROVEN_CHILDREN = "unproven-children"
    # -- errors -------------------------------------------------------------------
    WATCHDOG_ERROR = "watchdog-error"
    CLEANUP_ERROR = "cleanup-error"
    ENGINE_ERROR = "engine-error"
    ENGINE_CRASH = "engine-crash"
    CGROUP_REMOVE_FAILED = "cgroup-remove-failed"
    # -- the disk -----------------------------------------------------------------
    RESERVE_UNAVAILABLE = "reserve-unavailable"
    OUTPUT_UNWRITTEN = "output-unwritten"
    DISK_FAULT = "disk-fault"
    # -- hard links ---------------------------------------------------------------
    LINK_BROKEN = "link-broken"


class Outcome(StrEnum):
    """What became of one command (a provider call, a hook, a verify command)."""

    PASSED = "passed"
    FAILED = "failed"
    TIMEOUT = "timeout"
    STOPPED = "stopped"  # killed because the run is stopping: never a failure


class Origin(StrEnum):
    """Where a stop came from: the journal's and the state's `origin` (trio records why
    each cancel happened; so does every stop here)."""

    SIGNAL = "signal"  # SIGTERM or SIGHUP: `runner stop` on the signal channel, or `kill`
    FILE = "file"  # stop-request.json or the STOP file
    CTRL_C = "ctrl-c"  # SIGINT: a foreground run's terminal
    DASHBOARD = "dashboard"  # a button of `runner dashboard` (the same stop code as the CLI's)
    FORCED = "forced"  # the stopper recorded it: the engine was killed, not asked
    VANISHED = "vanished"  # the run directory was removed under the live run (dirfd.gone)
    DISK = "disk"  # the engine stopped the run itself: a write failed (full or read-only disk)
    UNKNOWN = "unknown"  # a request whose origin cannot be read

    @classmethod
    def parse(cls, value: Any) -> Origin:  # any JSON value; what is not an origin is UNKNOWN
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


class Mode(IntEnum):
    """Ordered: a request is never downgraded (absent < graceful < hard)."""

    ABSENT = 0
    GRACEFUL = 1
    HARD = 2

    @property
    def label(self) -> str:
        """How the journal and the request file spell it ("graceful", "hard")."""
        return self.name.lower()

    @classmethod
    def parse(cls, value: object) -> Mode:
        if isinstance(value, Mode):
            return value
        if isinstance(value, str) and value.upper() in ("GRACEFUL", "HARD"):
            return cls[value.upper()]
        raise ValueError(f"stop mode must be 'graceful' or 'hard', got {value!r}")

"""The runner's vocabularies, each defined once: journal events, command outcomes, stop
origins and modes, the kinds of stop and every way to stop a run, the signals that stop.

Every record of journal.jsonl is {"event": <Event>, "t": <epoch>, ...fields}. The events
and their fields are listed in docs/architecture.md; a test checks that every event the
code writes is documented there, and that nothing documented is never written. Stop
origins and modes are here too (the request file, the journal and the state use them).
"""

from __future__ import annotations

import signal
from enum import IntEnum, StrEnum

from runner import defaults
from runner.values import FrozenValue

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, ClassVar, Final

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


class StopKind(FrozenValue):
    """How a stop goes, one value per kind: what it asks of the engine (the request's
    `mode`, lodged before any signal), whether the stopper waits `grace` for the engine's
    own stop (`waits`), whether it kills the run itself (`forces`: at once, or after the
    grace). Every way to stop a run is one of these (WAYS), and its worst case is the sum
    of its terms (`worst_case`): `runner bound`, the stop-modes table of
    docs/stop-latency.md and the stop pipeline (control/stop.py) all read them here."""

    __slots__ = ("name", "mode", "waits", "forces")
    HARD: ClassVar[StopKind]
    NOW: ClassVar[StopKind]
    GRACEFUL: ClassVar[StopKind]

    def __init__(self, name: str, mode: Mode, waits: bool, forces: bool) -> None:
        self.name: Final = name
        self.mode: Final = mode
        self.waits: Final = waits
        self.forces: Final = forces

    def worst_case(
        self, grace: float = defaults.STOP_GRACE, kill_grace: float = defaults.KILL_GRACE, by: str = "stopper"
    ) -> tuple[tuple[str, float], ...]:
        """The waits this kind of stop can make, each (its name in runner/defaults.py,
        seconds), lock waits included: from the request until every process of the run
        is gone and the stop is recorded. `by`: "stopper" (a command, the dashboard, a
        foreground `runner run`: it lodges its request, waits, kills and records) or
        "engine" (a signal or the STOP file reaching the engine itself: nobody forces).
        Without a cgroup, kill rounds can add KILL_ROUNDS_BOUND (said where it applies)."""
        lodge = (("REQUEST_LOCK_WAIT", defaults.REQUEST_LOCK_WAIT),)
        kill = (("KILL_GRACE", kill_grace), ("CONFIRM_TIMEOUT", defaults.CONFIRM_TIMEOUT))
        record = (("LOCK_WAIT", defaults.LOCK_WAIT),)
        if self.mode == Mode.GRACEFUL:
            phase = (
                ("CALL_TIMEOUT", defaults.CALL_TIMEOUT),
                ("HOOK_TIMEOUT", defaults.HOOK_TIMEOUT),
                ("VERIFY_TIMEOUT", defaults.VERIFY_TIMEOUT),
            )
            return phase if by == "engine" else lodge + phase
        if by == "engine":
            return lodge + kill  # the engine's consume of a request, then its own kill
        wait = (("STOP_GRACE", grace),) if self.waits else ()
        return lodge + wait + kill + record

    def worst(self, grace: float = defaults.STOP_GRACE, kill_grace: float = defaults.KILL_GRACE) -> float:
        """The sum of the stopper's worst case (`runner bound` prints the hard stop's)."""
        return sum(seconds for _, seconds in self.worst_case(grace, kill_grace))


StopKind.HARD = StopKind("hard", Mode.HARD, waits=True, forces=True)
"""`runner stop`: a hard request and SIGTERM to the engine, `grace` for its own stop, then
the stopper kills the run itself (the fallback, STOP_FORCED) and records it."""
StopKind.NOW = StopKind("now", Mode.HARD, waits=False, forces=True)
"""`runner stop --now`: a hard request, then the stopper kills every process of the run at
once (the engine's included) and records the stop."""
StopKind.GRACEFUL = StopKind("graceful", Mode.GRACEFUL, waits=False, forces=False)
"""`runner stop --graceful`: a graceful request; the engine stops once the phase in flight
is done. Nothing is signalled."""


class Way(FrozenValue):
    """One way to stop a run: what a user does (`label`), the StopKind it is, who runs
    it ("stopper": a command, the dashboard, a foreground `runner run`; "engine": the
    engine itself, nobody forcing) and the origin it names (None: the request names its
    channel, `signal` or `file`, and a stopper that records the stop itself says `forced`)."""

    __slots__ = ("label", "kind", "by", "origin")

    def __init__(self, label: str, kind: StopKind, by: str, origin: Origin | None) -> None:
        self.label: Final = label
        self.kind: Final = kind
        self.by: Final = by
        self.origin: Final = origin


WAYS = (
    Way("runner stop", StopKind.HARD, "stopper", None),  # the channel's origin: signal or file
    Way("runner stop --now", StopKind.NOW, "stopper", None),
    Way("runner stop --graceful", StopKind.GRACEFUL, "stopper", Origin.FILE),
    Way("runner stop --graceful --wait", StopKind.GRACEFUL, "stopper", Origin.FILE),
    Way("runner stop --all", StopKind.HARD, "stopper", None),
    Way("runner stop --all --now", StopKind.NOW, "stopper", None),
    Way("runner stop --all --graceful", StopKind.GRACEFUL, "stopper", Origin.FILE),
    Way('dashboard "Stop"', StopKind.HARD, "stopper", Origin.DASHBOARD),
    Way('dashboard "Stop now"', StopKind.NOW, "stopper", Origin.DASHBOARD),
    Way('dashboard "Stop gracefully"', StopKind.GRACEFUL, "stopper", Origin.DASHBOARD),
    Way("Ctrl-C once (foreground)", StopKind.HARD, "stopper", Origin.CTRL_C),
    Way("Ctrl-C twice (foreground)", StopKind.NOW, "stopper", None),
    Way("SIGTERM or SIGHUP to a foreground `runner run`", StopKind.HARD, "stopper", Origin.SIGNAL),
    Way("SIGTERM to the engine", StopKind.HARD, "engine", Origin.SIGNAL),
    Way("the STOP file", StopKind.GRACEFUL, "engine", Origin.FILE),
)
"""Every way to stop a run, each mapped onto its StopKind: the CLI, `--all`, the
dashboard and the foreground's signal handler call the stop pipeline with that kind
(control/stop.py); the engine answers the last two itself (stop_controller.py)."""

"""What a stop found, did and recorded (StopFacts, filled in by the pipeline's steps in
control/stop.py), and what it says and exits with (StopResult): built once, by `build`,
from the facts. Every message a stop prints is worded here.
"""

from __future__ import annotations

from enum import StrEnum

from runner import defaults
from runner.exitcodes import Exit
from runner.values import Value

TYPE_CHECKING = False

if TYPE_CHECKING:
    from runner.control.survey import Survey
    from runner.errors import Unwritable
    from runner.events import StopKind
    from runner.proc.reaper import ReapReport


class RecordedBy(StrEnum):
    """Who recorded the end of the run a stopper stopped (StopResult.recorded_by)."""

    ENGINE = "engine"  # the engine, itself (it honored the stop, perhaps late)
    OTHER = "other"  # another stopper, first (a `--now` racing this `runner stop`)
    FINISHED = "finished"  # nobody needed to: the run had completed
    STOPPER = "stopper"  # this stopper
    NOBODY = "nobody"  # nobody could: the file system refused the write
    VANISHED = "vanished"  # nobody could: the run directory went away
    HELD = "held"  # another stopper holds the run's lock to record it, past LOCK_WAIT


class StopFacts(Value):
    """Everything one stop learned, step by step; `build` words it once. A plain class,
    not a dataclass (see values.py)."""

    __slots__ = (
        "kind",
        "view",
        "elapsed",
        "grace",
        "engine_dead",
        "gone_in_grace",
        "fallback",
        "report",
        "killed",
        "recorded_by",
        "engine_origin",
        "finished_as",
        "unrecorded",
        "held_by",
        "unproven",
        "left_alone",
        "vanished",
        "said",
        "cgroups_left",
    )

    def __init__(self, kind: StopKind, view: Survey) -> None:
        self.kind = kind
        self.view = view
        self.elapsed = 0.0
        self.grace: float | None = None  # the hard stop's grace, once it waited
        self.engine_dead = False  # the engine was dead before this stop began
        self.gone_in_grace = False  # the hard stop saw the engine exit within its grace
        self.fallback = False  # this stopper forced an engine that outlived its grace
        self.report: ReapReport | None = None  # this stopper's kill
        self.killed = False  # the kill ran (a hard stop honored in grace runs none)
        self.recorded_by: RecordedBy | None = None
        self.engine_origin: str | None = None  # the origin the engine recorded
        self.finished_as: str | None = None  # "completed"/"failed": the run ended on its own first
        self.unrecorded: Unwritable | None = None  # why the record could not be written
        self.held_by: str | None = None  # who holds the run's lock when it could not be taken
        self.unproven: list[str] = []
        """Calls a dead engine recorded, alive as themselves, that nothing proves the
        run's (no tag of any run, in no run's cgroup), left alone: "pid N (name)"."""
        self.left_alone: list[int] = []
        """Their pids: something of the run may be alive, never an exit 0."""
        self.vanished: str | None = None  # the run directory that went away during the stop
        self.said: list[str] = []
        """Lines of their own that change no code (another stopper held the request's lock)."""
        self.cgroups_left: str | None = None  # the run's cgroups this stop could not remove, and why

    @property
    def found(self) -> int:
        """How many processes of the run this stop found alive (and signalled)."""
        r = self.report
        return 0 if r is None else len(set(r.died_at_term) | set(r.needed_kill) | set(r.unkillable))


class StopResult(Value):
    """What a stop command did: its exit code and the lines it prints. A plain class, not
    a dataclass (see values.py)."""

    __slots__ = ("code", "message", "elapsed", "unkillable", "recorded_by", "refused", "damaged", "unwritten", "notes")

    def __init__(
        self,
        code: Exit,
        message: str,
        elapsed: float,
        unkillable: list[int] | None = None,
        recorded_by: RecordedBy | None = None,
        refused: list[str] | None = None,
        damaged: list[str] | None = None,
        unwritten: list[str] | None = None,
        notes: list[str] | None = None,
    ) -> None:
        self.code = code
        self.message = message
        self.elapsed = elapsed
        self.unkillable: list[int] = [] if unkillable is None else unkillable
        self.recorded_by = recorded_by
        self.refused: list[str] = [] if refused is None else refused
        self.damaged: list[str] = [] if damaged is None else damaged
        self.unwritten: list[str] = [] if unwritten is None else unwritten
        self.notes: list[str] = [] if notes is None else notes
        """Further lines of their own (the engine's children left alone)."""

    def lines(self) -> list[str]:
        """What the command prints: the result, then (each on one line) what was left
        alone, what was refused and what in the run directory is damaged."""
        out = [self.message, *self.notes]
        if self.refused:
            out.append("refused to signal (not proven the run's): " + "; ".join(self.refused))
        if self.damaged:
            out.append("damaged run directory: " + "; ".join(self.damaged))
        if self.unwritten and self.code != Exit.NOT_RECORDED:  # a NOT_RECORDED message says it
            out.append("the file system refused a write: " + "; ".join(self.unwritten))
        return out


def build(f: StopFacts) -> StopResult:
    """The stop's result, once: its exit code and its lines, from what its steps found.
    Code: UNKILLABLE, else LEFT_RUNNING (past the bound, or left alone unproven), else
    NOT_RECORDED, else DAMAGED, else STOP_FORCED (this stopper forced an engine that
    outlived its grace), else OK; exit 0 only with nothing of the run alive."""
    view, r = f.view, f.report
    run = f"run {view.run_id}"
    unkillable = sorted(set(r.unkillable)) if r is not None else []
    left_running = sorted(set(r.left_running)) if r is not None else []
    killed = (
        f"{len(r.died_at_term)} died at SIGTERM, {len(r.needed_kill)} needed SIGKILL, in {r.elapsed:.3f}s"
        if r is not None
        else ""
    )
    # What this stop's own kill did, in parentheses; nothing at all when it killed
    # nothing (its engine gone within the grace): never an empty "killed ()".
    did = f" ({killed})" if killed else ""
    notes = list(f.said)
    if f.unproven:
        notes.append(
            "left alone, not proven the run's (calls its dead engine recorded, without any run's tag and out of "
            "any run's cgroup): " + "; ".join(f.unproven)
        )
    if f.cgroups_left:
        notes.append(f"the run's cgroup could not be removed: {f.cgroups_left}")
    code = view.ok_code
    if unkillable:
        code, message = (
            Exit.UNKILLABLE,
            f"stop could not kill pids {unkillable} (in uninterruptible sleep); they are named in the journal",
        )
    elif left_running:
        code, message = (
            Exit.LEFT_RUNNING,
            f"stop left pids {left_running} of {run} alive past its bound "
            f"({defaults.KILL_ROUNDS_BOUND}s of kill rounds; not in uninterruptible sleep); run `runner stop` again",
        )
    elif f.left_alone:
        code, message = (
            Exit.LEFT_RUNNING,
            f"stop left pids {f.left_alone} of {run} alive: its dead engine recorded them as its calls, but "
            "nothing proves them the run's (no tag, no cgroup); never signalled: end them yourself if they are",
        )
    elif f.vanished is not None:
        code = Exit.OK
        message = (
            f"{run}: its directory {f.vanished} is gone (removed under the run): every process of the run is gone"
            + (f" ({killed})" if killed else "")
            + "; nothing could be recorded"
        )
    elif f.recorded_by in (RecordedBy.NOBODY, RecordedBy.HELD):
        code = Exit.NOT_RECORDED
        why = (
            f"another stopper ({f.held_by}) holds the run's lock to record it and did not within "
            f"{defaults.LOCK_WAIT}s (a later `runner stop` completes the record once it is gone)"
            if f.recorded_by == RecordedBy.HELD
            else str(f.unrecorded)
        )
        if f.gone_in_grace and f.found == 0:
            head = f"{run} stopped by its engine in {f.elapsed:.3f}s"
        elif f.fallback:
            head = f"engine did not honor the stop within grace {f.grace}s; force-killed: {run} killed{did}"
        elif killed:
            head = f"{run} killed{did}"
        else:
            head = f"{run} stopped: its engine was gone within the grace"
        message = f"{head}; every process is gone, but the stop could not be recorded: {why}"
    elif f.recorded_by == RecordedBy.FINISHED or f.finished_as is not None:
        message = f"{run} had already {f.finished_as or 'finished'}; the stop arrived late"
        if killed and f.found:
            message += f" ({killed})"
    elif f.recorded_by == RecordedBy.ENGINE:
        asked = asked_by(f.kind.name, f.engine_origin)
        if f.fallback:
            message = f"engine honored the stop after grace {f.grace}s: {run} stopped {asked} by its engine" + (
                f" ({killed})" if killed else ""
            )
        elif not f.killed:
            message = f"{run} stopped {asked}: its engine stopped it in {f.elapsed:.3f}s"
        else:
            message = f"{run} stopped {asked}: its engine stopped it ({killed})"
    elif f.recorded_by == RecordedBy.OTHER:
        message = f"{run} stopped by another stopper" + (f" ({killed})" if f.killed else f" in {f.elapsed:.3f}s")
    elif f.engine_dead and f.found == 0:
        message = (
            f"{run}: its engine was dead and nothing of the run was alive; the stop is recorded "
            "(`runner resume` continues the run)"
        )
    elif f.engine_dead:
        message = f"its engine was dead: {run} killed{did}"
    elif f.fallback:
        if code == Exit.OK:
            code = Exit.STOP_FORCED  # this very stopper forced the engine: only then
        message = f"engine did not honor the stop within grace {f.grace}s; force-killed: {run} killed{did}"
    elif killed:
        message = f"{run} killed{did}"
    else:
        # Its engine was gone within the grace (another stopper's `--now` killed it, say)
        # and nobody had recorded the stop yet: this stop recorded it, and killed nothing.
        message = f"{run} stopped: its engine was gone within the grace; this stop recorded it and killed nothing"
    return StopResult(
        code,
        message,
        f.elapsed,
        unkillable=unkillable,
        recorded_by=f.recorded_by,
        refused=r.refused if r is not None else None,
        # A directory that went away has no damage or refused write left to speak of.
        damaged=view.damaged if f.vanished is None else None,
        unwritten=view.unwritten if f.vanished is None else None,
        notes=notes,
    )


_COMMANDS = {"hard": "`runner stop`", "now": "`runner stop --now`", "graceful": "`runner stop --graceful`"}
_BUTTONS = {"hard": "Stop", "now": "Stop now", "graceful": "Stop gracefully"}


def asked_by(kind: str, engine_origin: str | None) -> str:
    """Who asked for the stop the engine recorded, as the stop's line says it: this very
    command (`runner stop`, `runner stop --now`) or the dashboard's button when the engine
    honored this stopper's request (it lodges its request before any signal, and the
    engine records the origin of the request it honored: `signal` or `file`, the channel,
    or `dashboard`); else whoever asked first (Ctrl-C, the engine itself)."""
    if engine_origin in ("signal", "file", None):
        return f"with {_COMMANDS.get(kind, '`runner stop`')}"  # ablate: stop-line-names-command
    if engine_origin == "dashboard":
        return f"from the dashboard ({_BUTTONS.get(kind, 'Stop')})"
    if engine_origin == "ctrl-c":
        return "with Ctrl-C in the terminal of `runner run`"
    if engine_origin == "vanished":
        return "by its engine, its run directory removed, before this stop"
    if engine_origin == "disk":
        return "by its engine, the disk refusing a write, before this stop"
    return f"(who asked cannot be read: {engine_origin})"


def graceful_lodged(run_id: str | None, hard_pending: bool) -> StopResult:
    """`stop --graceful`: lodged, or a hard stop already pending (never downgraded)."""
    if hard_pending:
        return StopResult(Exit.OK, f"a hard stop is already pending for run {run_id}; it is not downgraded", 0.0)
    return StopResult(
        Exit.OK, f"graceful stop lodged for run {run_id}: the phase in flight completes, then the run stops", 0.0
    )

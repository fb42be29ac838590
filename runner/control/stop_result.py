"""What a stop command did (StopResult) and what it says: every message a stop prints is
built here, from what the stop found, killed and recorded.

Its classes are plain (values.py), not dataclasses: importing and applying dataclasses cost
every stop command 74 M of its 205 M start-up instructions (valgrind), about 20 ms.
"""

from __future__ import annotations

import time

from runner import defaults
from runner.errors import Unwritable
from runner.exitcodes import Exit
from runner.values import Value

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up cost, see log.py)

if TYPE_CHECKING:
    from runner.control.run_view import RunView
    from runner.proc.reaper import ReapReport


class StopResult(Value):
    """What a stop command did. A plain class, not a dataclass (see values.py)."""

    __slots__ = (
        "code",
        "message",
        "elapsed",
        "unkillable",
        "recorded_by",
        "refused",
        "damaged",
        "unwritten",
        "found",
        "unproven",
    )

    def __init__(
        self,
        code: Exit,
        message: str,
        elapsed: float,
        unkillable: list[int] | None = None,
        recorded_by: str | None = None,
        refused: list[str] | None = None,
        damaged: list[str] | None = None,
        unwritten: list[str] | None = None,
    ) -> None:
        self.code = code
        self.message = message
        self.elapsed = elapsed
        self.unkillable: list[int] = [] if unkillable is None else unkillable
        self.recorded_by = recorded_by
        self.refused: list[str] = [] if refused is None else refused
        self.damaged: list[str] = [] if damaged is None else damaged
        self.unwritten: list[str] = [] if unwritten is None else unwritten
        self.found = 0
        """How many processes of the run this stop found alive (and signalled)."""
        self.unproven: list[str] = []
        """The engine's children that its clean-up left alive, not proven the run's
        (the journal's unproven-children): "pid N (name)" each."""

    def lines(self) -> list[str]:
        """What the command prints: the result, then (each on one line) what was refused
        and what in the run directory is damaged."""
        out = [self.message]
        if self.refused:
            out.append("refused to signal (not proven the run's): " + "; ".join(self.refused))
        if self.damaged:
            out.append("damaged run directory: " + "; ".join(self.damaged))
        if self.unproven:
            out.append(
                "left alone, not proven the run's (children of its engine, out of its cgroup and without its tag): "
                + "; ".join(self.unproven)
            )
        if self.unwritten and self.code != Exit.NOT_RECORDED:  # a NOT_RECORDED message says it
            out.append("the file system refused a write: " + "; ".join(self.unwritten))
        return out


def _left_running(view: RunView, report: ReapReport, started: float) -> StopResult:
    """Processes of the run alive at the end of the stop's bound, none of them in
    uninterruptible sleep: never exit 0, never UNKILLABLE."""
    elapsed = time.monotonic() - started
    return StopResult(
        Exit.LEFT_RUNNING,
        f"stop left pids {report.left_running} of run {view.run_id} alive past its bound "
        f"({defaults.KILL_ROUNDS_BOUND}s of kill rounds; not in uninterruptible sleep); run `runner stop` again",
        elapsed,
        refused=report.refused,
        damaged=view.damaged,
        unwritten=view.unwritten,
    )


def forced_result(
    view: RunView,
    report: ReapReport,
    unkillable: list[int],
    recorded_by: str | None,
    fallback: bool,
    started: float,
    unrecorded: Unwritable | None = None,
) -> StopResult:
    elapsed = time.monotonic() - started
    if unkillable:
        return StopResult(
            Exit.UNKILLABLE,
            f"stop could not kill pids {unkillable} (in uninterruptible sleep); they are named in the journal",
            elapsed,
            unkillable,
            refused=report.refused,
            damaged=view.damaged,
            unwritten=view.unwritten,
        )
    if report.left_running:
        return _left_running(view, report, started)
    killed = f"{len(report.died_at_term)} died at SIGTERM, {len(report.needed_kill)} needed SIGKILL, in {elapsed:.3f}s"
    if unrecorded is not None:
        return StopResult(
            Exit.NOT_RECORDED,
            f"run {view.run_id} killed ({killed}); every process is gone, but the stop could not be "
            f"recorded: {unrecorded}",
            elapsed,
            recorded_by="nobody",
            refused=report.refused,
            damaged=view.damaged,
            unwritten=view.unwritten,
        )
    code = view.ok_code
    if recorded_by == "finished":
        return StopResult(
            code,
            f"run {view.run_id} had already finished; nothing to record ({killed})",
            elapsed,
            recorded_by=recorded_by,
            refused=report.refused,
            damaged=view.damaged,
            unwritten=view.unwritten,
        )
    if recorded_by in ("engine", "other"):
        # Someone else recorded the stop: STOP_FORCED says that THIS stopper forced it.
        who = "its engine" if recorded_by == "engine" else "another stopper"
        return StopResult(
            code,
            f"run {view.run_id} stopped by {who} ({killed})",
            elapsed,
            recorded_by=recorded_by,
            refused=report.refused,
            damaged=view.damaged,
            unwritten=view.unwritten,
        )
    if fallback and code == Exit.OK:
        code = Exit.STOP_FORCED
    return StopResult(
        code,
        f"run {view.run_id} killed ({killed})",
        elapsed,
        recorded_by=recorded_by,
        refused=report.refused,
        damaged=view.damaged,
        unwritten=view.unwritten,
    )

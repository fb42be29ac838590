"""What a stop command did (StopResult) and what it says: every message a stop prints is
built here, from what the stop found, killed and recorded.
"""

from __future__ import annotations

import time
from enum import StrEnum

from runner import defaults
from runner.errors import Unwritable
from runner.exitcodes import Exit
from runner.values import Value

TYPE_CHECKING = False

if TYPE_CHECKING:
    from typing import Any

    from runner.control.run_view import RunView
    from runner.proc.reaper import ReapReport


class RecordedBy(StrEnum):
    """Who recorded the end of a run a stopper forced (StopResult.recorded_by)."""

    ENGINE = "engine"  # the engine, itself (it honored the stop, perhaps late)
    OTHER = "other"  # another stopper, first (a `--now` racing this `runner stop`)
    FINISHED = "finished"  # nobody needed to: the run had completed
    STOPPER = "stopper"  # this stopper
    NOBODY = "nobody"  # nobody could: the file system refused the write


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
        recorded_by: RecordedBy | None = None,
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


def _result(
    view: RunView, code: Exit, message: str, elapsed: float, report: ReapReport | None = None, **extra: Any
) -> StopResult:
    """A result that names what the view found damaged or unwritable and what the reaper
    refused: every result of a stop of a run says them."""
    refused = report.refused if report is not None else None
    return StopResult(code, message, elapsed, refused=refused, damaged=view.damaged, unwritten=view.unwritten, **extra)


def _left_running(view: RunView, report: ReapReport, elapsed: float) -> StopResult:
    """Processes of the run alive at the end of the stop's bound, none of them in
    uninterruptible sleep: never exit 0, never UNKILLABLE."""
    return _result(
        view,
        Exit.LEFT_RUNNING,
        f"stop left pids {report.left_running} of run {view.run_id} alive past its bound "
        f"({defaults.KILL_ROUNDS_BOUND}s of kill rounds; not in uninterruptible sleep); run `runner stop` again",
        elapsed,
        report,
    )


def forced_result(
    view: RunView,
    report: ReapReport,
    unkillable: list[int],
    recorded_by: RecordedBy | None,
    fallback: bool,
    started: float,
    unrecorded: Unwritable | None = None,
) -> StopResult:
    """The result of force: what could not be killed, else who recorded the stop."""
    elapsed = time.monotonic() - started
    if unkillable:
        return _result(
            view,
            Exit.UNKILLABLE,
            f"stop could not kill pids {unkillable} (in uninterruptible sleep); they are named in the journal",
            elapsed,
            report,
            unkillable=unkillable,
        )
    if report.left_running:
        return _left_running(view, report, elapsed)
    killed = f"{len(report.died_at_term)} died at SIGTERM, {len(report.needed_kill)} needed SIGKILL, in {elapsed:.3f}s"
    if unrecorded is not None:
        return _result(
            view,
            Exit.NOT_RECORDED,
            f"run {view.run_id} killed ({killed}); every process is gone, but the stop could not be "
            f"recorded: {unrecorded}",
            elapsed,
            report,
            recorded_by=RecordedBy.NOBODY,
        )
    code = view.ok_code
    if recorded_by == RecordedBy.FINISHED:
        message = f"run {view.run_id} had already finished; nothing to record ({killed})"
    elif recorded_by in (RecordedBy.ENGINE, RecordedBy.OTHER):
        # Someone else recorded the stop: STOP_FORCED says that THIS stopper forced it.
        who = "its engine" if recorded_by == RecordedBy.ENGINE else "another stopper"
        message = f"run {view.run_id} stopped by {who} ({killed})"
    else:
        if fallback and code == Exit.OK:
            code = Exit.STOP_FORCED
        message = f"run {view.run_id} killed ({killed})"
    return _result(view, code, message, elapsed, report, recorded_by=recorded_by)


def stopped_by_other(view: RunView, elapsed: float) -> StopResult:
    """The engine went within grace and another stopper (forcing) recorded the stop."""
    return _result(
        view,
        view.ok_code,
        f"run {view.run_id} stopped by another stopper in {elapsed:.3f}s",
        elapsed,
        recorded_by=RecordedBy.OTHER,
    )


def stopped_by_engine(view: RunView, origin: str | None, elapsed: float) -> StopResult:
    """The engine honored the stop within grace and recorded it."""
    return _result(
        view, view.ok_code, f"run {view.run_id} stopped by its engine (origin {origin}) in {elapsed:.3f}s", elapsed
    )


def arrived_late(view: RunView, status: str, elapsed: float) -> StopResult:
    """The run had completed (or failed) on its own before the stop reached it."""
    return _result(view, view.ok_code, f"run {view.run_id} had already {status}; the stop arrived late", elapsed)


def after_grace(view: RunView, result: StopResult, grace: float, gone_in_grace: bool) -> StopResult:
    """The hard stop's result once it fell back to force: force's message, said as what
    became of the engine's grace. `gone_in_grace`: the engine was seen to exit within it."""
    if result.recorded_by == RecordedBy.ENGINE:
        # The engine recorded its own stop while the fallback ran: it honored it, late.
        result.message = f"engine honored the stop after grace {grace}s: {result.message}"
    elif result.recorded_by == RecordedBy.OTHER:
        result.message = f"another stopper stopped the run first: {result.message}"
    elif result.code == Exit.STOP_FORCED:
        result.message = f"engine did not honor the stop within grace {grace}s; force-killed: {result.message}"
    elif result.code == Exit.NOT_RECORDED and gone_in_grace:
        # The engine ended the run itself within grace (the fallback found nothing left
        # to kill) but could not record it; neither could this stopper.
        what = result.message.split("could not be recorded: ", 1)[-1]
        result.message = (
            f"run {view.run_id} stopped by its engine in {result.elapsed:.3f}s; every process is gone, "
            f"but the stop could not be recorded: {what}"
        )
    elif result.code == Exit.NOT_RECORDED:
        result.message = f"engine did not honor the stop within grace {grace}s; force-killed: {result.message}"
    return result


def without_engine(view: RunView, result: StopResult) -> StopResult:
    """The hard stop of a run whose engine was dead: force's message, said so."""
    if result.recorded_by == RecordedBy.STOPPER and result.found == 0:
        result.message = (
            f"run {view.run_id}: its engine was dead and nothing of the run was alive; the stop is recorded "
            "(`runner resume` continues the run)"
        )
    else:
        result.message = f"its engine was dead: {result.message}"
    return result


def graceful_lodged(run_id: str | None, hard_pending: bool) -> StopResult:
    """`stop --graceful`: lodged, or a hard stop already pending (never downgraded)."""
    if hard_pending:
        return StopResult(Exit.OK, f"a hard stop is already pending for run {run_id}; it is not downgraded", 0.0)
    return StopResult(
        Exit.OK, f"graceful stop lodged for run {run_id}: the phase in flight completes, then the run stops", 0.0
    )

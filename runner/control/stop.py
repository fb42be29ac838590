"""`runner stop`: the hard stop, the graceful stop and `--now` (force: the immediate stop,
which the hard stop falls back to).

The request is always lodged before any signal is sent, so the engine can tell where
the stop came from and a stop still lands when no signal is delivered at all (the
file channel). While the engine lives, only the engine writes `stopped`: a stopper
records a stop only after proving the engine dead, and only if the engine did not
(stop_record.py).
"""

from __future__ import annotations

import os
import signal
import time

from runner.control import run_view, stop_result
from runner.control.stop_lock import StopLock, force_bound
from runner.control.stop_record import record_forced_stop, recorded_by_someone, unproven_children
from runner.control.stop_result import RecordedBy, StopResult, forced_result
from runner.errors import ControlFileError, Damaged, NoLiveRun, RunLocked, Unwritable
from runner.events import Event, Mode, Origin
from runner.files import stop_request
from runner.files.journal import Journal
from runner.files.rundir import RunDir, refuse_copy
from runner.files.state import StateStore
from runner.proc import identity, reaper, signals, sweep

TYPE_CHECKING = False

if TYPE_CHECKING:
    from runner.control.run_view import RunView


def force(
    rd: RunDir,
    kill_grace: float | None = None,
    *,
    fallback: bool,
    view: RunView | None = None,
    origin: Origin | None = None,
) -> StopResult:
    """The immediate stop: every group of the run and the engine's pid at once, SIGKILL
    after kill_grace, then the tag sweep and the cgroup kill (reaper.kill_everything).
    Total: whatever the run directory holds, every process proven the run's (by its tag
    or its cgroup) is stopped; damaged files are named, not obeyed. Records the stop
    only once the engine is proven dead, and only if it did not. `origin`: who asked
    (the dashboard), journaled in the stop this stopper records; else `forced`."""
    started = time.monotonic()
    view = run_view.acting_on(view or run_view.view(rd))
    kill_grace = view.stop.kill_grace if kill_grace is None else kill_grace
    # One forcing stopper at a time: a second one runs after the first has recorded the
    # stop, kills what may be left (usually nothing), and reports who recorded it.
    with StopLock(rd, view, force_bound(kill_grace)):
        return _force_locked(rd, kill_grace, fallback, view, started, origin)


def _force_locked(
    rd: RunDir, kill_grace: float, fallback: bool, view: RunView, started: float, origin: Origin | None
) -> StopResult:
    engine, children = view.engine, view.children
    engine_ours = (
        engine is not None
        and identity.is_running(engine)
        and run_view.members(view).proof(engine.pid, engine.start_ticks) is not None
    )
    recorded = [engine] if engine is not None else []
    groups = [(i.pgid, [i]) for i in recorded + children]
    report = reaper.kill_everything(
        groups=groups, pids=recorded + children, run_id=view.key, kill_grace=kill_grace, cgroup=view.cgroup
    )
    unkillable = sorted(set(report.unkillable))
    found = len(set(report.died_at_term) | set(report.needed_kill) | set(report.unkillable))
    if report.refused:
        try:
            with Journal(rd.journal) as journal:
                journal.append(Event.SIGNAL_REFUSED, by="stop", refused=report.refused)
        except (Damaged, OSError) as exc:
            view.note(exc)
    recorded_by = None
    unrecorded: Unwritable | None = None
    if engine_ours and engine is not None and identity.is_running(engine):
        # The engine outlived its SIGKILL: named by what the kernel shows (state D or not).
        stuck, alive = reaper.classify([engine.pid])
        unkillable = sorted(set(unkillable) | set(stuck))
        report.left_running = sorted(set(report.left_running) | set(alive))
    elif _engine_gone(rd, view):
        try:
            recorded_by = record_forced_stop(rd, report, fallback, origin)
        except Unwritable as exc:  # ablate: unrecorded-stop-reported
            unrecorded = exc
        except (Damaged, RunLocked) as exc:
            view.note(exc)
        if view.cgroup is not None and not unkillable:
            try:
                view.cgroup.remove()
            except OSError:
                pass  # still populated (an unkillable member) or removed by the engine
    result = forced_result(view, report, unkillable, recorded_by, fallback, started, unrecorded)
    result.found = found
    return result


def _engine_gone(rd: RunDir, view: RunView) -> bool:
    """No engine of this run is left: the lock is free (or, with the lock damaged, no
    process carries the run's tag)."""
    try:
        return not rd.is_live()
    except Damaged:
        return not (view.key and sweep.tagged(view.key))


def _with_unproven(rd: RunDir, result: StopResult) -> StopResult:
    result.unproven = unproven_children(rd)
    return result


def stop_now(rd: RunDir, kill_grace: float | None = None, *, origin: Origin | None = None) -> StopResult:
    """`runner stop --now` (see _stop_now), with the engine's unproven children named."""
    return _with_unproven(rd, _stop_now(rd, kill_grace, origin=origin))


def _stop_now(rd: RunDir, kill_grace: float | None = None, *, origin: Origin | None = None) -> StopResult:
    """`runner stop --now`: the immediate stop, by the stopper itself (see force). A
    caller that names its `origin` (the dashboard) lodges a hard request first, so that
    whoever records the stop, the engine or this stopper, journals that origin."""
    view = None
    if origin is not None:
        view = run_view.not_a_copy(run_view.view(rd))
        try:
            stop_request.lodge(rd, Mode.HARD, origin)
        except (ControlFileError, Damaged) as exc:
            view.note(exc)  # no request file: the kill needs none
    return force(rd, kill_grace, fallback=False, view=view, origin=origin)


def stop_hard(
    rd: RunDir,
    *,
    channel: str | None = None,
    grace: float | None = None,
    kill_grace: float | None = None,
    origin: Origin | None = None,
) -> StopResult:
    """`runner stop` (see _stop_hard), with the engine's unproven children named."""
    return _with_unproven(rd, _stop_hard(rd, channel, grace, kill_grace, origin))


def _stop_hard(
    rd: RunDir, channel: str | None, grace: float | None, kill_grace: float | None, origin: Origin | None
) -> StopResult:
    """`runner stop`: lodge, signal (signal channel), wait up to grace for the engine's
    own teardown, and only then fall back to the force-kill. With a damaged run
    directory (no engine to signal, no request file to write) it goes straight on to
    the force-kill, which needs neither. The request names the channel, or `origin`
    where the caller names itself (the dashboard)."""
    started = time.monotonic()
    view = run_view.acting_on(run_view.view(rd))
    channel = view.stop.channel if channel is None else channel
    grace = view.stop.grace if grace is None else grace
    if view.live is False:
        return _stop_without_engine(rd, view, kill_grace, origin, started)
    engine = view.engine
    use_signal = channel in ("signal", "auto") and os.name == "posix"
    try:
        stop_request.lodge(rd, Mode.HARD, origin or (Origin.SIGNAL if use_signal else Origin.FILE))
    except (ControlFileError, Damaged) as exc:
        view.note(exc)
        use_signal = os.name == "posix"  # no file channel left: the signal is all there is
    members = run_view.members(view)
    if engine is not None and members.foreign(engine.pid, engine.start_ticks):
        engine = None  # not proven the run's: never signalled, never waited for; force decides
    gone = engine is None
    if engine is not None:
        if use_signal and not identity.exiting(engine.pid):  # an exiting engine is only waited for
            signals.signal_process(engine, signal.SIGTERM, members)
        gone = signals.wait_gone(engine, grace)
    if gone and engine is not None:
        # Gone within grace: the engine honored the stop, or a concurrent `--now` killed
        # it. Wait for any stopper that is forcing to finish recording before reading.
        with StopLock(rd, view, force_bound(view.stop.kill_grace)):
            pass
        if recorded_by_someone(rd) == RecordedBy.OTHER:
            return stop_result.stopped_by_other(view, time.monotonic() - started)
        try:
            state = StateStore(rd.state).load()
        except Damaged as exc:
            view.note(exc)
            state = None
        elapsed = time.monotonic() - started
        if state is not None and state.stopped:
            return stop_result.stopped_by_engine(view, state.stop_origin, elapsed)
        if state is not None and state.status in ("completed", "failed"):
            return stop_result.arrived_late(view, state.status, elapsed)
    kill_grace = view.stop.kill_grace if kill_grace is None else kill_grace
    result = force(rd, kill_grace, fallback=True, view=view, origin=origin)
    result.elapsed = time.monotonic() - started
    return stop_result.after_grace(view, result, grace, gone and engine is not None)


_ENDED = (RecordedBy.ENGINE, RecordedBy.OTHER, RecordedBy.FINISHED)
"""A stop that found the attempt's end already recorded (or a finished run)."""


def _stop_without_engine(
    rd: RunDir, view: RunView, kill_grace: float | None, origin: Origin | None, started: float
) -> StopResult:
    """`runner stop` of a run whose engine is dead (it crashed, or a stopper killed it,
    perhaps a `--now` that was itself killed mid-stop): total all the same. What the run
    left is killed as `--now` kills it, and the stop is recorded unless the attempt
    already recorded its end (or completes a record a killed writer left half done: state
    first, then the journal). NoLiveRun only when nothing of the run was alive and its
    end was already recorded: never while a process of the run lives."""
    kill_grace = view.stop.kill_grace if kill_grace is None else kill_grace
    result = force(rd, kill_grace, fallback=False, view=view, origin=origin)
    result.elapsed = time.monotonic() - started
    if result.found == 0 and result.recorded_by in _ENDED:  # ablate: stop-total-dead-engine
        raise NoLiveRun(
            f"{rd.path}: no live engine, nothing of the run alive and its end already recorded (see `runner status`)"
        )
    return stop_result.without_engine(view, result)


def stop_graceful(rd: RunDir, *, origin: Origin = Origin.FILE) -> StopResult:
    """`runner stop --graceful`: lodge a graceful request (file channel; `origin` names
    a caller other than the CLI) for the engine to honor at its next graceful check point."""
    refuse_copy(rd)
    if not rd.is_live():
        raise NoLiveRun(f"{rd.path}: no live engine")
    try:
        request = stop_request.lodge(rd, Mode.GRACEFUL, origin)
    except Unwritable as exc:  # nothing was asked of the engine: not a stop that went unrecorded
        raise ControlFileError(
            f"{exc}: the graceful stop is not lodged (`runner stop` still reaches the engine by signal)"
        ) from None
    return stop_result.graceful_lodged(rd.run_id, request.mode == Mode.HARD)

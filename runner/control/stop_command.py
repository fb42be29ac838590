"""`runner stop`: the hard stop, the graceful stop and `--now`.

The request is always lodged before any signal is sent, so the engine can tell where
the stop came from and a stop still lands when no signal is delivered at all (the
file channel). While the engine lives, only the engine writes `stopped`: a stopper
records a stop only after proving the engine dead, and only if the engine did not.

Its classes are plain (values.py), not dataclasses: importing and applying dataclasses cost
every stop command 74 M of its 205 M start-up instructions (valgrind), about 20 ms.
"""

from __future__ import annotations

import fcntl
import os
import select
import signal
import time

from runner import defaults
from runner.control import run_view
from runner.errors import (
    DISK_ERRNOS,
    ControlFileError,
    CopyOfRun,
    Crashed,
    Damaged,
    NoLiveRun,
    OtherPidNamespace,
    RunLocked,
    Unwritable,
)
from runner.events import STOP_SIGNALS, Event, Mode, Origin
from runner.exitcodes import Exit
from runner.files import stop_request, untrusted
from runner.files.journal import Journal, read_attempt, stop_recorded
from runner.files.reserve import Reserve
from runner.files.rundir import RunDir, copy_line, refuse_copy
from runner.files.state import State, StateStore
from runner.proc import identity, reaper, signals, sweep
from runner.proc.membership import Membership
from runner.values import Value

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up cost, see log.py)

if TYPE_CHECKING:
    from typing import Any

    from runner.control.run_view import RunView
    from runner.files.rundir import EngineLock
    from runner.ident import Identity
    from runner.proc.reaper import ReapReport
    from runner.proc.vanished import Vanished


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


def wait_engine_gone(engine: Identity, timeout: float) -> bool:
    """Wait until the engine process is gone (a zombie counts as gone). Event-driven
    on Linux: a pidfd becomes readable when the process exits, child of ours or not."""
    deadline = time.monotonic() + timeout
    fd: int | None = None
    try:
        fd = os.pidfd_open(engine.pid)
    except (AttributeError, OSError):
        fd = None
    try:
        # The pidfd is only ours to trust once the start time still matches.
        if not identity.is_running(engine):
            return True
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return not identity.is_running(engine)
            if fd is not None:
                select.select([fd], [], [], left)
                if not identity.is_running(engine):
                    return True
            else:
                time.sleep(min(0.02, left))
                if not identity.is_running(engine):
                    return True
    finally:
        if fd is not None:
            os.close(fd)


def _not_a_copy(view: RunView) -> RunView:
    """The view, unless its directory is a copy of a run: then CopyOfRun, before anything
    is signalled or written (the copy's files name another directory's processes)."""
    if view.copy is not None:
        raise CopyOfRun(view.copy)
    return view


def _acting_on(view: RunView) -> RunView:
    """The view a signalling stop acts on: not a copy's, and not of a run in a pid
    namespace this process cannot see into (OtherPidNamespace, nothing signalled)."""
    view = _not_a_copy(view)
    if view.elsewhere is not None:
        raise OtherPidNamespace(view.elsewhere)
    return view


def _membership(view: RunView) -> Membership:
    return Membership(view.key, view.cgroup.relative if view.cgroup else None)


def kill_leftovers(rd: RunDir, kill_grace: float) -> tuple[ReapReport, RunView]:
    """Kill what a dead engine's attempt left running: its calls (recorded in
    children/), whatever carries the run's tag, and its cgroup's work members. Resume
    runs this first, so an orphaned call never works on an item beside its replay.
    Returns the reaper's report and the run's view (what was damaged)."""
    view = _not_a_copy(run_view.view(rd, wait_for_engine=False))
    children = view.children
    report = reaper.kill_everything(
        groups=[(child.pgid, [child]) for child in children],
        pids=children,
        run_id=view.key,
        kill_grace=kill_grace,
        cgroup=view.cgroup,
        cgroup_scope="work",
    )
    return report, view


class _StopLock:
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
            fd = untrusted.open_regular(self._rd.path / "stop.lock", flags=os.O_RDWR | os.O_CREAT)
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


def _who_recorded(rd: RunDir, state: State) -> str | None:
    """ "engine" or "other" (another stopper) when this attempt's stop is already
    recorded: stopped in state.json and its run-stop journaled."""
    # The current attempt's records only, and a bounded tail of them (journal.stop_recorded,
    # read from the journal's end): the previous attempt's `run-stop` never counts for this one.
    if state.stopped and stop_recorded(rd.journal):
        return "engine" if state.stop_origin != Origin.FORCED else "other"
    return None


def _recorded_by_someone(rd: RunDir) -> str | None:
    try:
        state = StateStore(rd.state).load()
    except Damaged:
        return None
    return _who_recorded(rd, state)


def _force_bound(kill_grace: float) -> float:
    """How long a stopper waits for another one that is forcing: its whole forced stop."""
    return kill_grace + 2 * defaults.CONFIRM_TIMEOUT + defaults.LOCK_WAIT


def _recording_lock(rd: RunDir) -> EngineLock:
    """The engine lock, taken by a stopper that records a stop. Holding it proves the
    engine dead and keeps two stoppers from both recording (two `run-stop`s)."""
    deadline = time.monotonic() + defaults.LOCK_WAIT
    while True:
        try:
            return rd.acquire_lock()
        except RunLocked:
            if time.monotonic() > deadline:
                raise
            time.sleep(defaults.FILE_POLL)


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
    view = _acting_on(view or run_view.view(rd))
    kill_grace = view.stop.kill_grace if kill_grace is None else kill_grace
    # One forcing stopper at a time: a second one runs after the first has recorded the
    # stop, kills what may be left (usually nothing), and reports who recorded it.
    with _StopLock(rd, view, _force_bound(kill_grace)):
        return _force_locked(rd, kill_grace, fallback, view, started, origin)


def _force_locked(
    rd: RunDir, kill_grace: float, fallback: bool, view: RunView, started: float, origin: Origin | None
) -> StopResult:
    engine, children = view.engine, view.children
    engine_ours = (
        engine is not None
        and identity.is_running(engine)
        and _membership(view).proof(engine.pid, engine.start_ticks) is not None
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
            recorded_by = _record_forced_stop(rd, report, fallback, origin)
        except Unwritable as exc:  # ablate: unrecorded-stop-reported
            unrecorded = exc
        except (Damaged, RunLocked) as exc:
            view.note(exc)
        if view.cgroup is not None and not unkillable:
            try:
                view.cgroup.remove()
            except OSError:
                pass  # still populated (an unkillable member) or removed by the engine
    result = _forced_result(view, report, unkillable, recorded_by, fallback, started, unrecorded)
    result.found = found
    return result


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


def _forced_result(
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


def _engine_gone(rd: RunDir, view: RunView) -> bool:
    """No engine of this run is left: the lock is free (or, with the lock damaged, no
    process carries the run's tag)."""
    try:
        return not rd.is_live()
    except Damaged:
        return not (view.key and sweep.tagged(view.key))


def unproven_children(rd: RunDir) -> list[str]:
    """What this attempt's engine journaled as its unproven children ("pid N (name)")."""
    try:
        # The engine's last records: a bounded read, as every stopper's (journal.py).
        records = read_attempt(rd.journal, defaults.STOP_JOURNAL_TAIL_BYTES)
    except (Damaged, OSError):
        return []
    out: list[str] = []
    for rec in records:
        if rec.get("event") == Event.UNPROVEN_CHILDREN:
            pids, names = rec.get("pids"), rec.get("names")
            if isinstance(pids, list) and isinstance(names, list):
                out += [f"pid {p} ({n})" for p, n in zip(pids, names, strict=False) if isinstance(p, int)]
    return out


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
        view = _not_a_copy(run_view.view(rd))
        try:
            stop_request.lodge(rd, Mode.HARD, origin)
        except (ControlFileError, Damaged) as exc:
            view.note(exc)  # no request file: the kill needs none
    return force(rd, kill_grace, fallback=False, view=view, origin=origin)


def _record_forced_stop(rd: RunDir, report: ReapReport, fallback: bool, origin: Origin | None = None) -> str:
    """Record a stop the engine did not record, once. Returns who recorded it:
    "engine" (it did, itself), "other" (another stopper forced it first, e.g. a
    `--now` racing this `runner stop`), "finished" (the run had completed: nothing to
    record) or "stopper" (this call)."""
    # Neither half of the record is left to an interruption: SIGINT, SIGTERM and SIGHUP
    # wait until both are written (a SIGKILL between them leaves state.json stopped and
    # the journal without run-stop, which the next stopper completes, below).
    held = _hold_interrupts()  # ablate: record-uninterrupted
    try:
        return _record_locked(rd, report, fallback, origin)
    except OSError as exc:
        if exc.errno not in DISK_ERRNOS:
            raise
        raise Unwritable.of(exc.filename or rd.state, exc) from None
    finally:
        _release_interrupts(held)


def _hold_interrupts() -> tuple[list[int], dict[int, Any]] | None:
    """Handlers that note an interrupt instead of acting on it, until released. Python
    runs every signal handler in the main thread, whichever thread the kernel hands the
    signal to, so a signal mask (per thread) would not hold it in a process with threads
    (the dashboard's, a test runner's). In another thread (signal.signal refuses there)
    nothing is needed: no interrupt is ever raised in it."""
    noted: list[int] = []
    old: dict[int, Any] = {}
    try:
        for signum in STOP_SIGNALS:
            old[signum] = signal.signal(signum, lambda s, f: noted.append(s))
    except ValueError:
        return None
    return noted, old


def _release_interrupts(held: tuple[list[int], dict[int, Any]] | None) -> None:
    """The handlers back, then each interrupt that came meanwhile, delivered to them."""
    if held is None:
        return
    noted, old = held
    for signum, handler in old.items():
        if handler is not None:
            signal.signal(signum, handler)
    for signum in dict.fromkeys(noted):
        signal.raise_signal(signum)


def _record_locked(rd: RunDir, report: ReapReport, fallback: bool, origin: Origin | None) -> str:
    # The engine is dead (this stopper holds its lock): a reserve it left behind is
    # this stopper's to give up, should the disk be full (reserve.py).
    spare = Reserve.leftover(rd.path)  # ablate: stopper-leftover-reserve
    with _recording_lock(rd):
        store = StateStore(rd.state, spare)
        state = store.load()
        prior = _who_recorded(rd, state)
        if prior is not None:
            return prior
        if state.status in ("completed", "failed") and not state.stopped:
            return "finished"
        # Not stopped, or stopped by an engine that died before journaling it: this
        # stopper records the stop (and the one run-stop of the attempt).
        if not state.stopped:
            state.stopped = True
            state.status = "stopped"
            state.stop_origin = Origin.FORCED.value
            state.exit_code = int(Exit.STOPPED)
            state.updated = time.time()
            store.save(state)
        with Journal(rd.journal, spare) as journal:
            journal.append(
                Event.RUN_STOP,
                origin=origin or Origin.FORCED,
                mode=Mode.HARD.label,
                forced=True,
                fallback=fallback,
                died_at_term=sorted(report.died_at_term),
                needed_kill=sorted(report.needed_kill),
                unkillable=sorted(report.unkillable),
                left_running=sorted(report.left_running),
            )
        return "stopper"


def stop_hard(
    rd: RunDir,
    *,
    channel: str | None = None,
    grace: float | None = None,
    kill_grace: float | None = None,
    origin: Origin | None = None,
) -> StopResult:
    """`runner stop` (see _stop_hard), with the engine's unproven children named."""
    result = _stop_hard(rd, channel=channel, grace=grace, kill_grace=kill_grace, origin=origin)
    return _with_unproven(rd, result)


def _stop_hard(
    rd: RunDir,
    *,
    channel: str | None = None,
    grace: float | None = None,
    kill_grace: float | None = None,
    origin: Origin | None = None,
) -> StopResult:
    """`runner stop`: lodge, signal (signal channel), wait up to grace for the engine's
    own teardown, and only then fall back to the force-kill. With a damaged run
    directory (no engine to signal, no request file to write) it goes straight on to
    the force-kill, which needs neither. The request names the channel, or `origin`
    where the caller names itself (the dashboard)."""
    started = time.monotonic()
    view = _acting_on(run_view.view(rd))
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
    members = _membership(view)
    if engine is not None and members.proof(engine.pid, engine.start_ticks) is None:
        engine = None  # not proven the run's: never signalled, never waited for; force decides
    gone = engine is None
    if engine is not None:
        if use_signal:
            signals.signal_process(engine, signal.SIGTERM, members)
        gone = wait_engine_gone(engine, grace)
    if gone and engine is not None:
        # Gone within grace: the engine honored the stop, or a concurrent `--now` killed
        # it. Wait for any stopper that is forcing to finish recording before reading.
        with _StopLock(rd, view, _force_bound(view.stop.kill_grace)):
            pass
        if _recorded_by_someone(rd) == "other":
            elapsed = time.monotonic() - started
            return StopResult(
                view.ok_code,
                f"run {view.run_id} stopped by another stopper in {elapsed:.3f}s",
                elapsed,
                recorded_by="other",
                damaged=view.damaged,
                unwritten=view.unwritten,
            )
        try:
            state = StateStore(rd.state).load()
        except Damaged as exc:
            view.note(exc)
            state = None
        elapsed = time.monotonic() - started
        if state is not None and state.stopped:
            return StopResult(
                view.ok_code,
                f"run {view.run_id} stopped by its engine (origin {state.stop_origin}) in {elapsed:.3f}s",
                elapsed,
                damaged=view.damaged,
                unwritten=view.unwritten,
            )
        if state is not None and state.status in ("completed", "failed"):
            return StopResult(
                view.ok_code,
                f"run {view.run_id} had already {state.status}; the stop arrived late",
                elapsed,
                damaged=view.damaged,
                unwritten=view.unwritten,
            )
    kill_grace = view.stop.kill_grace if kill_grace is None else kill_grace
    result = force(rd, kill_grace, fallback=True, view=view, origin=origin)
    result.elapsed = time.monotonic() - started
    if result.recorded_by == "engine":
        # The engine recorded its own stop while the fallback ran: it honored it, late.
        result.message = f"engine honored the stop after grace {grace}s: {result.message}"
    elif result.recorded_by == "other":
        result.message = f"another stopper stopped the run first: {result.message}"
    elif result.code == Exit.STOP_FORCED:
        result.message = f"engine did not honor the stop within grace {grace}s; force-killed: {result.message}"
    elif result.code == Exit.NOT_RECORDED and gone and engine is not None:
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


def complete_record(rd: RunDir, journal: Journal, state: State) -> bool:
    """The attempt's stop half recorded (state.json stopped, the writer killed before its
    run-stop): journal the run-stop it lacks, marked `completed`, so that state.json and
    the journal agree before anything else happens to the run (`runner resume` calls
    this before it opens a new attempt). True if one was written."""
    if not state.stopped or stop_recorded(rd.journal):
        return False
    origin = state.stop_origin or Origin.UNKNOWN.value
    journal.append(
        Event.RUN_STOP,
        origin=origin,
        mode=Mode.HARD.label,
        forced=origin == Origin.FORCED.value,
        fallback=False,
        completed=True,
    )
    return True


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
    if result.found == 0 and result.recorded_by in ("engine", "other", "finished"):  # ablate: stop-total-dead-engine
        raise NoLiveRun(
            f"{rd.path}: no live engine, nothing of the run alive and its end already recorded (see `runner status`)"
        )
    if result.recorded_by == "stopper" and result.found == 0:
        result.message = (
            f"run {view.run_id}: its engine was dead and nothing of the run was alive; the stop is recorded "
            "(`runner resume` continues the run)"
        )
    else:
        result.message = f"its engine was dead: {result.message}"
    return result


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
    if request.mode == Mode.HARD:
        return StopResult(Exit.OK, f"a hard stop is already pending for run {rd.run_id}; it is not downgraded", 0.0)
    return StopResult(
        Exit.OK, f"graceful stop lodged for run {rd.run_id}: the phase in flight completes, then the run stops", 0.0
    )


def wait_run(rd: RunDir, timeout: float | None = None) -> Exit:
    """Block until the run's engine is gone; return the run's own exit code."""
    view = _not_a_copy(run_view.view(rd))
    engine = run_view.require_engine(view)
    if identity.is_running(engine) and _membership(view).proof(engine.pid, engine.start_ticks) is None:
        # engine.json names a live process that is not this directory's run: waiting on
        # it would report another run's end as this one's.
        raise NoLiveRun(f"{rd.engine_identity}: not the run's engine ({_membership(view).why_not(engine.pid)})")
    while not wait_engine_gone(engine, defaults.WAIT_SLICE if timeout is None else timeout):
        if timeout is not None:
            raise NoLiveRun(f"{rd.path}: still running after {timeout}s")
    return run_outcome(rd)


def run_outcome(rd: RunDir) -> Exit:
    """The code of a run whose engine is gone, from its state: its own exit code; STOPPED
    for a recorded stop; CRASHED when the engine died without recording an end (SIGKILL,
    out of memory), which `runner resume` continues. A damaged state raises Damaged."""
    state = StateStore(rd.state).load()
    if state.exit_code is not None and state.exit_code in Exit._value2member_map_:
        return Exit(state.exit_code)
    if state.stopped:
        return Exit.STOPPED
    raise Crashed(
        f"run {state.run_id}: its engine died without recording how the run ended "
        f"(status {state.status!r}); `runner resume` continues it"
    )


# -- every run at once ---------------------------------------------------------------

_WORST_FIRST = (
    Exit.INTERNAL,
    Exit.UNKILLABLE,
    Exit.OTHER_PID_NAMESPACE,
    Exit.NOT_RECORDED,
    Exit.STOP_FORCED,
    Exit.DAMAGED,
    Exit.NO_LIVE_RUN,
    Exit.BAD_INPUT,
)
"""Which code `stop --all` exits with when runs disagree: the first of these that any run
gave (a run left alive outranks a damaged file, which outranks a run already gone)."""


def stop_vanished(v: Vanished, kill_grace: float = defaults.KILL_GRACE) -> tuple[Exit, list[str]]:
    """A live engine whose run directory is gone (vanished.py): no file to lodge a stop
    in or record it, so the run is killed as `--now` would, proven by its tag and its
    cgroup (the only membership left), and said on one line."""
    from runner.proc.cgroup import RunCgroup, run_cgroup_path

    path = run_cgroup_path(v.key)
    cgroup = RunCgroup(path) if path is not None and path.is_dir() else None
    report = reaper.kill_everything(
        groups=[(v.engine.pgid, [v.engine])],
        pids=[v.engine],
        run_id=v.key,
        kill_grace=kill_grace,
        cgroup=cgroup,
        cgroup_scope="all" if cgroup is not None else None,
    )
    if cgroup is not None and not report.unkillable:
        for sub in (cgroup.path / "work", cgroup.path / "engine", cgroup.path):
            try:
                sub.rmdir()  # the engine that would have removed it is dead
            except OSError:
                pass
    line = (
        f"run {v.run_id} (its directory {v.run_dir} is gone) killed"
        f" ({len(report.died_at_term)} died at SIGTERM, {len(report.needed_kill)} needed SIGKILL,"
        f" in {report.elapsed:.3f}s); nothing could be recorded"
    )
    if report.unkillable:
        return Exit.UNKILLABLE, [line + f"; still alive: {' '.join(map(str, report.unkillable))}"]
    return Exit.OK, [line]


def stop_every(base: str | os.PathLike[str], mode: str) -> tuple[Exit, list[str]]:
    """`runner stop --all`: every live run under `base`, from this one process, all at
    once: each run gets the very stop its own `runner stop` would (stop_hard, stop_now or
    stop_graceful) in a thread of its own, so that 50 runs cost one kill grace, not 50,
    and one interpreter start, not 50. A run whose lock cannot be read counts as live.
    Returns the exit code and the lines to print."""
    from collections.abc import Callable
    from concurrent.futures import ThreadPoolExecutor

    from runner.errors import RunnerError
    from runner.files.rundir import list_runs
    from runner.proc import vanished

    def live(rd: RunDir) -> bool:
        if copy_line(rd) is not None:
            return False  # a copy is not a run: never stopped (`list` shows it)
        try:
            return rd.is_live()
        except Damaged:
            return True

    runs = [rd for rd in list_runs(base) if live(rd)]
    gone = vanished.engines(base)
    if not runs and not gone:
        raise NoLiveRun(f"no live run under {base}")
    stops: dict[str, Callable[[RunDir], StopResult]] = {
        "hard": stop_hard,
        "now": stop_now,
        "graceful": stop_graceful,
    }
    stop = stops[mode]

    def one(rd: RunDir) -> tuple[Exit, list[str]]:
        try:
            result = stop(rd)
        except RunnerError as exc:  # gone meanwhile, or damaged past reading: its line, the rest go on
            return exc.exit_code, [f"{rd.path}: {exc}"]
        return result.code, result.lines()

    with ThreadPoolExecutor(max_workers=min(defaults.MAX_STOPPERS, len(runs) + len(gone))) as pool:
        lost = pool.map(stop_vanished, gone)
        outcomes = list(pool.map(one, runs))  # ablate: stop-all-at-once
        outcomes += list(lost)
    codes = {code for code, _ in outcomes}
    code = next((c for c in _WORST_FIRST if c in codes), Exit.OK)
    return code, [line for _, lines in outcomes for line in lines]

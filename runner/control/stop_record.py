"""A stopper's record of a stop: once the engine is proven dead (the stopper holds the
run's lock: the recording lock, control/stop.py says why), only if nobody recorded it,
written by the one writer (files/stopped.py), and neither half (state.json, the
journal's run-stop) left to an interruption; a half a killed writer left is completed
before anything else happens to the run."""

from __future__ import annotations

import errno
import signal
import time

from runner import defaults
from runner.control.stop_result import RecordedBy
from runner.errors import DISK_ERRNOS, Damaged, RunLocked, Unwritable
from runner.events import STOP_SIGNALS, Event, Origin
from runner.files import dirfd
from runner.files.journal import Journal, read_attempt, stop_recorded
from runner.files.rundir import RunDir
from runner.files.state import State, StateStore  # ablate: stop-record-writer-lazy
from runner.proc.reaper import ReapReport

# The record's writer (files/stopped.py) and the engine's reserve are imported by the
# steps that write (_record_locked, complete_record), not here: the usual stop, whose
# engine recorded it, never loads them (its start-up is part of the stop's latency;
# tests/runner/test_stop_imports.py guards the stop command's import set).

TYPE_CHECKING = False

if TYPE_CHECKING:
    from typing import Any

    from runner.files.rundir import EngineLock


def who_recorded(rd: RunDir, state: State) -> RecordedBy | None:
    """ENGINE or OTHER (another stopper) when this attempt's stop is already recorded:
    stopped in state.json and its run-stop journaled."""
    # The current attempt's records only, and a bounded tail of them (journal.stop_recorded,
    # read from the journal's end): the previous attempt's `run-stop` never counts for this one.
    if state.stopped and stop_recorded(rd.journal):  # ablate: one-record-per-attempt
        return RecordedBy.ENGINE if state.stop_origin != Origin.FORCED else RecordedBy.OTHER
    return None


def _recording_lock(rd: RunDir) -> EngineLock:
    """The run's lock, taken by a stopper that records a stop: holding it proves the
    engine dead and keeps two stoppers from both recording (two `run-stop`s). Waited for
    LOCK_WAIT at most: past it, RunLocked (the holder records, or a later stop does)."""
    deadline = time.monotonic() + defaults.LOCK_WAIT
    while True:
        try:
            return rd.acquire_lock()
        except RunLocked:
            if time.monotonic() > deadline:  # ablate: record-lock-bounded
                raise
            time.sleep(defaults.FILE_POLL)


def record_forced_stop(
    rd: RunDir, report: ReapReport | None, fallback: bool, origin: Origin | None = None, kind: str | None = None
) -> tuple[RecordedBy, State | None]:
    """Record a stop the engine did not record, once. Returns who recorded it, with the
    attempt's state as read under the lock: ENGINE (it did, itself), OTHER (another
    stopper first), FINISHED (the run had completed: nothing to record) or STOPPER (this
    call). Unwritable when the file system refuses; RunLocked when another holder keeps
    the run's lock past LOCK_WAIT. `kind`: the StopKind's name, journaled so that a
    person is told which command stopped the run (`--now`, or a plain stop that found
    the engine dead: both are `forced`)."""
    # A record is never taken back: one seen without the lock is the attempt's, and this
    # stopper need not take the run's lock (which makes the run look live to every reader
    # while it is held) only to read it again.
    try:
        state = StateStore(rd.state).load()
    except Damaged:
        state = None
    prior = who_recorded(rd, state) if state is not None else None
    if prior is not None:
        return prior, state
    # Neither half of the record is left to an interruption: SIGINT, SIGTERM and SIGHUP
    # wait until both are written (a SIGKILL between them leaves state.json stopped and
    # the journal without run-stop, which the next stopper completes, below).
    held = _hold_interrupts()  # ablate: record-uninterrupted
    try:
        return _record_locked(rd, report, fallback, origin, kind)
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


def _record_locked(
    rd: RunDir, report: ReapReport | None, fallback: bool, origin: Origin | None, kind: str | None = None
) -> tuple[RecordedBy, State | None]:
    from runner.files.reserve import Reserve
    from runner.files.stopped import record_stop

    # The engine is dead (this stopper holds its lock): a reserve it left behind is
    # this stopper's to give up, should the disk be full (reserve.py).
    spare = Reserve.leftover(rd.path)  # ablate: stopper-leftover-reserve
    if dirfd.gone(rd.path):
        # Removed or half removed since the stopper looked: nothing is recorded there, and
        # no `lock` is made (a file made while `rm -rf` empties it would make rm fail).
        raise FileNotFoundError(errno.ENOENT, "the run directory went away", str(rd.path))
    with _recording_lock(rd):
        store = StateStore(rd.state, spare)
        state = store.load()
        prior = who_recorded(rd, state)
        if prior is not None:
            return prior, state
        if state.status in ("completed", "failed") and not state.stopped:
            return RecordedBy.FINISHED, state
        # Not stopped, or stopped by an engine that died before journaling it: this
        # stopper records the stop (and the one run-stop of the attempt).
        r = report if report is not None else ReapReport()
        said_kind = kind  # ablate: stop-record-kind
        with Journal(rd.journal, spare) as journal:
            record_stop(
                state,
                store.save,
                journal,
                origin=origin or Origin.FORCED,
                forced=True,
                fallback=fallback,
                died_at_term=sorted(r.died_at_term),
                needed_kill=sorted(r.needed_kill),
                unkillable=sorted(r.unkillable),
                left_running=sorted(r.left_running),
                kind=said_kind,
            )
        return RecordedBy.STOPPER, state


def complete_record(rd: RunDir, journal: Journal, state: State) -> bool:
    """The attempt's stop half recorded (state.json stopped, the writer killed before its
    run-stop): journal the run-stop it lacks, marked `completed`, so that state.json and
    the journal agree before anything else happens to the run (`runner resume` calls
    this before it opens a new attempt). True if one was written."""
    if not state.stopped or stop_recorded(rd.journal):
        return False
    from runner.files.stopped import record_stop

    origin = state.stop_origin or Origin.UNKNOWN.value
    record_stop(
        state, StateStore(rd.state).save, journal, origin=origin, forced=origin == Origin.FORCED.value, completed=True
    )
    return True


def engine_left(rd: RunDir) -> list[int]:
    """The pids this attempt's engine journaled as outliving its own kill (left running,
    unkillable): proven the run's then."""
    try:
        # The engine's last records: a bounded read, as every stopper's (journal.py).
        records = read_attempt(rd.journal, defaults.STOP_JOURNAL_TAIL_BYTES)
    except (Damaged, OSError):
        return []
    out: list[int] = []
    for rec in records:
        pids = rec.get("pids")
        if rec.get("event") in (Event.LEFT_RUNNING, Event.UNKILLABLE) and isinstance(pids, list):
            out += [p for p in pids if isinstance(p, int) and not isinstance(p, bool)]
    return out

"""The forced-stop record: a stopper records a stop only once the engine is proven dead
(it holds the engine's lock) and only if the engine did not; neither half (state.json,
the journal's run-stop) is left to an interruption, and a half a killed stopper left is
completed before anything else happens to the run."""

from __future__ import annotations

import signal
import time

from runner import defaults
from runner.control.stop_result import RecordedBy
from runner.errors import DISK_ERRNOS, Damaged, RunLocked, Unwritable
from runner.events import STOP_SIGNALS, Event, Mode, Origin
from runner.exitcodes import Exit
from runner.files.journal import Journal, read_attempt, stop_recorded
from runner.files.reserve import Reserve
from runner.files.rundir import RunDir
from runner.files.state import State, StateStore

TYPE_CHECKING = False

if TYPE_CHECKING:
    from typing import Any

    from runner.files.rundir import EngineLock
    from runner.proc.reaper import ReapReport


def _who_recorded(rd: RunDir, state: State) -> RecordedBy | None:
    """ "engine" or "other" (another stopper) when this attempt's stop is already
    recorded: stopped in state.json and its run-stop journaled."""
    # The current attempt's records only, and a bounded tail of them (journal.stop_recorded,
    # read from the journal's end): the previous attempt's `run-stop` never counts for this one.
    if state.stopped and stop_recorded(rd.journal):
        return RecordedBy.ENGINE if state.stop_origin != Origin.FORCED else RecordedBy.OTHER
    return None


def recorded_by_someone(rd: RunDir) -> RecordedBy | None:
    try:
        state = StateStore(rd.state).load()
    except Damaged:
        return None
    return _who_recorded(rd, state)


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


def record_forced_stop(rd: RunDir, report: ReapReport, fallback: bool, origin: Origin | None = None) -> RecordedBy:
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


def _record_locked(rd: RunDir, report: ReapReport, fallback: bool, origin: Origin | None) -> RecordedBy:
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
            return RecordedBy.FINISHED
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
        return RecordedBy.STOPPER


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

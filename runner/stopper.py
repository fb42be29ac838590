"""`runner stop`: the hard stop, the graceful stop and `--now`.

The request is always lodged before any signal is sent, so the engine can tell where
the stop came from and a stop still lands when no signal is delivered at all (the
file channel). While the engine lives, only the engine writes `stopped`: a stopper
records a stop only after proving the engine dead, and only if the engine did not.
"""

import os
import select
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import control, identity, journal as journalmod, reaper, signals
from .cgroup import RunCgroup
from .errors import NoLiveRun, RunLocked
from .exitcodes import Exit
from .state import StateStore


@dataclass
class StopResult:
    code: Exit
    message: str
    elapsed: float
    unkillable: list = field(default_factory=list)
    recorded_by: str | None = None


def wait_engine_gone(engine, timeout):
    """Wait until the engine process is gone (a zombie counts as gone). Event-driven
    on Linux: a pidfd becomes readable when the process exits, child of ours or not."""
    deadline = time.monotonic() + timeout
    fd = None
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


IDENTITY_WAIT = 5.0
"""How long a stopper waits for a starting engine to write its identity: the engine
takes its lock first and writes engine.json last, once a SIGTERM is a clean stop."""
LOCK_WAIT = 5.0
"""How long a stopper waits for another stopper that is recording its stop."""


def _engine(rd):
    deadline = time.monotonic() + IDENTITY_WAIT
    while True:
        try:
            return identity.read(rd.engine_identity)
        except FileNotFoundError:
            if not rd.is_live() or time.monotonic() > deadline:
                raise NoLiveRun(f"{rd.engine_identity}: no engine identity (the engine never "
                                f"started, or is starting)") from None
            time.sleep(0.01)


def _children(rd):
    """Identities of the live calls. The engine removes a call's file when the call
    ends, so a file may vanish between the listing and the read: it is skipped."""
    found = []
    for path in sorted(rd.children.glob("*.json")) if rd.children.is_dir() else ():
        try:
            found.append(identity.read(path))
        except FileNotFoundError:
            continue
    return found


def _attempt_records(rd):
    """Journal records of the current attempt: after the last `resume` (journaled by
    `runner resume` before its engine starts) or `run-start`, whichever is later, so
    that the previous attempt's `run-stop` never counts for this one."""
    records = []
    for record in journalmod.read(rd.journal):
        if record.get("event") in ("run-start", "resume"):
            records = []
        records.append(record)
    return records


def _open_cgroup(rd):
    if not rd.cgroup_file.exists():
        return None
    try:
        return RunCgroup.open(Path(rd.cgroup_file.read_text().strip()))
    except FileNotFoundError:
        return None  # the engine removed it on its way out


def kill_leftovers(rd, kill_grace):
    """Kill what a dead engine's attempt left running: its calls (recorded in
    children/), whatever carries the run's tag, and its cgroup's work members. Resume
    runs this first, so an orphaned call never works on an item beside its replay."""
    children = _children(rd)
    return reaper.kill_everything(groups=[(child.pgid, [child]) for child in children],
                                  pids=children, run_id=rd.run_id, kill_grace=kill_grace,
                                  cgroup=_open_cgroup(rd), cgroup_scope="work")


def _recording_lock(rd):
    """The engine lock, taken by a stopper that records a stop. Holding it proves the
    engine dead and keeps two stoppers from both recording (two `run-stop`s)."""
    deadline = time.monotonic() + LOCK_WAIT
    while True:
        try:
            return rd.acquire_lock()
        except RunLocked:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def force(rd, kill_grace, *, fallback):
    """The immediate stop: every group of the run and the engine's pid at once, SIGKILL
    after kill_grace, then the tag sweep and the cgroup kill (reaper.kill_everything).
    Records the stop only once the engine is proven dead, and only if it did not."""
    started = time.monotonic()
    engine = _engine(rd)
    children = _children(rd)
    groups = [(engine.pgid, [engine])] + [(child.pgid, [child]) for child in children]
    cgroup = _open_cgroup(rd)
    report = reaper.kill_everything(groups=groups, pids=[engine, *children], run_id=rd.run_id,
                                    kill_grace=kill_grace, cgroup=cgroup)
    unkillable = sorted(set(report.unkillable))
    recorded = None
    if identity.is_running(engine):
        unkillable = sorted(set(unkillable) | {engine.pid})
    else:
        recorded = _record_forced_stop(rd, report, fallback)
        if cgroup is not None and not unkillable:
            cgroup.remove()
    elapsed = time.monotonic() - started
    if unkillable:
        return StopResult(Exit.UNKILLABLE, f"stop could not kill pids {unkillable} "
                          f"(uninterruptible sleep?); they are named in the journal", elapsed, unkillable)
    killed = (f"{len(report.died_at_term)} died at SIGTERM, {len(report.needed_kill)} needed SIGKILL, "
              f"in {elapsed:.3f}s")
    if recorded == "finished":
        return StopResult(Exit.OK, f"run {rd.run_id} had already finished; nothing to record ({killed})",
                          elapsed, recorded_by=recorded)
    if recorded == "engine":
        return StopResult(Exit.OK, f"run {rd.run_id} stopped by its engine ({killed})", elapsed,
                          recorded_by=recorded)
    return StopResult(Exit.STOP_FORCED if fallback else Exit.OK, f"run {rd.run_id} killed ({killed})",
                      elapsed, recorded_by=recorded)


def _record_forced_stop(rd, report, fallback):
    """Record a stop the engine did not record, once. Returns who recorded it:
    "engine" (it did, itself), "finished" (the run had completed: nothing to record)
    or "stopper" (this call)."""
    with _recording_lock(rd):
        store = StateStore(rd.state)
        state = store.load()
        journaled = any(r.get("event") == "run-stop" for r in _attempt_records(rd))
        if state.stopped and journaled:
            return "engine" if state.stop_origin != "forced" else "stopper"
        if state.status in ("completed", "failed") and not state.stopped:
            return "finished"
        # Not stopped, or stopped by an engine that died before journaling it: this
        # stopper records the stop (and the one run-stop of the attempt).
        if not state.stopped:
            state.stopped = True
            state.status = "stopped"
            state.stop_origin = "forced"
            state.exit_code = int(Exit.STOPPED)
            state.updated = time.time()
            store.save(state)
        with journalmod.Journal(rd.journal) as journal:
            journal.append("run-stop", origin="forced", mode="hard", forced=True, fallback=fallback,
                           died_at_term=sorted(report.died_at_term),
                           needed_kill=sorted(report.needed_kill), unkillable=sorted(report.unkillable))
        return "stopper"


def stop_hard(rd, *, channel, grace, kill_grace):
    """`runner stop`: lodge, signal (signal channel), wait up to grace for the engine's
    own teardown, and only then fall back to the force-kill."""
    started = time.monotonic()
    if not rd.is_live():
        raise NoLiveRun(f"{rd.path}: no live engine (see `runner status`; `runner stop --now` "
                        f"kills what a dead engine left)")
    engine = _engine(rd)
    use_signal = channel in ("signal", "auto") and os.name == "posix"
    control.lodge(rd, control.Mode.HARD, "signal" if use_signal else "file")
    if use_signal:
        signals.signal_process(engine, signal.SIGTERM)
    gone = wait_engine_gone(engine, grace)
    if gone:
        state = StateStore(rd.state).load()
        elapsed = time.monotonic() - started
        if state.stopped:
            return StopResult(Exit.OK, f"run {rd.run_id} stopped by its engine "
                              f"(origin {state.stop_origin}) in {elapsed:.3f}s", elapsed)
        if state.status in ("completed", "failed"):
            return StopResult(Exit.OK, f"run {rd.run_id} had already {state.status}; "
                              f"the stop arrived late", elapsed)
    result = force(rd, kill_grace, fallback=True)
    result.elapsed = time.monotonic() - started
    if result.recorded_by == "engine":
        # The engine recorded its own stop while the fallback ran: it honored it, late.
        result.message = f"engine honored the stop after grace {grace}s: {result.message}"
    elif result.code == Exit.STOP_FORCED:
        result.message = (f"engine did not honor the stop within grace {grace}s; "
                          f"force-killed: {result.message}")
    return result


def stop_graceful(rd):
    if not rd.is_live():
        raise NoLiveRun(f"{rd.path}: no live engine")
    request = control.lodge(rd, control.Mode.GRACEFUL, "file")
    if request.mode == control.Mode.HARD:
        return StopResult(Exit.OK, f"a hard stop is already pending for run {rd.run_id}; "
                          f"it is not downgraded", 0.0)
    return StopResult(Exit.OK, f"graceful stop lodged for run {rd.run_id}: the phase in flight "
                      f"completes, then the run stops", 0.0)


def wait_run(rd, timeout=None):
    """Block until the run's engine is gone; return the run's own exit code."""
    engine = _engine(rd)
    while not wait_engine_gone(engine, 3600.0 if timeout is None else timeout):
        if timeout is not None:
            raise NoLiveRun(f"{rd.path}: still running after {timeout}s")
    state = StateStore(rd.state).load()
    if state.exit_code is None:
        return Exit.INTERNAL if not state.stopped else Exit.STOPPED
    return Exit(state.exit_code)

"""The life cycle of a run: start it, resume it, watch it in the foreground, read its
status. The CLI (cli.py) only parses arguments and prints; everything that happens to
a run between `runner run` and its engine's exit is here.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from runner import defaults
from runner.control import leftovers, run_view, stop, stop_record, waiting
from runner.errors import BadInput, Damaged, IdentityError, NoLiveRun, RunLocked
from runner.events import STOP_SIGNALS, Event, Mode, Origin
from runner.exitcodes import Exit
from runner.files import identity_file, ownership, stop_request, untrusted
from runner.files.journal import Journal
from runner.files.rundir import EngineLock, RunDir, copy_line, default_base, new_run_id, refuse_copy, resolve
from runner.files.spec import Spec, load_frozen
from runner.files.spec import load_bytes as load_spec_bytes
from runner.files.state import StateStore
from runner.proc import identity, membership, signals
from runner.proc.membership import Membership
from runner.views import overview, progress

if TYPE_CHECKING:
    from runner.ident import Identity

Say = Callable[[str], None]
"""How the life cycle tells the operator something, one line at a time (the CLI prints
it to stderr behind "runner: ")."""


class ChildStatus(TypedDict):
    """One live call of a run, as `runner status` shows it."""

    pid: int
    pgid: int
    name: object  # the call's recorded name, as its identity file holds it (None if unreadable)
    runtime: float | None  # seconds since it started


class RunStatus(TypedDict):
    """What status_of() returns: `runner status --json` prints it as it is. Every key is
    documented in docs/status-json.md (the web dashboard reads the same structure)."""

    version: int
    run_id: str | None
    run_dir: str
    live: bool | None
    engine_pid: int | None
    status: str
    attempt: int | None
    current_item: str | None
    phase: str | None
    stopped: bool
    stop_origin: str | None
    items: list[overview.ItemRow]
    provider_calls: int
    children: list[ChildStatus]
    damaged: list[str]
    started: float | None
    elapsed: float | None
    phase_started: float | None
    phase_elapsed: float | None
    pending_stop: dict[str, Any] | None
    paused: bool
    pause_held: bool
    containment: dict[str, Any] | None
    copy: str | None
    cause: str | None
    journal_skipped: int


def run(
    spec_path: str | os.PathLike[str],
    run_dir: str | os.PathLike[str] | None = None,
    *,
    detach: bool,
    say: Say,
    show: progress.Show | None = None,
    allow_foreign: bool = False,
) -> tuple[int, RunDir]:
    """`runner run`: validate the spec completely, freeze it into a new run directory,
    start the engine; detached, return once it is up, else wait for it (showing its
    progress on `show`, if given). A directory that is not this user's alone is refused
    (ownership.py) unless `allow_foreign`."""
    spec, raw = load_spec_bytes(spec_path)  # validated completely before anything starts
    if run_dir is not None:
        rd = RunDir(run_dir)
        if not (allow_foreign or ownership.allowed_by_env()):
            ownership.check(rd.path, creating_in=_nearest_existing(rd.path.parent))
        if rd.exists() and rd.is_live():
            raise RunLocked(f"{rd.path}: a live engine holds this run directory")
    else:
        rd = RunDir(default_base() / new_run_id())
        if not (allow_foreign or ownership.allowed_by_env()):
            ownership.check(rd.path, creating_in=_nearest_existing(rd.path.parent))
    rd = RunDir.create(rd.path, spec_path, data=raw, refuse_foreign=not (allow_foreign or ownership.allowed_by_env()))
    with rd.acquire_lock() as lock:
        return start_engine(rd, spec, detach, say, lock, show), rd


def _nearest_existing(path: Path) -> Path:
    """The directory `runner run` creates the run directory in: the nearest that exists
    (the ones it makes on the way are its own, 0700)."""
    while not path.exists() and path.parent != path:
        path = path.parent
    return path


def resume(
    run_dir: str | os.PathLike[str] | None = None,
    *,
    detach: bool,
    say: Say,
    show: progress.Show | None = None,
    allow_foreign: bool = False,
) -> tuple[int, RunDir]:
    """`runner resume`: a new attempt of a stopped or crashed run. What the dead attempt
    left running is killed first (only what is proven the run's), pending control files
    are archived, the dead attempt's identity files removed. Another user's directory is
    refused (ownership.py) unless `allow_foreign`."""
    if run_dir is not None:
        ownership.check_access(run_dir)
    rd = resolve(run_dir, want=resumable, what="resumable")
    if not (allow_foreign or ownership.allowed_by_env()):
        ownership.check(rd.path)
    # A copy is never resumed: its engine would run a second attempt of another
    # directory's run (the copy's key matches none of that run's processes, so its
    # leftovers could not even be found). Asked before the lock file is touched.
    refuse_copy(rd)
    # The engine lock is taken before anything is touched and handed to the new engine
    # (it inherits the locked descriptor): never released in between, so of two resumes
    # racing, exactly one prepares and starts an engine; the other is REFUSED.
    try:
        lock = rd.acquire_lock()
    except RunLocked:
        raise RunLocked(f"{rd.path}: an engine of this run is alive, or another resume is starting one") from None
    with lock:
        return _resume_locked(rd, lock, detach, say, show), rd


def _resume_locked(rd: RunDir, lock: EngineLock, detach: bool, say: Say, show: progress.Show | None) -> int:
    if rd.readopt_identity():
        say(
            f"{rd.path}: the run directory's identity was recorded in another boot or on another machine: recorded anew"
        )
    spec = load_frozen(rd.spec)
    store = StateStore(rd.state)
    state = store.load()
    if state.status in ("completed", "failed") and not state.stopped:
        raise BadInput(f"{rd.state}: status: expected a stopped or crashed run, got {state.status!r}")
    with Journal(rd.journal) as journal:  # closed on every way out, a refusal included
        stop_record.complete_record(rd, journal, state)
        for name in stop_request.archive_pending(rd):
            journal.append(Event.CONTROL_FILE_ARCHIVED, file=name, reason="resume")
        left, view = leftovers.kill_leftovers(rd, spec.stop.kill_grace)
        if left.died_at_term or left.needed_kill or left.unkillable:
            journal.append(
                Event.LEFTOVERS_KILLED,
                died_at_term=left.died_at_term,
                needed_kill=left.needed_kill,
                unkillable=left.unkillable,
            )
        if left.refused:
            journal.append(Event.SIGNAL_REFUSED, by="resume", refused=left.refused)
            say("refused to signal (not proven the run's): " + "; ".join(left.refused))
        # engine.json and the files in children/ are the dead attempt's: resume removes them
        # below, so their damage does not hold it up (nothing was signalled on their word).
        stale_idents = (f"{rd.engine_identity}:", f"{rd.children}/")
        blocking = [d for d in view.damaged if not d.startswith(stale_idents)]
        if blocking:
            raise Damaged(
                rd.path,
                "; ".join(blocking) + " (leftovers were killed; repair or remove these files, then resume again)",
            )
        # The previous attempt's identities name dead processes (or, later, someone else's):
        # a stopper must only ever find the new engine's, once it has written it. Removed by
        # name inside children/ (never through a link), whatever each one is.
        for stale in [rd.engine_identity, *(rd.children / n for n in untrusted.list_dir(rd.children))]:
            if stale.is_dir() and not stale.is_symlink():
                shutil.rmtree(stale)
            elif os.path.lexists(stale):
                stale.unlink()
        store.save(store.new_attempt(state))
        journal.append(Event.RESUME, attempt=state.attempt + 1)
    return start_engine(rd, spec, detach, say, lock, show)


def resumable(rd: RunDir) -> bool:
    """A run with no live engine whose last attempt was stopped or never finished."""
    if rd.is_live() or copy_line(rd) is not None:
        return False
    state = StateStore(rd.state).load_or_none()
    return state is not None and (state.stopped or state.status in ("stopped", "crashed", "running"))


def start_engine(
    rd: RunDir, spec: Spec, detach: bool, say: Say, lock: EngineLock, show: progress.Show | None = None
) -> int:
    """Start the engine with the run's tag in its initial environment, handing it the
    engine lock this command holds (the locked descriptor is inherited; the kernel's lock
    stays held by the engine when this command lets go of its copy)."""
    assert lock.fd is not None
    since = time.time()  # the progress shows this attempt's phases, not a resumed run's past
    key = rd.key(rd.run_id)
    if key is None:
        raise NoLiveRun(f"{rd.path}: the run directory is gone")
    env = {**os.environ, membership.TAG: key}
    # Never through a link, relative to the run directory's descriptor (dirfd.py).
    log_fd = untrusted.open_regular(rd.engine_log, flags=os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    with os.fdopen(log_fd, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "runner", "_engine", str(rd.path), "--lock-fd", str(lock.fd)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
            start_new_session=True,
            pass_fds=(lock.fd,),
        )
    lock.release()  # ours only: the engine's inherited copy holds the lock now
    engine = _await_engine(rd, proc)
    if engine is None:
        code = proc.wait()
        say(f"engine exited with {code} before it was up: {_log_tail(rd)}")
        return code if code > 0 else Exit.INTERNAL
    if detach:
        return Exit.OK
    watch = progress.Progress(rd, spec, show, say, since=since) if show is not None else None
    return _foreground(rd, spec, proc, engine, say, watch)


def _await_engine(rd: RunDir, proc: subprocess.Popen[bytes]) -> Identity | None:
    deadline = time.monotonic() + defaults.ENGINE_START_TIMEOUT
    while time.monotonic() < deadline:
        if rd.engine_identity.exists():
            try:
                ident = identity_file.read(rd.engine_identity)
            except (IdentityError, FileNotFoundError):
                ident = None
            if ident is not None and ident.pid == proc.pid:
                return ident
        if proc.poll() is not None:
            return None
        time.sleep(defaults.ENGINE_START_POLL)
    proc.kill()
    return None


def _log_tail(rd: RunDir) -> str:
    try:
        lines = rd.engine_log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no engine.log)"
    return lines[-1] if lines else "(engine.log is empty)"


def _foreground(
    rd: RunDir, spec: Spec, proc: subprocess.Popen[bytes], engine: Identity, say: Say, watch: progress.Progress | None
) -> int:
    """Wait for the engine, forwarding the terminal's signals: the engine has its own
    session and never sees them. Ctrl-C is a hard stop (lodged first, then SIGINT);
    a second Ctrl-C is `--now`. SIGHUP and SIGTERM are forwarded as they are.

    With `watch`, the progress (progress.py) is drawn between waits, after the signals
    are handled: it reads the files the engine writes and never delays a forward."""
    received: list[int] = []
    signum: int  # a signal number: the forwarded ones, then whatever the terminal sent
    tagged = Membership(run_id=rd.key(rd.run_id))  # the engine carries the run's tag from its first instruction
    for signum in STOP_SIGNALS:
        signal.signal(signum, lambda s, f: received.append(s))
    # Blocked since this command's first instruction (cli.early_signals): one that came
    # while the engine started was held pending, and is delivered to the handler now.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    tell = watch.say if watch is not None else say
    interrupts = 0
    init = os.getpid() == 1  # a container's entrypoint: every orphan of the namespace is ours
    forwarded: float | None = None  # when the first stop was forwarded (the fallback's clock)
    while True:
        if init:
            reap_orphans(proc)  # ablate: pid1-reaps
        try:
            code = proc.wait(timeout=defaults.FOREGROUND_POLL)
            break
        except subprocess.TimeoutExpired:
            pass
        if forwarded is not None and time.monotonic() - forwarded > spec.stop.grace:
            # Treated as `runner stop`: the engine had its grace; the fallback kills the
            # run (recorded with fallback: true), and the wait above sees it gone.
            forwarded = None
            for line in stop.force(rd, spec.stop.kill_grace, fallback=True).lines():
                tell(line)
        while received:
            signum = received.pop(0)
            if signum == signal.SIGINT:
                interrupts += 1
                if interrupts == 1:
                    _lodge(rd, Origin.CTRL_C)
                    signals.signal_process(engine, signal.SIGINT, tagged)
                    forwarded = time.monotonic()
                    tell("stopping (Ctrl-C again to kill now)")
                    if watch is not None:
                        watch.stopping("stopping", " (Ctrl-C again to kill now)")
                else:
                    if watch is not None:
                        watch.stopping("killing now")
                    result = stop.force(rd, spec.stop.kill_grace, fallback=False)
                    for line in result.lines():
                        tell(line)
            else:
                _lodge(rd, Origin.SIGNAL)
                signals.signal_process(engine, signum, tagged)
                forwarded = time.monotonic() if forwarded is None else forwarded
                if watch is not None:
                    watch.stopping(f"stopping ({signal.Signals(signum).name} forwarded)")
        if watch is not None:
            watch.tick()
    if init:
        reap_orphans(proc)
    if code < 0:  # killed by a signal: the state says what the run was
        code = waiting.run_outcome(rd)
    if watch is not None:
        watch.finish(code)
    return code


def reap_orphans(proc: subprocess.Popen[bytes]) -> None:
    """As PID 1 (a container's entrypoint), reap every zombie the namespace hands us:
    nobody else will. The engine's own status, if reaped here, is handed to its Popen."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid == proc.pid:
            proc.returncode = os.waitstatus_to_exitcode(status)


def _lodge(rd: RunDir, origin: Origin) -> None:
    """The foreground's hard request; without it (a full or read-only disk, a damaged
    file) the signal that follows is the stop all the same."""
    try:
        stop_request.lodge(rd, Mode.HARD, origin)
    except (Damaged, BadInput):
        pass


def status_of(rd: RunDir, folds: overview.FoldCache | None = None) -> RunStatus:
    """What `runner status` shows. Each file is read on its own (run_view.py): a damaged
    one is listed under "damaged" and the others are still shown. `folds`: a cache for
    a caller that asks again and again (only new journal records are read)."""
    view = run_view.view(rd, wait_for_engine=False)
    try:
        state = StateStore(rd.state).load_or_none()
    except Damaged as exc:
        view.note(exc)
        state = None
    now = time.time()
    spec = run_view.spec_of(view)
    if folds is not None:
        fold = folds.fold(rd, spec, view.damaged)
    else:
        fold = overview.fold_journal(rd, spec, view.damaged)
    children: list[ChildStatus] = []
    members = run_view.members(view)
    engine = view.engine
    if engine is not None and identity.is_running(engine) and members.proof(engine.pid, engine.start_ticks) is None:
        # engine.json names a live process that is not this directory's run (copied or
        # planted from another run): never shown as this run's engine.
        view.note(Damaged(rd.engine_identity, f"not the run's engine: {members.why_not(engine.pid)}"))
        engine = None
    for ident in view.children:
        if not identity.is_running(ident):
            continue
        if members.proof(ident.pid, ident.start_ticks) is None:  # ablate: status-child-proof
            # A child file naming a process that a stop would refuse to signal (forged,
            # copied from another run, or a call that left the run): never shown as a child.
            view.note(Damaged(rd.children / f"{ident.pid}.json", f"not the run's: {members.why_not(ident.pid)}"))
            continue
        children.append(
            {
                "pid": ident.pid,
                "pgid": ident.pgid,
                "name": view.child_names.get(ident.pid),
                "runtime": overview.runtime(ident),
            }
        )
    live = view.live
    running = bool(live) and fold.ended is None
    phase = fold.current if running else None
    containment = fold.containment
    if containment is None and view.cgroup is not None:
        containment = dict.fromkeys(overview.CONTAINMENT_KEYS)
        containment.update(mode="cgroup", cgroup=str(view.cgroup.path))
    return {
        "version": overview.STATUS_VERSION,
        "run_id": view.run_id,
        "run_dir": str(rd.path),
        "live": live,
        "engine_pid": engine.pid if engine else None,
        "status": state.status if state else ("unknown" if view.damaged else "starting"),
        "attempt": state.attempt if state else None,
        "current_item": state.current_item if state else None,
        "phase": state.phase if state else None,
        "stopped": state.stopped if state else False,
        "stop_origin": state.stop_origin if state else None,
        "items": overview.item_rows(fold, state, running, now),
        "provider_calls": state.provider_calls if state else 0,
        "children": children,
        "damaged": list(view.damaged),
        "started": fold.run_t0,
        "elapsed": round(now - fold.run_t0, 3) if running and fold.run_t0 is not None else None,
        "phase_started": phase.t if phase else None,
        "phase_elapsed": round(max(0.0, now - phase.t), 3) if phase else None,
        "pending_stop": overview.pending_stop(rd),
        "paused": stop_request.pause_file(rd),
        "pause_held": running and fold.pause_held,
        "containment": containment,
        "copy": view.copy,
        "cause": fold.cause,
        "journal_skipped": fold.skipped,
    }

"""The life cycle of a run: start it, resume it, watch it in the foreground. The CLI
(cli.py) only parses arguments and prints; everything that happens to a run between
`runner run` and its engine's exit is here. What a run's status is (and so which run
is resumable) is decided by the status model, views/status.py, which the CLI and the
dashboard hand in; what the foreground shows, by the Display they hand in.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from runner import defaults
from runner.control import leftovers, stop, stop_record, waiting
from runner.errors import BadInput, Damaged, IdentityError, NoLiveRun, RunLocked, RunnerError
from runner.events import STOP_SIGNALS, Event, Origin, StopKind
from runner.exitcodes import Exit
from runner.files import dirfd, identity_file, links, ownership, stop_request, untrusted
from runner.files.journal import Journal
from runner.files.rundir import EngineLock, RunDir, default_base, new_run_id, refuse_copy, resolve
from runner.files.spec import Spec, load_frozen
from runner.files.spec import load_bytes as load_spec_bytes
from runner.files.state import StateStore
from runner.proc import cgroup, membership

if TYPE_CHECKING:
    from runner.control.stop_result import StopResult
    from runner.ident import Identity

Say = Callable[[str], None]
"""How the life cycle tells the operator something, one line at a time (the CLI prints
it to stderr behind "runner: ")."""


class Display(Protocol):
    """What the foreground shows of its run between its waits for the engine (the CLI
    hands in views/progress.py's Progress): it reads the files the engine writes and
    never delays a forwarded signal."""

    def say(self, line: str) -> None: ...
    def stopping(self, what: str, hint: str = "") -> None: ...
    def tick(self) -> None: ...
    def killed(self) -> None: ...
    def finish(self, code: int) -> None: ...


DisplayFactory = Callable[[RunDir, Spec, float], Display]
"""Makes the foreground's Display: (the run, its spec, when this command started the
engine, epoch seconds)."""


def run(
    spec_path: str | os.PathLike[str],
    run_dir: str | os.PathLike[str] | None = None,
    *,
    detach: bool,
    say: Say,
    display: DisplayFactory | None = None,
    allow_foreign: bool = False,
) -> tuple[int, RunDir]:
    """`runner run`: validate the spec completely, freeze it into a new run directory,
    start the engine; detached, return once it is up, else wait for it (showing its
    progress on the Display `display` makes, if given). A directory that is not this user's alone is refused
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
    with rd.acquire_lock(record=False) as lock:
        return start_engine(rd, spec, detach, say, lock, display), rd


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
    display: DisplayFactory | None = None,
    allow_foreign: bool = False,
    resumable: Callable[[RunDir], bool],
) -> tuple[int, RunDir]:
    """`runner resume`: a new attempt of a stopped or crashed run. What the dead attempt
    left running is killed first (only what is proven the run's), pending control files
    are archived, the dead attempt's identity files removed. Another user's directory is
    refused (ownership.py) unless `allow_foreign`. `resumable`: the status model's
    answer (views/status.py), which picks the run when `run_dir` is not given.

    A refused resume writes nothing: every refusal (another user's directory, a copy, a
    live engine, damage, a completed run) is decided before its first write."""
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
    # racing, exactly one prepares and starts an engine; the other is REFUSED. Locked,
    # not written: the engine writes its pid into it.
    try:
        lock = rd.acquire_lock(record=False)
    except RunLocked:
        raise RunLocked(f"{rd.path}: an engine of this run is alive, or another resume is starting one") from None
    with lock:
        return _resume_locked(rd, lock, detach, say, display), rd


def _resume_locked(rd: RunDir, lock: EngineLock, detach: bool, say: Say, display: DisplayFactory | None) -> int:
    # Every refusal first, on what is read: nothing is written until each has passed.
    elsewhere = rd.recorded_elsewhere()  # a damaged dir-identity is refused here
    spec = load_frozen(rd.spec)
    store = StateStore(rd.state)
    state = store.load()
    if state.status in ("completed", "failed") and not state.stopped:
        raise BadInput(f"{rd.state}: status: expected a stopped or crashed run, got {state.status!r}")
    view = leftovers.look(rd)
    # engine.json and the files in children/ are the dead attempt's: resume removes them
    # below, so their damage does not hold it up (nothing was signalled on their word).
    stale_idents = (f"{rd.engine_identity}:", f"{rd.children}/")
    blocking = [d for d in view.damaged if not d.startswith(stale_idents)]
    blocking += _unwritable(rd)  # ablate: refusals-before-writes
    if blocking:
        # What the dead attempt left running is killed all the same (signals, no write).
        leftovers.kill(view, spec.stop.kill_grace)
        raise Damaged(
            rd.path,
            "; ".join(blocking) + " (leftovers were killed; repair or remove these files, then resume again)",
        )
    # From here resume writes.
    if elsewhere and rd.readopt_identity():
        say(
            f"{rd.path}: the run directory's identity was recorded in another boot or on another machine: recorded anew"
        )
    with Journal(rd.journal) as journal:  # closed on every way out
        stop_record.complete_record(rd, journal, state)
        for name in stop_request.archive_pending(rd):
            journal.append(Event.CONTROL_FILE_ARCHIVED, file=name, reason="resume")
            why = _ARCHIVED_WHY.get(name, "a control file")
            say(f"resume archived {name} into {rd.archive}/: {why}")  # ablate: resume-says-archived
        left = leftovers.kill(view, spec.stop.kill_grace)
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
        # The dead attempt's cgroup, if its engine was killed before it removed it (a
        # container's PID 1 SIGKILLed): emptied above, removed here, made anew by the engine.
        leftover = cgroup.remove_leftover(view.key)
        if leftover is not None:
            say(f"removed the cgroup the dead attempt left: {leftover}")
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
    return start_engine(rd, spec, detach, say, lock, display)


_ARCHIVED_WHY = {
    "PAUSE": "the resumed run would have held at once; touch PAUSE again to pause it",
    "STOP": "the resumed run would have stopped at once; touch STOP again to stop it gracefully",
    "stop-request.json": "the stopped attempt's pending stop request",
}
"""What `runner resume` says of each control file it archives (one line each)."""


def _unwritable(rd: RunDir) -> list[str]:
    """Where resume or its engine would write and could not: a file written in place or
    locked (journal.jsonl, engine.log, lock, stop-request.lock) that is not a regular
    file, or a hard link to a file that is not the directory owner's (a backup's link to
    the run's own file is broken at the write instead: links.py); a subdirectory that is
    not one. Read only: said before resume's first write, never found after it."""
    found: list[str] = []
    pin = dirfd.pinned(rd.path)
    owner = os.fstat(pin).st_uid if pin is not None else os.getuid()
    for path in (rd.journal, rd.engine_log, rd.lock, rd.stop_request_lock):
        try:
            fd = untrusted.open_regular(path)
        except FileNotFoundError:
            continue
        except Damaged as exc:
            found.append(" ".join(str(exc).split()))
            continue
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
        if st.st_nlink > 1 and st.st_uid != owner:
            found.append(f"{path}: has {st.st_nlink} hard links and is not the run directory owner's file")
    for sub in (rd.children, rd.output, rd.archive):
        try:
            st = os.stat(sub.name, dir_fd=pin, follow_symlinks=False) if pin is not None else os.lstat(sub)
        except FileNotFoundError:
            continue
        if not stat.S_ISDIR(st.st_mode):
            found.append(f"{sub}: not a directory (or a symlink, never followed)")
    return found


def start_engine(
    rd: RunDir, spec: Spec, detach: bool, say: Say, lock: EngineLock, displays: DisplayFactory | None = None
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
    # Never through a link, relative to the run directory's descriptor (dirfd.py); never
    # into a file a backup shares (links.py: the engine's stderr is appended to).
    log_fd = untrusted.open_regular(rd.engine_log, flags=os.O_WRONLY | os.O_APPEND | os.O_CREAT, shared=True)
    broken = links.shared(log_fd)
    if broken:
        try:
            old, log_fd = log_fd, links.break_link(rd.engine_log, log_fd)
        except BaseException:
            os.close(log_fd)
            raise
        os.close(old)
        with Journal(rd.journal) as journal:
            journal.append(Event.LINK_BROKEN, file=str(rd.engine_log), links=broken)
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
    display = displays(rd, spec, since) if displays is not None else None
    return _foreground(rd, spec, proc, engine, say, display)


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
    rd: RunDir, spec: Spec, proc: subprocess.Popen[bytes], engine: Identity, say: Say, display: Display | None
) -> int:
    """Wait for the engine, forwarding the terminal's signals: the engine has its own
    session and never sees them. Ctrl-C is a hard stop (lodged first, then SIGINT);
    a second Ctrl-C is `--now`. SIGHUP and SIGTERM are forwarded as they are.

    With `display`, the progress (progress.py) is drawn between waits, after the signals
    are handled: it reads the files the engine writes and never delays a forward."""
    received: list[int] = []
    signum: int  # a signal number: the forwarded ones, then whatever the terminal sent
    for signum in STOP_SIGNALS:
        signal.signal(signum, lambda s, f: received.append(s))
    # Blocked since this command's first instruction (cli.early_signals): one that came
    # while the engine started was held pending, and is delivered to the handler now.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    tell = display.say if display is not None else say
    interrupts = 0
    init = os.getpid() == 1  # a container's entrypoint: every orphan of the namespace is ours
    stopping: stop.Stop | None = None  # the hard stop the first signal began (its grace runs)
    kill_grace = spec.stop.kill_grace
    forwarded: float | None = None  # when the first stop was forwarded (the fallback's clock)
    while True:
        if init:
            reap_every_zombie(proc)  # ablate: pid1-reaps
        try:
            code = proc.wait(timeout=defaults.FOREGROUND_POLL)
            break
        except subprocess.TimeoutExpired:
            pass
        if stopping is not None and forwarded is not None and time.monotonic() - forwarded > spec.stop.grace:
            # The engine had its grace: the stop pipeline's fallback kills the run (recorded
            # with fallback: true), as `runner stop` would, and the wait above sees it gone.
            forwarded = None
            _say_result(tell, stopping.force)
        while received:
            signum = received.pop(0)
            if signum == signal.SIGINT:
                interrupts += 1
                if interrupts == 1:
                    stopping = _ask(rd, spec, Origin.CTRL_C, signum, stopping, tell)
                    forwarded = time.monotonic()
                    tell("stopping (Ctrl-C again to kill now)")
                    if display is not None:
                        display.stopping("stopping", " (Ctrl-C again to kill now)")
                else:
                    if display is not None:
                        # Drawn before the kill, which holds this loop until it is done;
                        # once its line is said, never drawn again after it.
                        display.stopping("killing now")
                        display.tick()
                    # The first Ctrl-C's request stands (never downgraded); this stopper's own
                    # record says what it is: forced.
                    _say_result(tell, lambda: stop.stop(rd, StopKind.NOW, kill_grace=kill_grace))
                    if display is not None:
                        display.killed()  # ablate: killing-line-before-result
            else:
                stopping = _ask(rd, spec, Origin.SIGNAL, signum, stopping, tell)
                forwarded = time.monotonic() if forwarded is None else forwarded
                if display is not None:
                    display.stopping(f"stopping ({signal.Signals(signum).name} forwarded)")
        if display is not None:
            display.tick()
    if init:
        reap_every_zombie(proc)
    if stopping is not None:
        stopping.close()  # its own mark: what follows waits for the other stoppers'
    if code < 0:  # killed by a signal: the state says what the run was, once recorded
        code = waiting.run_outcome(rd)
    if display is not None:
        display.finish(code)
    return code


def reap_every_zombie(proc: subprocess.Popen[bytes]) -> None:
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


def _ask(
    rd: RunDir, spec: Spec, origin: Origin, signum: int, stopping: stop.Stop | None, tell: Say
) -> stop.Stop | None:
    """The foreground's hard stop (the stop pipeline's HARD kind, its first steps): the
    request lodged, then the signal forwarded to the engine, whatever the spec's channel
    (the terminal's signal is forwarded as it came). A second signal asks again through
    the same stop."""
    try:
        if stopping is None:
            stopping = stop.Stop(
                rd, StopKind.HARD, origin, grace=spec.stop.grace, kill_grace=spec.stop.kill_grace, channel="signal"
            )
        stopping.ask(signum)
    except RunnerError as exc:  # a copy, another namespace: never for the run this command started
        tell(str(exc))
    return stopping


def _say_result(tell: Say, run: Callable[[], StopResult]) -> None:
    """A forced stop's lines, each on its own; a stop that cannot act says why."""
    try:
        result = run()
    except RunnerError as exc:
        tell(str(exc))
        return
    for line in result.lines():
        tell(line)

"""The engine process: what it sets up before the first phase and releases after the
last. Started by `runner run` and `runner resume` as `python -m runner _engine DIR`, in
its own session and process group, with the run's RUNNER_RUN_ID in its environment.

Order matters: the lock first (a second engine is refused before it touches
anything), then containment, then the stop controller (signal handlers and the
watchdog), and the identity file last: `runner run --detach` returns once that file
exists, and by then a SIGTERM is already a clean stop.
"""

from __future__ import annotations

import os
import sys

from runner import defaults
from runner import log as _log
from runner.engine.phases import Phases, say
from runner.engine.registry import Registry
from runner.engine.stop_controller import StopController
from runner.errors import RunLocked, RunnerError, disk_fault
from runner.events import Event
from runner.exitcodes import Exit
from runner.files import dirfd, identity_file, links
from runner.files.atomic import atomic_write_text
from runner.files.journal import Journal
from runner.files.reserve import Reserve
from runner.files.rundir import EngineLock, RunDir, refuse_copy
from runner.files.spec import load_frozen
from runner.files.state import State, StateStore, full_size
from runner.proc import identity, membership, pidns, sweep
from runner.proc.cgroup import RunCgroup, resolve_containment

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable


def main(run_dir: str | os.PathLike[str], lock_fd: int | None = None) -> Exit:
    """`lock_fd`: the engine lock, taken by `runner run` or `resume` and inherited, so
    that it is never free between their preparation and this engine."""
    rd = RunDir(run_dir)
    if not rd.exists():
        print(f"runner engine: {rd.path}: no run there (no spec.toml)", file=sys.stderr)
        return Exit.NO_LIVE_RUN
    # Every file from here on is opened through this one descriptor of the directory
    # (dirfd.py): a link below it is never followed, and `mv` of the directory while the
    # run goes on changes nothing for the engine.
    rd.pin()
    try:
        lock = rd.adopt_lock(lock_fd) if lock_fd is not None else rd.acquire_lock()
    except RunnerError as exc:
        say(str(exc))
        return exc.exit_code
    try:
        return _run_locked(rd, lock)
    except RunnerError as exc:
        say(str(exc))
        return exc.exit_code
    except Exception as exc:
        if disk_fault(exc):
            # Its records cannot be written (the run's processes are already ended).
            say(f"cannot write the run's records: {exc}")
            return Exit.NOT_RECORDED
        try:
            import traceback

            _log.stderr_ready()
            traceback.print_exc()
        except (OSError, ValueError):
            pass  # engine.log is on the disk that failed
        return Exit.INTERNAL
    finally:
        _log.before_stderr = None
        lock.release()


def _stderr_guard(rd: RunDir, journal: Journal) -> Callable[[], None]:
    """Before each write of the engine's to its stderr: engine.log, when a backup shares
    it (`cp -al` of the live run), is first replaced by a copy of its own that the
    engine's stdout and stderr then write to; the backup's inode is never written
    (links.py). Said in the journal."""

    def guard() -> None:
        broken = links.shared(2)
        if not broken:
            return
        held = os.fstat(2)
        if dirfd.identity_at(rd.engine_log) != (held.st_dev, held.st_ino):
            return  # stderr is not this run's engine.log (an engine started by hand)
        new = links.break_link(rd.engine_log, 2)
        try:
            for fd in (1, 2):
                st = os.fstat(fd)
                if (st.st_dev, st.st_ino) == (held.st_dev, held.st_ino):
                    os.dup2(new, fd)
        finally:
            os.close(new)
        journal.append(Event.LINK_BROKEN, file=str(rd.engine_log), links=broken)

    return guard


def _own_key(rd: RunDir) -> str:
    """The run's membership key, measured on the directory this engine opened. It must be
    the tag this engine was started with (`runner run` and `resume` measured the same
    directory): else the directory changed in between, or this is a copy, and no process
    may carry a tag that names another directory's run."""
    refuse_copy(rd)
    key = rd.key(rd.run_id)
    if key is None or os.environ.get(membership.TAG) != key:
        raise RunLocked(
            f"{rd.path}: this directory's run key {key} is not the tag the engine was started with "
            f"({os.environ.get(membership.TAG)}): the directory was replaced or moved while it started"
        )
    return key


def reserve_size(state: State) -> int:
    """RESERVE_BYTES, or more for a run whose state file is large: the last records are
    one more state file (written beside the old one, then replacing it) and a few lines.
    Counted chunk by chunk (state.full_size): building the file's text here to measure it
    was the engine's peak memory (78 MB at 50,000 items)."""
    return max(defaults.RESERVE_BYTES, 2 * full_size(state) + 64 * 1024)  # ablate: reserve-size-counted


def _run_locked(rd: RunDir, lock: EngineLock) -> Exit:
    key = _own_key(rd)  # before anything is written
    spec = load_frozen(rd.spec)
    store = StateStore(rd.state)
    state = store.load() if rd.state.exists() else State.new(rd.run_id, spec.items)
    # The reserve before any write of the run: what it holds is what the last records
    # are written in, should the disk fill up (reserve.py).
    spare: Reserve | None = None
    no_reserve = ""
    try:
        spare = Reserve.create(rd.path, reserve_size(state))  # ablate: engine-reserve
    except OSError as exc:
        no_reserve = f"{exc.strerror or exc}"
    store.spare = spare
    journal = Journal(rd.journal, spare)
    if lock.broken:  # a backup shared `lock`: the engine wrote its pid into a copy of its own
        journal.append(Event.LINK_BROKEN, file=str(rd.lock), links=lock.broken)
    _log.before_stderr = _stderr_guard(rd, journal)
    containment = resolve_containment(spec.stop.containment)
    cgroup: RunCgroup | None = None
    if containment == "cgroup":
        cgroup = RunCgroup.create(key)
        cgroup.enter_engine()
        atomic_write_text(rd.cgroup_file, f"{cgroup.path}\n")
    # Double-forked daemons are re-parented to us rather than to init, so the
    # clean-up can find them as our children and reap them at once.
    subreaper = sweep.make_subreaper()
    registry = Registry(rd.children, run_id=key, kill_grace=spec.stop.kill_grace, cgroup=cgroup)
    registry.spare = spare
    controller = StopController(rd, registry, journal)
    if spare is not None:
        spare.on_give_up = controller.disk_full
    controller.install_signals()
    controller.start()
    try:
        store.save(state)
        # Said once per engine, in the journal an operator reads: whether the final kill
        # can reach a descendant that dropped its environment (only a cgroup can).
        journal.append(
            Event.CONTAINMENT, mode=containment, cgroup=str(cgroup.path) if cgroup else None, subreaper=subreaper
        )
        if spare is None:
            journal.append(Event.RESERVE_UNAVAILABLE, path=str(rd.path / "reserve"), error=no_reserve)
        me = identity.current(os.getpid())
        if me is None:  # our own live pid: /proc always has it
            raise RuntimeError(f"cannot read the engine's own identity (pid {os.getpid()})")
        # The [stop] values beside the identity: a stopper reads them here, one small JSON
        # file, instead of parsing the spec (the TOML parser's import is on its clock).
        stop = {"grace": spec.stop.grace, "kill_grace": spec.stop.kill_grace, "channel": spec.stop.channel}
        # The pid namespace beside the pids: a stopper outside it translates them (pidns.py).
        identity_file.write(
            rd.engine_identity,
            me,
            role="engine",
            containment=containment,
            subreaper=subreaper,
            stop=stop,
            pidns=pidns.of(),
        )
        engine = Phases(
            rd, spec, store=store, state=state, journal=journal, registry=registry, controller=controller, cgroup=cgroup
        )
        return engine.run()
    finally:
        controller.close(ignore_signals=True)
        if cgroup is not None:
            try:
                cgroup.remove()
            except OSError as exc:
                journal.append(Event.CGROUP_REMOVE_FAILED, path=str(cgroup.path), error=str(exc))
        journal.close()
        if spare is not None:
            spare.close()

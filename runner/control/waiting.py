"""`runner wait`: block until a run's engine is gone, then its own exit code."""

from __future__ import annotations

import time

from runner import defaults
from runner.control import survey
from runner.errors import Crashed, DirectoryGone, NoLiveRun
from runner.exitcodes import Exit
from runner.files import dirfd, stoppers
from runner.files.rundir import RunDir
from runner.files.state import StateStore
from runner.proc import identity, signals

TYPE_CHECKING = False

if TYPE_CHECKING:
    from runner.control.stop_result import StopResult
    from runner.control.survey import Survey


FIRST_LOOK = 0.001
"""The first pause of a waiter behind a stopper at work, doubled up to FILE_POLL: a
stopper's record is a state save and a journal line after its kill."""


def wait_run(rd: RunDir, timeout: float | None = None) -> Exit:
    """Block until the run's engine is gone; return the run's own exit code. An engine
    that is dead already (its lock free), one in a pid namespace that is gone included,
    is a run that ended: its code from its state (CRASHED when none was recorded)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    view = survey.not_a_copy(survey.of(rd))
    if view.engine is None and view.live is False and view.elsewhere is None:
        return _ended(rd, view, deadline)  # ablate: wait-dead-engine-is-crashed
    engine = survey.require_engine(view)
    if identity.is_running(engine) and survey.members(view).foreign(engine.pid, engine.start_ticks):
        # engine.json names a live process that is not this directory's run: waiting on
        # it would report another run's end as this one's.
        raise NoLiveRun(f"{rd.engine_identity}: not the run's engine ({survey.members(view).why_not(engine.pid)})")
    while not signals.wait_gone(engine, defaults.WAIT_SLICE if timeout is None else timeout):
        if timeout is not None:
            raise NoLiveRun(f"{rd.path}: still running after {timeout}s")
    return _ended(rd, view, deadline)


def _ended(rd: RunDir, view: Survey, deadline: float | None = None) -> Exit:
    """The code of a run whose engine is gone; a run whose directory went away meanwhile
    (`rm -rf`: its engine stops such a run) has what is left of it killed by the stop
    pipeline, and says so on one line (DirectoryGone)."""
    if dirfd.gone(rd.path):
        from runner.control import stop
        from runner.events import StopKind

        stopper = stop.Stop(rd, StopKind.NOW, view=view)
        stopper.facts.vanished = str(rd.path)
        stopper.kill()
        raise directory_gone(stopper.finish())
    return run_outcome(rd, deadline)


def directory_gone(result: StopResult) -> DirectoryGone:
    """What a waiter says of a run whose directory went away, once the stop pipeline
    finished its kill (`result`): the run was stopped (STOPPED), or what was left alive."""
    return DirectoryGone(result.message, Exit.STOPPED if result.code == Exit.OK else result.code)


def run_outcome(rd: RunDir, deadline: float | None = None) -> Exit:
    """The code of a run whose engine is gone, from its state: its own exit code; STOPPED
    for a recorded stop, whoever recorded it; CRASHED when the engine died without
    recording an end (SIGKILL, out of memory), which `runner resume` continues. A damaged
    state raises Damaged.

    Read once no stopper is at work (files/stoppers.py): a `--now` kills the engine
    before it records the stop, and until its record lands the run is being stopped,
    not crashed. `deadline` (monotonic): a `runner wait --timeout` that passes while a
    stopper is still at work says so (NoLiveRun)."""
    pause = FIRST_LOOK
    while stoppers.at_work(rd):
        if deadline is not None and time.monotonic() > deadline:
            raise NoLiveRun(f"{rd.path}: its engine is gone and a stopper is still recording the stop")
        time.sleep(pause)
        pause = min(2 * pause, defaults.FILE_POLL)
    state = StateStore(rd.state).load()
    if state.exit_code is not None and state.exit_code in Exit._value2member_map_:
        return Exit(state.exit_code)
    if state.stopped:
        return Exit.STOPPED
    raise Crashed(
        f"run {state.run_id}: its engine died without recording how the run ended "
        f"(status {state.status!r}); `runner resume` continues it"
    )

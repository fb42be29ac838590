"""The stop pipeline: every stop of a run from outside its engine goes through `stop`.

Its callers name a StopKind (events.py: HARD, NOW, GRACEFUL) and who asks (the origin):
the CLI (`runner stop`, `--now`, `--graceful`), `stop --all` (stop_all.py), the
dashboard's buttons (dashboard/actions.py) and a foreground `runner run`'s signal
handler (lifecycle.py, which calls the steps of `Stop` itself: it reaps its engine in
between). The engine answers a signal and the STOP file itself (stop_controller.py).
One path, in steps:

1. prove: what the run is (survey.of): never a copy's, never across a pid
   namespace this process cannot see into; a directory already gone is a vanished run
   (`stop_path`, stop_vanished).
2. ask: the request (HARD, or GRACEFUL) is lodged before any signal, in every mode: a
   process of the run that dies from here on dies of this stop, and the engine, which
   classifies each call's death, reads it so (a session killed by a stop is stopped,
   never failed). Then the hard stop SIGTERMs the engine.
3. wait (hard): up to `grace` for the engine's own stop.
4. kill (now; hard past its grace, or when its engine went within the grace with
   nothing recorded: a racing `--now` killed it; any stop of a dead engine): `_kill`, the same
   reach whatever the mode: the recorded groups and pids, each call's lineage read
   before the first signal (what dropped its tag or left its group while its parent
   lives), the tag sweep, the cgroup kill, then kill rounds until one finds nothing
   new (reaper.find_new: the engine's lineage read again), the engine last
   (reaper.kill_everything).
5. confirm: what the engine or this kill left alive is named (LEFT_RUNNING, the pids):
   never an exit 0 with a process of the run alive.
6. record: once the engine is proven dead, only if nobody did (stop_record.py, with the
   one writer of files/stopped.py).
7. result: built once from what the steps found (stop_result.build).

The locks a stop takes, and what each guarantees (said here once):

- The run lock (`lock`, an flock): held by the engine for its whole life (handed down by
  `runner run` and `resume`); free means the engine is dead. A stopper never waits for
  it while the engine lives: it probes it (`RunDir.is_live`).
- The recording lock: the run lock again, taken by a stopper in its record step
  (stop_record._recording_lock) once the engine is dead. Holding it proves the engine
  dead and makes "has anybody recorded this attempt's stop?" and the write one step:
  exactly one `run-stop` per attempt, whoever races. Held for a state save and one
  journal line; waited for LOCK_WAIT at most (a frozen holder keeps the record:
  NOT_RECORDED says so, and a later `runner stop` completes it once it is gone).
- stop-request.lock: a request's merge (read, never downgrade, atomic write) and the
  engine's consume (one rename) are each one step. Held for milliseconds; waited for
  REQUEST_LOCK_WAIT at most (files/stop_request.py), after which the stopper goes on
  with its signal and names the file.
- The stoppers' mark (files/stoppers.py): a shared OFD lock on `lock` (independent of
  its flock), taken by every stopper before its first signal and dropped once its record
  is written or given up. Never waited for by a stopper (shared: stoppers mark side by
  side); a waiter (`runner wait`, a foreground, the status model) that sees the engine
  gone reads the record only once no mark is held, so a run a `--now` killed is
  "stopping", never "crashed", until its record lands.
- The kill takes none. Every signal is proven, each process's through its own pidfd,
  so stoppers kill side by side: a second one never waits for a first one's kill (the
  stop.lock that queued forcing stoppers held the second behind a frozen first for a
  whole forced stop, past its own worst case).

Each wait is a term of its kind's worst case (StopKind.worst_case), which the stop-modes
table of docs/stop-latency.md renders: a stopper never waits longer than that behind a
frozen stopper or a frozen engine.
"""

from __future__ import annotations

import os
import signal
import time

from runner import defaults
from runner.control import survey
from runner.control.stop_record import engine_left, record_forced_stop, who_recorded
from runner.control.stop_result import RecordedBy, StopFacts, StopResult, build, graceful_lodged
from runner.errors import ControlFileError, Damaged, NoLiveRun, RunLocked, Unwritable
from runner.events import Event, Mode, Origin, StopKind
from runner.files import dirfd, stop_request, stoppers
from runner.files.journal import Journal
from runner.files.rundir import RunDir, refuse_copy, resolve
from runner.files.state import StateStore
from runner.ident import Identity
from runner.proc import identity, membership, reaper, signals, sweep

TYPE_CHECKING = False

if TYPE_CHECKING:
    from runner.control.survey import Survey
    from runner.proc.membership import Membership
    from runner.proc.vanished import Vanished as VanishedEngine


def stop(
    rd: RunDir,
    kind: StopKind,
    *,
    origin: Origin | None = None,
    grace: float | None = None,
    kill_grace: float | None = None,
    channel: str | None = None,
) -> StopResult:
    """Stop the run in `rd` the way `kind` says (the module's steps). `origin`: who asks
    (the dashboard), journaled by whoever records the stop; else the kind's own."""
    if kind.mode == Mode.GRACEFUL:
        return _graceful(rd, origin or Origin.FILE)
    s = Stop(rd, kind, origin, grace=grace, kill_grace=kill_grace, channel=channel)
    try:
        return _stop(s)
    finally:
        s.close()


def _stop(s: Stop) -> StopResult:
    rd, kind = s.rd, s.kind
    if dirfd.gone(rd.path):
        if s.view.engine is None:
            return _vanished_at(str(rd.path))  # gone before it could be read: found by its engine
        # Removed or half removed while it was read: as `--now` stops a vanished run, and
        # nothing is made there (an `rm -rf` may still be emptying it: a request file made
        # now would make its last rmdir fail).
        s.facts.vanished = str(rd.path)
        s.kill()
        return s.finish()
    if s.view.live is False:
        # The engine is dead (it crashed, or a stopper killed it and was itself killed):
        # what the run left is killed, and the stop recorded unless the attempt recorded
        # its end; NoLiveRun only when nothing of the run lived and its end was recorded.
        s.facts.engine_dead = True
        s.kill()
        return s.finish(no_live_run=True)
    s.ask()
    if kind.waits:
        s.wait_engine()
    if not s.facts.gone_in_grace or not s.end_recorded():
        # An engine gone within the grace with nothing recorded did not stop the run
        # itself (another stopper's `--now` killed it, or it died): what it left is
        # killed here, as for any dead engine, never passed over with an exit 0.
        s.kill()  # ablate: gone-unrecorded-engine-is-dead
    return s.finish()


def stop_hard(
    rd: RunDir, *, origin: Origin | None = None, grace: float | None = None, kill_grace: float | None = None
) -> StopResult:
    """`runner stop`: stop(rd, StopKind.HARD)."""
    return stop(rd, StopKind.HARD, origin=origin, grace=grace, kill_grace=kill_grace)


def stop_now(rd: RunDir, kill_grace: float | None = None, *, origin: Origin | None = None) -> StopResult:
    """`runner stop --now`: stop(rd, StopKind.NOW)."""
    return stop(rd, StopKind.NOW, origin=origin, kill_grace=kill_grace)


def stop_graceful(rd: RunDir, *, origin: Origin = Origin.FILE) -> StopResult:
    """`runner stop --graceful`: stop(rd, StopKind.GRACEFUL)."""
    return stop(rd, StopKind.GRACEFUL, origin=origin)


class Stop:
    """One stop of one run, step by step (`stop` runs them in order; the foreground
    calls them itself, as it reaps its engine in between)."""

    def __init__(
        self,
        rd: RunDir,
        kind: StopKind,
        origin: Origin | None = None,
        *,
        view: Survey | None = None,
        grace: float | None = None,
        kill_grace: float | None = None,
        channel: str | None = None,
    ) -> None:
        self.started = time.monotonic()
        self.rd = rd
        self.kind = kind
        self.origin = origin
        self.view = survey.acting_on(view if view is not None else survey.of(rd))  # prove
        self.grace = self.view.stop.grace if grace is None else grace
        self.kill_grace = self.view.stop.kill_grace if kill_grace is None else kill_grace
        self.channel = self.view.stop.channel if channel is None else channel
        self.facts = StopFacts(kind, self.view)
        # This stopper's mark, from before its first signal until its record: a waiter
        # that sees the engine gone reads the record only once no stopper holds one
        # (files/stoppers.py), never "crashed" in between.
        self._mark = stoppers.mark(rd)

    def close(self) -> None:
        """This stopper's mark dropped: its record is written, or it has given up (a
        foreground that waits for the run's end drops its own before it waits)."""
        stoppers.unmark(self._mark)
        self._mark = None

    # -- 2. ask ---------------------------------------------------------------------

    def _asker(self) -> str | None:
        """The kind the request names as the command that asked (the record's `kind`):
        `runner stop` and its modes, the dashboard's buttons; None for a foreground that
        forwards its terminal's Ctrl-C or a SIGTERM it was sent (no command asked)."""
        return self.kind.name if self.origin in (None, Origin.DASHBOARD) else None

    def ask(self, sig: int = signal.SIGTERM) -> None:
        """The hard request, lodged before any signal (in every mode: see the module's
        step 2); then a hard stop signals the engine (`sig`: what a foreground forwards),
        unless its channel is the file. An exiting engine is only waited for."""
        view = self.view
        use_signal = self.kind.waits and self.channel in ("signal", "auto")
        origin = self.origin or (Origin.FILE if self.kind.waits and not use_signal else Origin.SIGNAL)
        try:
            stop_request.lodge(self.rd, Mode.HARD, origin, self._asker())  # ablate: stop-lodges-first
        except stop_request.RequestLockHeld as exc:
            # Another stopper holds the request's lock past its bound: contention, not
            # damage; this stop goes on by its signal and says so on a line of its own.
            self.facts.said.append(f"{exc}; this stop went on by its signal")  # ablate: lock-wait-is-not-damage
            use_signal = self.kind.waits
        except (ControlFileError, Damaged) as exc:
            if not dirfd.gone(self.rd.path):  # gone: said once, by the result
                view.note(exc)
            use_signal = self.kind.waits  # no file channel left: the signal is all there is
        engine = self._engine()
        if engine is not None and use_signal and not identity.exiting(engine.pid):
            signals.signal_process(engine, sig, survey.members(view))

    def _engine(self) -> Identity | None:
        """The engine, if one is recorded and proven the run's (an exiting one counts:
        it cannot prove its tag any more, and is no threat)."""
        engine = self.view.engine
        if engine is not None and survey.members(self.view).foreign(engine.pid, engine.start_ticks):
            return None  # not proven the run's: never signalled, never waited for; the kill decides
        return engine

    # -- 3. wait --------------------------------------------------------------------

    def wait_engine(self) -> bool:
        """Up to `grace` for the engine's own stop; True if it exited within it."""
        self.facts.grace = self.grace
        engine = self._engine()
        gone = engine is not None and signals.wait_gone(engine, self.grace)
        self.facts.gone_in_grace = gone
        self.facts.fallback = not gone
        return gone

    def force(self) -> StopResult:
        """Past the grace, for a caller that waited for the engine itself (a foreground
        `runner run` reaps its engine): the fallback's kill, then confirm, record, result."""
        self.facts.grace, self.facts.fallback = self.grace, True
        self.kill()
        return self.finish()

    # -- 4. kill --------------------------------------------------------------------

    def kill(self) -> None:
        """Every process proven the run's, whatever the mode (the module's step 4). A live
        engine is the root of the kill's rounds: its lineage (its calls, what it adopted
        as a child subreaper, what descends from them by parent links) is read by
        reaper.find_new in every round, the first one included, as in the engine's own
        stop: one route that finds the run's members in every mode."""
        view, engine = self.view, self.view.engine
        known: list[Identity] = []
        roots: list[Identity] = []
        if engine is not None and identity.is_running(engine) and self._engine() is not None:
            roots = [engine]
        # The engine last: SIGTERMed with the rest, SIGKILLed once the kill rounds found
        # nothing new. A child subreaper, it adopts what a member killed in a round had
        # just forked, and the next round finds it there (reaper.find_new); killed with
        # the rest, it would hand that to init, out of every route's reach.
        report = reaper.kill_everything(
            groups=[(i.pgid, [i]) for i in view.children],
            pids=view.children + known,
            run_id=view.key,
            kill_grace=self.kill_grace,
            cgroup=view.cgroup,
            known=known,
            roots=roots,
            last=[engine] if engine is not None else [],
        )
        self.facts.report, self.facts.killed = report, True
        if report.refused and not dirfd.gone(self.rd.path):  # (a journal there would be a new file)
            try:
                with Journal(self.rd.journal) as journal:
                    journal.append(Event.SIGNAL_REFUSED, by="stop", refused=report.refused)
            except (Damaged, OSError) as exc:
                self._note(exc)
        if engine is not None and identity.is_running(engine) and self._engine() is not None:
            # The engine outlived its SIGKILL: named by what the kernel shows (state D or not).
            stuck, alive = reaper.classify([engine.pid])
            report.unkillable = sorted(set(report.unkillable) | set(stuck))
            report.left_running = sorted(set(report.left_running) | set(alive))

    # -- 5, 6, 7. confirm, record, result ---------------------------------------------

    def finish(self, *, no_live_run: bool = False) -> StopResult:
        """Confirm, record, and build the result once. `no_live_run`: a stop of a dead
        engine that found nothing alive and the end already recorded raises NoLiveRun."""
        f = self.facts
        self._confirm()
        if f.vanished is None and dirfd.gone(self.rd.path):
            f.vanished = str(self.rd.path)  # removed during the stop: nothing can be recorded
        if f.vanished is None and self._engine_gone():
            self._record()  # (an engine that lives on, unkillable or left running, is never recorded over)
        if f.vanished is not None and not f.killed:
            self.kill()  # no record left to trust for what the engine did: the kill is finished here
        f.elapsed = time.monotonic() - self.started
        if f.report is not None and self.view.cgroup is not None and not f.report.unkillable and self._engine_gone():
            try:
                # The engine this stop killed leaves its zombie in the cgroup until its
                # parent reaps it: moments, waited for, or the cgroup stays behind.
                self.view.cgroup.wait_empty("all", defaults.CONFIRM_TIMEOUT)
                self.view.cgroup.remove()
            except OSError as exc:
                # Still populated (an unkillable member), or a cgroup below it that would
                # not go: named, never passed over (gone already is no failure).
                f.cgroups_left = str(exc)
        self.close()  # the record is written (or could not be): waiters may read it
        ended = f.recorded_by in (RecordedBy.ENGINE, RecordedBy.OTHER, RecordedBy.FINISHED)
        if no_live_run and f.found == 0 and not f.left_alone and ended:  # ablate: stop-total-dead-engine
            raise NoLiveRun(
                f"{self.rd.path}: no live engine, nothing of the run alive and its end already recorded "
                "(see `runner status`)"
            )
        return build(f)

    def _confirm(self) -> None:
        """Nothing of the run may be alive behind an exit 0. What the engine journaled as
        outliving its own kill, if alive and still proven the run's, is killed by this
        stopper (when the engine stopped the run itself: the same reach). With the engine
        dead before this stop, a call it recorded that lives on as itself with nothing to
        prove it (no run's tag at all, in no run's cgroup) may still be the run's: never
        signalled, never passed over in silence (LEFT_RUNNING, its pid named)."""
        f = self.facts
        members = survey.members(self.view)
        if not f.killed and any(_alive_member(pid, members) for pid in engine_left(self.rd)):
            self.kill()  # ablate: confirm-kills-what-the-engine-left
        if not f.engine_dead:
            return  # a live engine's calls are its children: proven (the kill's rounds), or not calls at all
        left = set(f.report.unkillable) | set(f.report.left_running) if f.report is not None else set()
        for call in self.view.children:
            st = identity.stat(call.pid)
            if st is None or st.zombie or st.start_ticks != call.start_ticks or call.pid in left:
                continue
            if members.proof(call.pid, call.start_ticks) is None and _of_no_run(call.pid):
                f.left_alone.append(call.pid)
                f.unproven.append(f"pid {call.pid} ({sweep.comm(call.pid)})")

    def end_recorded(self) -> bool:
        """The attempt's end is recorded: its stop (by the engine or another stopper), or
        the run's own completion. Read without a lock: a record is never taken back."""
        try:
            state = StateStore(self.rd.state).load()
        except (Damaged, OSError):
            return False
        return who_recorded(self.rd, state) is not None or (
            state.status in ("completed", "failed") and not state.stopped
        )

    def _engine_gone(self) -> bool:
        """No engine of this run is left: the lock is free (or, with the lock damaged, no
        process carries the run's tag), or the engine this stop knew is dead while
        another process holds the lock (a stopper recording, frozen or not: the record
        step waits for it, bounded)."""
        engine = self.view.engine
        if engine is not None and not identity.is_running(engine):
            return True
        try:
            return not self.rd.is_live()
        except Damaged:
            return not (self.view.key and sweep.tagged(self.view.key))
        except FileNotFoundError:
            return True

    def _record(self) -> None:
        f = self.facts
        try:
            f.recorded_by, state = record_forced_stop(self.rd, f.report, f.fallback, self.origin, self.kind.name)
        except Unwritable as exc:  # ablate: unrecorded-stop-reported
            f.recorded_by, f.unrecorded = RecordedBy.NOBODY, exc
            return
        except RunLocked:
            f.recorded_by, f.held_by = RecordedBy.HELD, _holder(self.rd)
            return
        except (Damaged, FileNotFoundError) as exc:
            if dirfd.gone(self.rd.path):
                f.vanished = str(self.rd.path)
            elif isinstance(exc, FileNotFoundError):
                self.view.note(Damaged(exc.filename or self.rd.state, "missing"))
            else:
                self.view.note(exc)
            return
        if state is not None:
            f.engine_origin = state.stop_origin
            if f.recorded_by == RecordedBy.FINISHED:
                f.finished_as = state.status

    def _note(self, exc: Exception) -> None:
        if isinstance(exc, FileNotFoundError) and dirfd.gone(self.rd.path):
            return  # the directory went away: said once, by the result
        self.view.note(exc)


def _alive_member(pid: int, members: Membership) -> bool:
    st = identity.stat(pid)
    return st is not None and not st.zombie and members.proof(pid, st.start_ticks) is not None


def _of_no_run(pid: int) -> bool:
    """Carries no run's tag and sits in no run's cgroup: nothing says whose it is (a
    process of another run, tagged or contained, is that run's, never this one's)."""
    where = membership.cgroup_of(pid)
    return membership.tag_of(pid) is None and not (where or "").startswith("/runner/")


def _holder(rd: RunDir) -> str:
    pids = survey.lock_holders(rd)
    return f"pid {pids[0]}" if pids else "another process"


def _graceful(rd: RunDir, origin: Origin) -> StopResult:
    """`runner stop --graceful`: lodge a graceful request (file channel; `origin` names
    a caller other than the CLI) for the engine to honor at its next graceful check point."""
    refuse_copy(rd)
    if dirfd.gone(rd.path):  # no request is made in a directory that went away (rm -rf may be emptying it)
        raise NoLiveRun(f"{rd.path}: {GONE}: no graceful stop is lodged there")
    if not rd.is_live():
        raise NoLiveRun(f"{rd.path}: no live engine")
    try:
        request = stop_request.lodge(rd, Mode.GRACEFUL, origin, "graceful")
    except Unwritable as exc:  # nothing was asked of the engine: not a stop that went unrecorded
        raise ControlFileError(
            f"{exc}: the graceful stop is not lodged (`runner stop` still reaches the engine by signal)"
        ) from None
    except ControlFileError:
        if dirfd.gone(rd.path):  # went away while the request was lodged: as before it
            raise NoLiveRun(f"{rd.path}: {GONE}: no graceful stop is lodged there") from None
        raise
    return graceful_lodged(rd.run_id, request.mode == Mode.HARD)


GONE = "the run directory is gone (removed, or half removed: its spec.toml gone)"
"""How a stop names a run directory that went away before it could lodge anything."""


def stop_path(run_dir: str | None, kind: StopKind, *, wait: bool = False) -> StopResult:
    """`runner stop [--now | --graceful [--wait]] [--run-dir DIR]`: the run a command
    names, resolved and stopped. `rm -rf DIR` of a live run, before this command or while
    it reads the run, also one whose last rmdir failed (half removed: DIR is there, its
    spec.toml gone): the run's engine, if it still lives, is found by its pinned directory
    (vanished.py) and its run stopped as `--now` stops it, said on one line. A graceful
    stop has no file left to lodge (NoLiveRun), unless it would `wait` for the run's end:
    then it finishes the stop the engine makes of a vanished run (the caller says how
    the run ended: stopped). No engine found there: resolve's own line (no run there, or
    a symlink never followed)."""
    try:
        rd = resolve(run_dir)
    except NoLiveRun as missing:
        if run_dir is None or (kind.mode == Mode.GRACEFUL and not wait):
            raise
        return _vanished_at(os.path.abspath(run_dir), missing)
    return stop(rd, kind)


def _vanished_at(where: str, missing: NoLiveRun | None = None) -> StopResult:
    """The run whose directory was at `where`: its engine, found by the kernel's word;
    else `missing` (what resolve said of `where`) is raised."""
    from runner.proc import vanished

    found = [v for v in vanished.engines(os.path.dirname(where)) if os.path.abspath(v.run_dir) == where]
    if not found:
        raise missing or NoLiveRun(f"{where}: no run there (no spec.toml)")
    return stop_vanished(found[0])


def stop_vanished(v: VanishedEngine, kill_grace: float | None = None) -> StopResult:
    """A live engine whose run directory is gone (vanished.py): no file to lodge a stop
    in or record it, so the run is killed as `--now` kills it, proven by its tag and its
    cgroup (the only membership left), and said on one line: the pipeline's kill,
    confirmation and result, with nothing to record."""
    from runner.control.survey import StopSettings, Survey
    from runner.proc.cgroup import RunCgroup, run_cgroup_path

    path = run_cgroup_path(v.key)
    view = Survey(
        RunDir(v.run_dir),
        run_id=v.run_id,
        key=v.key,
        engine=v.engine,
        cgroup=RunCgroup(path) if path is not None and path.is_dir() else None,
        live=True,
        stop=StopSettings() if kill_grace is None else StopSettings(kill_grace=kill_grace),
    )
    s = Stop(view.rd, StopKind.NOW, view=view)
    s.facts.vanished = v.run_dir
    s.kill()
    return s.finish()

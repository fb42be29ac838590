"""The phases of a run, and how a stop unwinds them.

Per item: a provider session, the post_session hooks, the verify commands, and on a
fixable verify failure a backoff and a repair session (then hooks and verify again),
up to `[repair] max_attempts`. After the queue: the post_run hooks, the engine's own
clean-up, and `run-complete`.

Every phase is journaled when it starts (`phase-start`) and when it ends, and the
state is saved before a phase starts, so a stop can be landed in a chosen phase and a
resumed run replays the phase that was interrupted.

A stop arrives as `RunStopped`, raised at a check point (see stop_controller.py), and unwinds
through every `finally` to `run()`, which records it. A command killed because the run
is stopping is classified as stopped by the registry's own record (`Result.stopped`),
never by its return code, so a stop never reads as a failure and never dispatches a
repair session.
"""

from __future__ import annotations

import os
import sys
import time

from runner import defaults
from runner import log as _log
from runner.engine.child import Result, run_child
from runner.errors import Damaged, RunStopped, disk_fault
from runner.events import Event, Mode, Origin, Outcome
from runner.exitcodes import Exit
from runner.files import captured, dirfd, stop_request
from runner.files.atomic import atomic_write_text
from runner.files.spec import substitute
from runner.files.stopped import record_stop
from runner.proc import membership, oom, reaper

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path

    from runner.engine.registry import Registry
    from runner.engine.stop_controller import StopController
    from runner.files.journal import Journal
    from runner.files.rundir import RunDir
    from runner.files.spec import CommandSpec, Spec
    from runner.files.state import State, StateStore
    from runner.proc.cgroup import RunCgroup
    from runner.proc.reaper import ReapReport

# Outcomes of one command.
PASSED, FAILED, TIMEOUT, STOPPED = Outcome.PASSED, Outcome.FAILED, Outcome.TIMEOUT, Outcome.STOPPED


def outcome(result: Result) -> Outcome:
    """Classify a finished command. Stop-aware: the registry's record that the stop
    killed it wins over whatever its return code says."""
    if result.stopped:  # ablate: stop-aware-classification
        return STOPPED  # a command killed by the stop is not a failure
    if result.timed_out:
        return TIMEOUT
    return PASSED if result.returncode == 0 else FAILED


def _how(result: Result) -> str:
    """How a failed command died, when a signal ended it (": killed by ..."), else ""."""
    if result.oom_kills:  # any process of the call, its leader or not
        return f": {oom.out_of_memory(result.oom_kills)}"
    return f": {oom.describe(result.killed_by)}" if result.killed_by else ""


def say(line: str) -> None:
    """One line in engine.log (the engine's stderr), if the disk still takes it."""
    _log.stderr_ready()
    try:
        print(f"runner engine: {line}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def cause(exc: BaseException) -> str:
    """An error on one line: what failed and, for a write, which file."""
    return " ".join(f"{type(exc).__name__}: {exc}".split())


class Phases:
    def __init__(
        self,
        rundir: RunDir,
        spec: Spec,
        *,
        store: StateStore,
        state: State,
        journal: Journal,
        registry: Registry,
        controller: StopController,
        cgroup: RunCgroup | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.rd = rundir
        self.spec = spec
        self.store = store
        self.state = state
        self.journal = journal
        self.registry = registry
        self.ctl = controller
        self.cgroup = cgroup
        self.env = dict(os.environ if env is None else env)
        # The run's membership key (rundir.RunDir.key), not the bare id: the tag says
        # which directory's run a process is.
        self.env[membership.TAG] = registry.run_id
        self._seq = 0
        self._item_index = {name: i for i, name in enumerate(spec.items)}
        self._cleaned = False
        self._output_unwritten_said = False

    # -- the run ------------------------------------------------------------------

    def run(self) -> Exit:
        """Run the queue to its end or to a stop. Returns the exit code."""
        self.journal.append(
            Event.RUN_START, run_id=self.state.run_id, attempt=self.state.attempt, items=list(self.spec.items)
        )
        try:
            try:
                for item in self.spec.items:
                    if self.state.items[item].status in ("done", "failed"):
                        continue
                    self._between_phases()
                    self._item(item)
                # The queue is done; a graceful stop lodged during the last item is still
                # honored before finalization (which a resumed run then performs).
                self._between_phases()
                return self._finalize()
            finally:
                # Whatever ends the run (a stop, a crash, the end of the queue),
                # nothing the run started outlives its engine.
                self._cleanup()
        except RunStopped as stop:
            return self._record_stop(self.ctl.as_recorded(stop))
        except Exception as exc:
            if disk_fault(exc):
                # A write failed for good (a read-only file system, or a full disk with
                # the reserve gone). The clean-up above has ended everything the run
                # started: the run is stopped, and recorded as such if the disk allows.
                self._quietly(Event.DISK_FAULT, file=getattr(exc, "filename", None), error=cause(exc), reserve="gone")
                return self._record_stop(RunStopped(self.ctl.origin or Origin.DISK, Mode.HARD))
            if self.ctl.stopping:
                # An error while a hard stop unwinds: the stop is what happened (the
                # fallback must not be blamed on the engine); the error is kept.
                import traceback

                self.journal.append(Event.ENGINE_ERROR, error=traceback.format_exc(limit=20))
                return self._record_stop(self.ctl.hard_stop())
            # A link or a stranger's file where the engine writes (dirfd.py) is damage,
            # named on one line, not a bug of the runner. Either way the cause goes on one
            # line where an operator looks: engine.log (this process's stderr) and the
            # journal (status and the foreground's last line read it).
            damaged = isinstance(exc, Damaged)
            why = f"damaged run directory: {exc}" if damaged else cause(exc)
            say(f"crashed: {why}")
            import traceback

            error = why if damaged else traceback.format_exc(limit=20)
            self.journal.append(Event.ENGINE_CRASH, error=error, cause=why)
            self.state.status = "crashed"
            self.state.exit_code = int(Exit.DAMAGED if damaged else Exit.INTERNAL)
            self._save()
            return Exit.DAMAGED if damaged else Exit.INTERNAL
        finally:
            self.ctl.discard_unhonored(stopped=self.state.stopped)

    def _record_stop(self, stop: RunStopped) -> Exit:
        """The engine is the only writer of `stopped` while it lives: state first, then
        the one run-stop of the attempt."""
        try:
            self.journal.append(Event.TEARDOWN_COMPLETE, origin=stop.origin, mode=stop.mode.label)
            record_stop(
                self.state,
                lambda _: self._save(),
                self.journal,
                origin=stop.origin,
                mode=stop.mode,
                forced=False,
                kind=self.ctl.asked,  # who asked (a runner command's request), or null: none did
            )
            self.ctl.say_disk_fault()  # the reserve these records needed, if they did
        except Exception as exc:
            if isinstance(exc, FileNotFoundError) and dirfd.gone(self.rd.path):
                # The run directory went away (removed, or half removed and sealed): no
                # record can be made there, and none is tried again.
                say(f"run {self.state.run_id} stopped (every process ended): its directory is gone, nothing recorded")
                return Exit.STOPPED
            if not disk_fault(exc):
                raise
            # Every process of the run is gone (the clean-up ran): only the record is
            # missing. Said on one line in engine.log; the stopper says it too.
            run_id = self.state.run_id
            say(f"run {run_id} stopped (every process ended), but the stop could not be recorded: {cause(exc)}")
            return Exit.NOT_RECORDED
        return Exit.STOPPED

    def _quietly(self, event: str, **fields: object) -> None:
        try:
            self.journal.append(event, **fields)
        except Exception:
            pass  # the journal may be what cannot be written

    # -- one item -----------------------------------------------------------------

    def _item(self, item: str) -> None:
        st = self.state.items[item]
        replay_repair = self.state.current_item == item and self.state.phase == "repair"
        self.state.current_item = item
        if not st.session_done:
            self._phase("session", item)
            result = self._call_provider(item, "session")
            if outcome(result) != PASSED:
                return self._item_failed(item, "session " + outcome(result) + _how(result))
            st.session_done = True
            self._save()
            self._between_phases()
        if not st.post_session_done:
            self._post_session(item)
        if replay_repair:
            self._repair(item, feedback=None, replay=True)
        while True:
            verdict, failing = self._verify(item)
            if verdict == PASSED:
                st.verify_passed = True
                st.status = "done"
                self._save()
                self.journal.append(Event.ITEM_DONE, item=item)
                return
            if failing is None or not failing[0].fixable or st.repairs >= self.spec.repair_max_attempts:
                return self._item_failed(item, f"verify {verdict}" + (_how(failing[1]) if failing else ""))
            self._between_phases()
            self._backoff(self.spec.retry_backoff)
            self._repair(item, feedback=failing[1])

    def _post_session(self, item: str) -> None:
        """The post_session hooks of the session that just ended, then durable as done."""
        self._hooks("post_session", self.spec.post_session, item)
        self.state.items[item].post_session_done = True
        self._save()
        self._between_phases()

    def _item_failed(self, item: str, reason: str) -> None:
        self.state.items[item].status = "failed"
        self._save()
        self.journal.append(Event.ITEM_FAILED, item=item, reason=reason)

    def _call_provider(self, item: str, kind: str, feedback: Path | None = None) -> Result:
        argv = substitute(self.spec.provider.command, item=item, feedback=str(feedback) if feedback else "")
        self.state.provider_calls += 1
        self.state.items[item].calls += 1
        self._save()
        self.journal.append(Event.SESSION_START, item=item, kind=kind, call=self.state.provider_calls)
        result = self._run(argv, kind, item, self.spec.provider.call_timeout, self.spec.provider.idle_timeout)
        verdict = outcome(result)
        self.journal.append(
            Event.SESSION_END,
            item=item,
            kind=kind,
            outcome=verdict,
            rc=result.returncode,
            killed_by=result.killed_by,
            oom_kills=result.oom_kills,
            duration=round(result.duration, 4),
        )
        if verdict == STOPPED:
            self.ctl.checkpoint()
        return result

    def _hooks(self, which: str, hooks: Sequence[CommandSpec], item: str | None = None) -> None:
        self._phase(which, item)
        for index, hook in enumerate(hooks):
            self.ctl.checkpoint()
            argv = substitute(hook.command, item=item or "")
            result = self._run(argv, f"{which}{index}", item, hook.timeout)
            verdict = outcome(result)
            self.journal.append(
                Event.HOOK_RESULT,
                hook=which,
                index=index,
                item=item,
                outcome=verdict,
                rc=result.returncode,
                killed_by=result.killed_by,
                oom_kills=result.oom_kills,
            )
            if verdict == STOPPED:
                for skipped in range(index + 1, len(hooks)):
                    self.journal.append(Event.HOOK_SKIPPED, hook=which, index=skipped, reason="stopped")
                self.ctl.checkpoint()

    def _verify(self, item: str) -> tuple[Outcome, tuple[CommandSpec, Result] | None]:
        """Run the verify commands in order; the first that does not pass decides."""
        self._phase("verify", item)
        for index, check in enumerate(self.spec.verify):
            argv = substitute(check.command, item=item)
            result = self._run(argv, f"verify{index}", item, check.timeout)
            verdict = outcome(result)
            if verdict != PASSED:
                self.journal.append(
                    Event.VERIFY_RESULT,
                    item=item,
                    index=index,
                    outcome=verdict,
                    rc=result.returncode,
                    killed_by=result.killed_by,
                    oom_kills=result.oom_kills,
                    fixable=check.fixable,
                )
                if verdict == STOPPED:
                    self.ctl.checkpoint()
                return verdict, (check, result)
        self.journal.append(Event.VERIFY_RESULT, item=item, index=None, outcome=PASSED)
        return PASSED, None

    def _repair(self, item: str, feedback: Result | None, replay: bool = False) -> None:
        st = self.state.items[item]
        if not replay:
            st.repairs += 1  # saved with the phase, in one write: a replay is never uncounted
        self._phase("repair", item)
        path = self._feedback_file(item, st.repairs, feedback)
        self.journal.append(Event.REPAIR_DISPATCH, item=item, attempt=st.repairs, feedback=str(path), replay=replay)
        result = self._call_provider(item, "repair", feedback=path)
        # The repair session is done: make that durable before any check point, so a
        # resumed run replays its post_session hooks and verify, never the session.
        st.post_session_done = outcome(result) != PASSED
        self.state.phase = "post_session"
        self._save()
        self._between_phases()
        if not st.post_session_done:
            self._post_session(item)

    def _feedback_file(self, item: str, attempt: int, failing: Result | None) -> Path:
        index = self.spec.items.index(item)
        path = self.rd.output / f"feedback-{index}-{attempt}.txt"
        text = ""
        if failing is not None:
            text = f"$ {' '.join(failing.argv)}\nexit {failing.returncode}\n"
            try:
                text += failing.output_path.read_text(errors="replace")[-64 * 1024 :]
            except OSError:
                pass
        if failing is not None or not path.exists():
            try:
                atomic_write_text(path, text)  # never through a link (dirfd.py)
            except OSError as exc:
                if not disk_fault(exc):
                    raise
                self._output_unwritten(str(path), f"{exc.strerror or exc}")
        return path

    def _backoff(self, seconds: float) -> None:
        self._phase("backoff", self.state.current_item)
        deadline = time.monotonic() + seconds
        while True:
            if self.ctl.graceful_pending():  # ablate: backoff-stop-check
                raise self._graceful_stop("backoff")
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self.ctl.sleep(min(defaults.BACKOFF_TICK, left))

    # -- finalization -------------------------------------------------------------

    def _finalize(self) -> Exit:
        self._hooks("post_run", self.spec.post_run)
        late_origin = self.ctl.finishing()
        self._phase("cleanup", None)
        self._cleanup()
        self.ctl.receive_late(late_origin)
        failed = [i for i, st in self.state.items.items() if st.status == "failed"]
        self.state.status = "failed" if failed else "completed"
        code = Exit.FAILED if failed else Exit.OK
        self.state.exit_code = int(code)
        self.state.current_item = None
        self._save()
        self.journal.append(Event.RUN_COMPLETE, status=self.state.status, failed=failed)
        return code

    def _kill_adopted(self) -> ReapReport | None:
        """What the engine adopted and the kills above left (a subreaper, it adopts what
        its calls double-forked, or orphaned as they exited): the run's by the kernel's
        word (Registry.adopted), whatever their tag or cgroup, so never left behind."""
        adopted = self.registry.adopted()
        if not adopted:
            return None
        return reaper.kill_everything(
            groups=[],
            pids=adopted,
            run_id=self.registry.run_id,
            tag_sweep=False,
            kill_grace=self.spec.stop.kill_grace,
            known=adopted,
        )

    def _cleanup(self) -> None:
        """The engine's own bounded clean-up: whatever the run started and left behind
        (escaped daemons, a cgroup's stragglers) is killed. Once per run."""
        if self._cleaned:
            return
        self._cleaned = True
        steps: list[Callable[[], object]] = [
            lambda: reaper.kill_tagged(
                self.registry.run_id,
                self.spec.stop.kill_grace,
                cgroup=self.cgroup,
                # What the stop's sweep found untagged is not read again: under load a
                # busy process's environment is a slow read (48 took 11 ms, measured).
                untagged=self.registry.untagged,  # ablate: cleanup-reuses-untagged
            ),
            self._kill_adopted,
            self.registry.reap_orphans,
        ]
        if self.ctl.stopping:
            steps.insert(0, lambda: self.registry.stop_all(self.ctl.origin))
        cgroup = self.cgroup
        if cgroup is not None:
            # cgroup.kill is a SIGKILL: only its confirmation needs a bound.
            steps.insert(-1, lambda: cgroup.kill("work", timeout=defaults.CONFIRM_TIMEOUT))
        for step in steps:
            # Clean-up runs in a `finally` while a stop unwinds: an error in one step
            # must neither skip the others nor replace the stop (it would read as a
            # crash and force the fallback).
            try:
                result = step()
            except Exception:
                import traceback

                self.journal.append(Event.CLEANUP_ERROR, error=traceback.format_exc(limit=5))
                continue
            unkillable = getattr(result, "unkillable", None)
            if unkillable:
                self.journal.append(Event.UNKILLABLE, pids=sorted(unkillable))
            left_running = getattr(result, "left_running", None)
            if left_running:
                self.journal.append(Event.LEFT_RUNNING, pids=sorted(left_running))
            refused = getattr(result, "refused", None)
            if refused:
                self.journal.append(Event.SIGNAL_REFUSED, by="cleanup", refused=refused)
        if cgroup is not None:
            # Nothing of the run is left to contain: the engine's way out of its cgroup
            # (engine_main removes the cgroup) starts now, beside the last writes.
            cgroup.leave_in_background()

    # -- check points -------------------------------------------------------------

    def _between_phases(self) -> None:
        """Read at the top of each item and between phases: a hard stop raises; a
        graceful one (STOP file, graceful request) raises once the phase in flight is
        done; a PAUSE file holds the run here."""
        self.ctl.checkpoint()
        if self.ctl.graceful_pending():
            raise self._graceful_stop("between-phases")
        if stop_request.pause_file(self.rd):
            self._pause()

    def _pause(self) -> None:
        self.journal.append(Event.PAUSED, item=self.state.current_item, phase=self.state.phase)
        while stop_request.pause_file(self.rd):
            self.ctl.sleep(defaults.PAUSE_POLL)
            if self.ctl.graceful_pending():  # ablate: pause-stop-check
                raise self._graceful_stop("paused")
        self.journal.append(Event.UNPAUSED)

    def _graceful_stop(self, where: str) -> RunStopped:
        return self.ctl.graceful_stop(where, item=self.state.current_item, phase=self.state.phase)

    # -- plumbing -----------------------------------------------------------------

    def _phase(self, name: str, item: str | None) -> None:
        self.state.phase = name
        self._save()
        self.journal.append(Event.PHASE_START, phase=name, item=item)

    def _run(self, argv: list[str], name: str, item: str | None, timeout: float, idle_timeout: float = 0) -> Result:
        self._seq += 1
        index = self._item_index[item] if item is not None else None
        output = self.rd.output / captured.file_name(self.state.attempt, self._seq, index, name)
        result = run_child(
            argv,
            registry=self.registry,
            name=name,
            timeout=timeout,
            idle_timeout=idle_timeout,
            env=self.env,
            output_path=output,
            cap_bytes=self.spec.output_cap_bytes,
            output_unwritten=self._output_unwritten,
            link_broken=self._link_broken,
        )
        if result.timed_out:
            which = Event.CALL_TIMEOUT if result.timed_out == "call" else Event.IDLE_TIMEOUT
            self.journal.append(which, name=name, duration=round(result.duration, 4))
        if result.reap is not None and result.reap.refused:
            self.journal.append(Event.SIGNAL_REFUSED, by=name, refused=result.reap.refused)
        # We are a subreaper: orphans of this call are re-parented to us. Reaped here,
        # between calls, through the registry (which never takes a live call's status).
        self.registry.reap_orphans()
        return result

    def _output_unwritten(self, file: str, error: str) -> None:
        """A command's output could not be written (a full disk): said once per engine,
        as it happens (a full disk would otherwise fill the journal with it). The call
        goes on; its output is counted, not kept."""
        if not self._output_unwritten_said:
            self._output_unwritten_said = True
            self.journal.append(Event.OUTPUT_UNWRITTEN, file=file, error=error)

    def _link_broken(self, file: str, links: int) -> None:
        """A backup shared a command's output file: its output went on in a copy."""
        self.journal.append(Event.LINK_BROKEN, file=file, links=links)

    def _save(self) -> None:
        self.state.updated = time.time()
        # Items change only as the current item runs: a save appends that item alone,
        # a cost that does not grow with the number of items (state.py).
        self.store.save(self.state, touched=(self.state.current_item,))

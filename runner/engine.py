"""The phases of a run, and how a stop unwinds them.

Per item: a provider session, the post_session hooks, the verify commands, and on a
fixable verify failure a backoff and a repair session (then hooks and verify again),
up to `[repair] max_attempts`. After the queue: the post_run hooks, the engine's own
clean-up, and `run-complete`.

Every phase is journaled when it starts (`phase-start`) and when it ends, and the
state is saved before a phase starts, so a stop can be landed in a chosen phase and a
resumed run replays the phase that was interrupted.

A stop arrives as `RunStopped`, raised at a check point (see stopctl.py), and unwinds
through every `finally` to `run()`, which records it. A command killed because the run
is stopping is classified as stopped by the registry's own record (`Result.stopped`),
never by its return code, so a stop never reads as a failure and never dispatches a
repair session.
"""

import os
import time
import traceback

from . import control, defaults, reaper, spec as specmod
from .child import run_child
from .errors import RunStopped
from .stopctl import ORIGINS
from .exitcodes import Exit

# Outcomes of one command.
PASSED, FAILED, TIMEOUT, STOPPED = "passed", "failed", "timeout", "stopped"


def outcome(result):
    """Classify a finished command. Stop-aware: the registry's record that the stop
    killed it wins over whatever its return code says."""
    if result.stopped:  # ablate: stop-aware-classification
        return STOPPED  # a command killed by the stop is not a failure
    if result.timed_out:
        return TIMEOUT
    return PASSED if result.returncode == 0 else FAILED


class Engine:
    def __init__(self, rundir, spec, *, store, state, journal, registry, controller, cgroup=None, env=None):
        self.rd = rundir
        self.spec = spec
        self.store = store
        self.state = state
        self.journal = journal
        self.registry = registry
        self.ctl = controller
        self.cgroup = cgroup
        self.env = dict(os.environ if env is None else env)
        self.env["RUNNER_RUN_ID"] = state.run_id
        self._seq = 0
        self._cleaned = False

    # -- the run ------------------------------------------------------------------

    def run(self):
        """Run the queue to its end or to a stop. Returns the exit code."""
        self.journal.append("run-start", run_id=self.state.run_id, attempt=self.state.attempt,
                            items=list(self.spec.items))
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
            return self._record_stop(stop)
        except Exception:
            if self.ctl.stopping:
                # An error while a hard stop unwinds: the stop is what happened (the
                # fallback must not be blamed on the engine); the error is kept.
                self.journal.append("engine-error", error=traceback.format_exc(limit=20))
                return self._record_stop(RunStopped(self.ctl.origin, "hard"))
            self.journal.append("engine-crash", error=traceback.format_exc(limit=20))
            self.state.status = "crashed"
            self.state.exit_code = int(Exit.INTERNAL)
            self._save()
            return Exit.INTERNAL
        finally:
            self._discard_unhonored()

    def _record_stop(self, stop):
        if stop.mode != "hard" and self.ctl.stopping:
            # A hard stop (signal or file) arrived while the graceful one unwound: it
            # is the stop that happened, and a hard stop is never recorded as graceful.
            stop = RunStopped(self.ctl.origin, "hard")
        self.journal.append("teardown-complete", origin=stop.origin, mode=stop.mode)
        self.state.stopped = True
        self.state.status = "stopped"
        self.state.stop_origin = stop.origin
        self.state.exit_code = int(Exit.STOPPED)
        self._save()
        self.journal.append("run-stop", origin=stop.origin, mode=stop.mode, fallback=False, forced=False)
        return Exit.STOPPED

    def _discard_unhonored(self):
        request = self._consume()
        if request is not None:
            self.journal.append("stop-request-discarded", mode=request.mode.name.lower(),
                                origin=request.origin, unreadable=request.unreadable)
        if control.stop_file(self.rd) and not self.state.stopped:
            # The operator's STOP file outlived a run that finished anyway (it was
            # created during finalization): say so; `runner resume` archives it.
            self.journal.append("stop-request-discarded", mode="graceful", origin="file",
                                file=self.rd.stop_file.name)

    def _consume(self):
        """Consume the pending request (the engine is its single consumer); a torn or
        unreadable one is journaled as such wherever it is consumed."""
        request = control.consume(self.rd)
        if request is not None and request.unreadable:
            self.journal.append("stop-request-unreadable", read_as="graceful")
        return request

    # -- one item -----------------------------------------------------------------

    def _item(self, item):
        st = self.state.items[item]
        replay_repair = self.state.current_item == item and self.state.phase == "repair"
        self.state.current_item = item
        if not st.session_done:
            self._phase("session", item)
            result = self._call_provider(item, "session")
            if outcome(result) != PASSED:
                return self._item_failed(item, "session " + outcome(result))
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
                self.journal.append("item-done", item=item)
                return
            fixable = failing is not None and failing[0].fixable
            if not fixable or st.repairs >= self.spec.repair_max_attempts:
                return self._item_failed(item, f"verify {verdict}")
            self._between_phases()
            self._backoff(self.spec.retry_backoff)
            self._repair(item, feedback=failing[1])

    def _post_session(self, item):
        """The post_session hooks of the session that just ended, then durable as done."""
        self._hooks("post_session", self.spec.post_session, item)
        self.state.items[item].post_session_done = True
        self._save()
        self._between_phases()

    def _item_failed(self, item, reason):
        self.state.items[item].status = "failed"
        self._save()
        self.journal.append("item-failed", item=item, reason=reason)

    def _call_provider(self, item, kind, feedback=None):
        argv = specmod.substitute(self.spec.provider.command, item=item,
                                  feedback=str(feedback) if feedback else "")
        self.state.provider_calls += 1
        self.state.items[item].calls += 1
        self._save()
        self.journal.append("session-start", item=item, kind=kind, call=self.state.provider_calls)
        result = self._run(argv, kind, self.spec.provider.call_timeout, self.spec.provider.idle_timeout)
        verdict = outcome(result)
        self.journal.append("session-end", item=item, kind=kind, outcome=verdict,
                            rc=result.returncode, duration=round(result.duration, 4))
        if verdict == STOPPED:
            self.ctl.checkpoint()
        return result

    def _hooks(self, which, hooks, item=None):
        self._phase(which, item)
        for index, hook in enumerate(hooks):
            self.ctl.checkpoint()
            argv = specmod.substitute(hook.command, item=item or "")
            result = self._run(argv, f"{which}{index}", hook.timeout)
            verdict = outcome(result)
            self.journal.append("hook-result", hook=which, index=index, item=item, outcome=verdict,
                                rc=result.returncode)
            if verdict == STOPPED:
                for skipped in range(index + 1, len(hooks)):
                    self.journal.append("hook-skipped", hook=which, index=skipped, reason="stopped")
                self.ctl.checkpoint()

    def _verify(self, item):
        """Run the verify commands in order; the first that does not pass decides."""
        self._phase("verify", item)
        for index, check in enumerate(self.spec.verify):
            argv = specmod.substitute(check.command, item=item)
            result = self._run(argv, f"verify{index}", check.timeout)
            verdict = outcome(result)
            if verdict != PASSED:
                self.journal.append("verify-result", item=item, index=index, outcome=verdict,
                                    rc=result.returncode, fixable=check.fixable)
                if verdict == STOPPED:
                    self.ctl.checkpoint()
                return verdict, (check, result)
        self.journal.append("verify-result", item=item, index=None, outcome=PASSED)
        return PASSED, None

    def _repair(self, item, feedback, replay=False):
        st = self.state.items[item]
        if not replay:
            st.repairs += 1  # saved with the phase, in one write: a replay is never uncounted
        self._phase("repair", item)
        path = self._feedback_file(item, st.repairs, feedback)
        self.journal.append("repair-dispatch", item=item, attempt=st.repairs, feedback=str(path),
                            replay=replay)
        result = self._call_provider(item, "repair", feedback=path)
        # The repair session is done: make that durable before any check point, so a
        # resumed run replays its post_session hooks and verify, never the session.
        st.post_session_done = outcome(result) != PASSED
        self.state.phase = "post_session"
        self._save()
        self._between_phases()
        if not st.post_session_done:
            self._post_session(item)

    def _feedback_file(self, item, attempt, failing):
        index = self.spec.items.index(item)
        path = self.rd.output / f"feedback-{index}-{attempt}.txt"
        text = ""
        if failing is not None:
            text = f"$ {' '.join(failing.argv)}\nexit {failing.returncode}\n"
            try:
                text += failing.output_path.read_text(errors="replace")[-64 * 1024:]
            except OSError:
                pass
        if failing is not None or not path.exists():
            path.write_text(text)
        return path

    def _backoff(self, seconds):
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

    def _finalize(self):
        self._hooks("post_run", self.spec.post_run)
        late_origin = self.ctl.finishing()
        self._phase("cleanup", None)
        self._cleanup()
        late = self._consume()  # ablate: late-consume
        self._journal_late(late_origin, late)
        failed = [i for i, st in self.state.items.items() if st.status == "failed"]
        self.state.status = "failed" if failed else "completed"
        code = Exit.FAILED if failed else Exit.OK
        self.state.exit_code = int(code)
        self.state.current_item = None
        self._save()
        self.journal.append("run-complete", status=self.state.status, failed=failed)
        return code

    def _journal_late(self, late_origin, late):
        """A hard stop that arrives once the queue and the post_run hooks are done is
        received late: the run is completed. Anything else consumed here (a graceful or
        unreadable request) was never honored, and says so."""
        if late_origin is not None:
            self.journal.append("stop-request-received-late", origin=late_origin, mode="hard")
        if late is None:
            return
        if late.mode == control.Mode.HARD and not late.unreadable and late_origin is None:
            self.journal.append("stop-request-received-late", origin=late.origin, mode="hard")
        else:
            self.journal.append("stop-request-discarded", mode=late.mode.name.lower(),
                                origin=late.origin, unreadable=late.unreadable)

    def _cleanup(self):
        """The engine's own bounded clean-up: whatever the run started and left behind
        (escaped daemons, a cgroup's stragglers) is killed. Once per run."""
        if self._cleaned:
            return
        self._cleaned = True
        steps = [lambda: reaper.kill_tagged(self.state.run_id, self.spec.stop.kill_grace, cgroup=self.cgroup),
                 self.registry.reap_orphans]
        if self.ctl.stopping:
            steps.insert(0, lambda: self.registry.stop_all(self.ctl.origin))
        if self.cgroup is not None:
            # cgroup.kill is a SIGKILL: only its confirmation needs a bound.
            steps.insert(-1, lambda: self.cgroup.kill("work", timeout=defaults.CONFIRM_TIMEOUT))
        for step in steps:
            # Clean-up runs in a `finally` while a stop unwinds: an error in one step
            # must neither skip the others nor replace the stop (it would read as a
            # crash and force the fallback).
            try:
                result = step()
            except Exception:
                self.journal.append("cleanup-error", error=traceback.format_exc(limit=5))
                continue
            if getattr(result, "unkillable", None):
                self.journal.append("unkillable", pids=sorted(result.unkillable))
            if getattr(result, "refused", None):
                self.journal.append("signal-refused", by="cleanup", refused=result.refused)

    # -- check points -------------------------------------------------------------

    def _between_phases(self):
        """Read at the top of each item and between phases: a hard stop raises; a
        graceful one (STOP file, graceful request) raises once the phase in flight is
        done; a PAUSE file holds the run here."""
        self.ctl.checkpoint()
        if self.ctl.graceful_pending():
            raise self._graceful_stop("between-phases")
        if control.pause_file(self.rd):
            self._pause()

    def _pause(self):
        self.journal.append("paused", item=self.state.current_item, phase=self.state.phase)
        while control.pause_file(self.rd):
            self.ctl.sleep(defaults.PAUSE_POLL)
            if self.ctl.graceful_pending():  # ablate: pause-stop-check
                raise self._graceful_stop("paused")
        self.journal.append("unpaused")

    def _graceful_stop(self, where):
        # Decide on the request actually consumed (a hard one may have merged into the
        # file since it was peeked): a hard request read here is honored as hard, since
        # the watchdog may not have polled it yet and a hard stop is never downgraded.
        consumed = self._consume()
        if consumed is not None and consumed.mode == control.Mode.HARD and not consumed.unreadable:
            self.ctl.request(consumed.origin if consumed.origin in ORIGINS else "file")
            return RunStopped(self.ctl.origin, "hard")
        if self.ctl.stopping:
            return RunStopped(self.ctl.origin, "hard")
        self.journal.append("graceful-stop", where=where, item=self.state.current_item,
                            phase=self.state.phase,
                            stop_file=control.stop_file(self.rd),
                            request=None if consumed is None else consumed.origin)
        return RunStopped("file", "graceful")

    # -- plumbing -----------------------------------------------------------------

    def _phase(self, name, item):
        self.state.phase = name
        self._save()
        self.journal.append("phase-start", phase=name, item=item)

    def _run(self, argv, name, timeout, idle_timeout=0):
        self._seq += 1
        output = self.rd.output / f"{self._seq:04d}-{name}.log"
        result = run_child(argv, registry=self.registry, name=name, timeout=timeout,
                           idle_timeout=idle_timeout, env=self.env, output_path=output,
                           cap_bytes=self.spec.output_cap_bytes)
        if result.timed_out:
            self.journal.append(f"{result.timed_out}-timeout", name=name,
                                duration=round(result.duration, 4))
        if result.reap is not None and result.reap.refused:
            self.journal.append("signal-refused", by=name, refused=result.reap.refused)
        # We are a subreaper: orphans of this call are re-parented to us. Reaped here,
        # between calls, through the registry (which never takes a live call's status).
        self.registry.reap_orphans()
        return result

    def _save(self):
        self.state.updated = time.time()
        self.store.save(self.state)

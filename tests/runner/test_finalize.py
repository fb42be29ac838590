"""Run finalization under a stop: the post_run hooks, the late request, the discarded one.

End to end: a hard stop (signal channel, then file channel) while a post_run hook is a
`trap-term` victim. At unit level: the engine built in-process exactly as
runner/engine/main.py builds it (minus signal handlers and the watchdog thread, so nothing
but the test decides when a request arrives), with requests lodged by the real writer
(runner.files.stop_request.lodge).
"""

import sys

import pytest
import runs as R

from runner.engine.phases import Phases
from runner.engine.registry import Registry
from runner.engine.stop_controller import StopController
from runner.events import Mode
from runner.exitcodes import Exit
from runner.files import stop_request
from runner.files.journal import Journal
from runner.files.rundir import RunDir
from runner.files.spec import load as load_spec
from runner.files.state import State, StateStore

KILL_GRACE = 0.3


@pytest.mark.parametrize("channel", ["signal", "file"])
def test_hard_stop_during_a_post_run_hook(runs, tmp_path, victim, stop_latency, channel):
    """Path: hard stop (`runner stop`, channel `channel`) while the first post_run hook is a
    trap-term victim: that hook is hook-result outcome "stopped" (not failed), the second
    post_run hook is journaled hook-skipped and never runs, the engine's teardown records
    the run stopped with exactly one run-stop (no fallback), within about kill_grace plus
    the watchdog poll. Ablation: drop the hook-skipped loop in engine._hooks and the
    skipped assertion goes red; drop stop-awareness in engine.outcome and the hook reads
    "failed"."""
    p = victim.prepare("trap-term")
    marker = tmp_path / "second-hook-ran"
    spec = runs.spec(
        items=("a",),
        provider=["true"],
        stop={"kill_grace": KILL_GRACE, "grace": 5.0, "channel": channel},
        post_run=[{"command": p.argv, "timeout": 60}, {"command": R.sh(': > "$1"', str(marker)), "timeout": 10}],
    )
    rd = runs.start(spec)
    R.wait_event(rd, "phase-start", phase="post_run")
    v = p.adopt(timeout=10)
    with stop_latency.measure(f"post_run hook, {channel} channel", v, bound=KILL_GRACE + 2.0):
        proc = R.runner("stop", "--run-dir", rd.path)
    assert proc.returncode == Exit.OK, (proc.returncode, proc.stderr)
    R.wait_engine_exit(rd)

    results = R.events(rd, "hook-result", hook="post_run")
    assert [(e["index"], e["outcome"]) for e in results] == [(0, "stopped")]
    assert [e["index"] for e in R.events(rd, "hook-skipped", hook="post_run")] == [1]
    assert not marker.exists()
    stops = R.events(rd, "run-stop")
    assert len(stops) == 1
    assert stops[0]["origin"] == channel and stops[0]["fallback"] is False
    assert R.events(rd, "teardown-complete")
    assert not R.events(rd, "run-complete")
    st = R.state(rd)
    assert (st.status, st.stopped, st.stop_origin) == ("stopped", True, channel)
    assert not R.tagged(rd.run_id)


class InProcessEngine:
    """The engine as runner/engine/main.py builds it, in this process; no signal handlers,
    no watchdog thread, no lock: the test is the only clock."""

    def __init__(self, tmp_path, **spec_kw):
        spec_path = R.write_spec(
            tmp_path / "spec.toml", items=("a", "b"), provider=["true"], stop={"kill_grace": KILL_GRACE}, **spec_kw
        )
        self.rd = RunDir.create(tmp_path / "run", spec_path)
        spec = load_spec(self.rd.spec)
        self.store = StateStore(self.rd.state)
        state = State.new(self.rd.run_id, spec.items)
        for item in state.items.values():  # the queue is done: only finalization is left
            item.status, item.session_done, item.post_session_done, item.verify_passed = "done", True, True, True
        self.store.save(state)
        self.journal = Journal(self.rd.journal)
        registry = Registry(self.rd.children, run_id=self.rd.run_id, kill_grace=KILL_GRACE)
        self.ctl = StopController(self.rd, registry, self.journal)
        self.engine = Phases(
            self.rd, spec, store=self.store, state=state, journal=self.journal, registry=registry, controller=self.ctl
        )

    def close(self):
        self.ctl.close()
        self.journal.close()


@pytest.fixture
def inproc(tmp_path):
    made = []

    def make(**kw):
        made.append(InProcessEngine(tmp_path, **kw))
        return made[-1]

    yield make
    for e in made:
        e.close()


def test_late_hard_request_is_received_late_and_the_run_completes(inproc):
    """Path: a hard request lodged (stop_request.lodge, the real writer) after the post_run
    hooks are done and before run-complete: _finalize consumes it once and journals
    stop-request-received-late; nothing is discarded at exit; the run is recorded
    completed (its queue is done), not stopped.
    Killed by `late-consume` (the consume in StopController.receive_late deleted)."""
    e = inproc()
    stop_request.lodge(e.rd, Mode.HARD, "signal")
    code = e.engine._finalize()
    e.engine.ctl.discard_unhonored(stopped=e.engine.state.stopped)  # what run()'s finally does at exit

    assert code == Exit.OK
    late = R.events(e.rd, "stop-request-received-late")
    assert len(late) == 1 and late[0]["origin"] == "signal" and late[0]["mode"] == "hard"
    assert not R.events(e.rd, "stop-request-discarded")
    assert not e.rd.stop_request.exists()  # consumed, exactly once
    assert len(list(e.rd.archive.glob("*stop-request.json"))) == 1
    st = R.state(e.rd)
    assert (st.status, st.stopped, st.exit_code) == ("completed", False, 0)
    assert not R.events(e.rd, "run-stop")
    assert len(R.events(e.rd, "run-complete", status="completed")) == 1


def test_request_lodged_after_the_late_consume_is_discarded(inproc):
    """Path: a request that arrives after the late consume and is still pending when the
    engine exits is journaled stop-request-discarded (run()'s finally) and consumed, so a
    resume does not meet it; the run stays completed. Ablation: delete
    StopController.discard_unhonored's consume and this goes red."""
    e = inproc()
    assert e.engine._finalize() == Exit.OK
    stop_request.lodge(e.rd, Mode.HARD, "file")
    e.engine.ctl.discard_unhonored(stopped=e.engine.state.stopped)

    discarded = R.events(e.rd, "stop-request-discarded")
    assert len(discarded) == 1 and discarded[0]["mode"] == "hard" and discarded[0]["origin"] == "file"
    assert not R.events(e.rd, "stop-request-received-late")
    assert not e.rd.stop_request.exists()
    assert R.state(e.rd).status == "completed"


def test_graceful_request_lodged_during_finalization_is_discarded(inproc):
    """Path: a graceful request lodged during finalization (after the post_run hooks; a
    graceful stop is never honored there) is unhonored when the engine exits, so it must
    be journaled stop-request-discarded with mode graceful, and the run is completed."""
    e = inproc()
    stop_request.lodge(e.rd, Mode.GRACEFUL, "file")
    assert e.engine._finalize() == Exit.OK
    e.engine.ctl.discard_unhonored(stopped=e.engine.state.stopped)

    discarded = R.events(e.rd, "stop-request-discarded")
    assert len(discarded) == 1 and discarded[0]["mode"] == "graceful"
    assert not R.events(e.rd, "stop-request-received-late")
    assert R.state(e.rd).status == "completed"


def test_graceful_stop_from_a_post_run_hook_is_journaled_discarded(runs, tmp_path):
    """Path (end to end): a post_run hook runs `runner stop --graceful` on its own run. The
    hook completes (a graceful stop lets the phase in flight finish), the run completes,
    and the graceful request, never honored, is journaled stop-request-discarded."""
    rd_path = tmp_path / "run"
    hook = [sys.executable, "-m", "runner", "stop", "--graceful", "--run-dir", str(rd_path)]
    spec = runs.spec(
        items=("a",), provider=["true"], stop={"kill_grace": KILL_GRACE}, post_run=[{"command": hook, "timeout": 30}]
    )
    rd = runs.start(spec)
    assert R.runner("wait", "--run-dir", rd.path).returncode == Exit.OK
    assert [e["outcome"] for e in R.events(rd, "hook-result", hook="post_run")] == ["passed"]
    assert R.state(rd).status == "completed"
    assert len(R.events(rd, "stop-request-discarded", mode="graceful")) == 1

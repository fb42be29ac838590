"""`runner resume`: a stopped or crashed run continues as a new attempt.

Every run here blocks in one chosen phase on a command gated by a file (`while [ -e GATE ]`,
SIGTERM ignored, so the stop has to escalate). The test stops the run while that phase is
in flight, removes the gate, resumes, and reads what the real engine recorded: the
journal, state.json and a calls file the provider itself appends `{item}` to.
"""

import os
import signal
import time

import pytest
import runs as R

from runner.events import Mode
from runner.exitcodes import Exit
from runner.files import identity_file, stop_request

KILL_GRACE = 0.3
STOP = {"kill_grace": KILL_GRACE, "grace": 5.0}

# The provider: log the call, then block while its gate exists (a session's gate or a
# repair's gate, told apart by {feedback}, empty for a session); a repair "fixes" the
# item by creating fixed-<item>, which the verify command checks.
PROVIDER = r"""
echo "$1" >> "$2"
trap "" TERM
if [ -z "$4" ]; then g="$3"; else g="$5"; fi
while [ -e "$g" ]; do sleep 0.05; done
if [ -n "$4" ]; then : > "$6/fixed-$1"; fi
exit 0
"""
# A hook or verify command: blocks while its gate exists, then exits with $2.
GATED = 'trap "" TERM; while [ -e "$1" ]; do sleep 0.05; done; exit "$2"'
FIXED = 'test -e "$1/fixed-$2"'


class Scenario:
    """A two-item run that blocks in `phase` (a gate file exists until release())."""

    def __init__(self, runs, tmp_path, phase, backoff=0.0):
        self.tmp = tmp_path
        self.calls = tmp_path / "calls"
        self.gate = tmp_path / "gate"
        self.gate.touch()
        never = str(tmp_path / "no-such-gate")

        def gate_for(name):
            return str(self.gate) if name == phase else never

        repairing = phase in ("repair", "backoff")
        if repairing:
            # Item b is already fixed: only item a needs a repair session.
            (tmp_path / "fixed-b").touch()
        provider = R.sh(
            PROVIDER, "{item}", str(self.calls), gate_for("session"), "{feedback}", gate_for("repair"), str(tmp_path)
        )
        verify = (
            [{"command": R.sh(FIXED, str(tmp_path), "{item}"), "timeout": 30}]
            if repairing
            else [{"command": R.sh(GATED, gate_for("verify"), "0"), "timeout": 30}]
        )
        self.spec = runs.spec(
            items=("a", "b"),
            provider=provider,
            stop=STOP,
            post_session=[{"command": R.sh(GATED, gate_for("post_session"), "0"), "timeout": 30}],
            verify=verify,
            post_run=[{"command": R.sh(GATED, gate_for("post_run"), "0"), "timeout": 30}],
            repair={"max_attempts": 2},
            retry={"backoff": backoff},
        )
        self.rd = runs.start(self.spec)

    def release(self):
        self.gate.unlink()

    def provider_calls(self):
        return self.calls.read_text().split() if self.calls.exists() else []


def stop(rd):
    proc = R.runner("stop", "--run-dir", rd.path)
    assert proc.returncode == Exit.OK, (proc.returncode, proc.stderr)
    R.wait_engine_exit(rd)
    assert R.state(rd).stopped


def resume_and_wait(rd):
    proc = R.runner("resume", "--run-dir", rd.path, "--detach")
    assert proc.returncode == Exit.OK, (proc.returncode, proc.stderr)
    done = R.runner("wait", "--run-dir", rd.path)
    return done.returncode


def assert_each_item_done_once(rd):
    done = [e["item"] for e in R.events(rd, "item-done")]
    assert sorted(done) == ["a", "b"], done
    st = R.state(rd)
    assert st.status == "completed" and not st.stopped
    assert {k: v.status for k, v in st.items.items()} == {"a": "done", "b": "done"}
    assert len(R.events(rd, "run-complete")) == 1


def starts(rd, phase, item):
    return len(R.events(rd, "phase-start", phase=phase, item=item))


# What each phase's stop leaves for the resumed attempt to do. `calls` is the provider's
# own log after both attempts; `replayed` is the phase that must start again for item a.
CASES = {
    # The interrupted session is replayed: a is called twice, b once.
    "session": dict(calls=["a", "a", "b"], replayed=("session", "a")),
    # The session completed: it is not run again; the hook is.
    "post_session": dict(calls=["a", "b"], replayed=("post_session", "a")),
    "verify": dict(calls=["a", "b"], replayed=("verify", "a")),
    # The repair session is replayed (not counted as a further repair attempt).
    "repair": dict(calls=["a", "a", "a", "b"], replayed=("repair", "a")),
    # The queue is done; only the post_run hook runs again.
    "post_run": dict(calls=["a", "b"], replayed=("post_run", None)),
}


@pytest.mark.parametrize("phase", sorted(CASES))
def test_resume_after_a_hard_stop_in_each_phase(runs, tmp_path, phase):
    """Path: hard stop (signal channel) while `phase` blocks, then `runner resume`: items
    done exactly once, provider calls counted, a completed session is not run again, the
    interrupted phase is replayed. Ablation: drop session_done from the state (or replay
    from the start of the item) and the calls count goes red; skip the replay and the
    phase-start count goes red."""
    case = CASES[phase]
    sc = Scenario(runs, tmp_path, phase)
    wait_phase, wait_item = case["replayed"]
    R.wait_event(sc.rd, "phase-start", phase=wait_phase, item=wait_item)
    if phase == "repair":
        R.wait_event(sc.rd, "session-start", kind="repair")
    before = starts(sc.rd, wait_phase, wait_item)
    stop(sc.rd)
    assert R.state(sc.rd).phase == phase
    sc.release()

    assert resume_and_wait(sc.rd) == Exit.OK
    assert_each_item_done_once(sc.rd)
    assert sc.provider_calls() == case["calls"]
    assert R.state(sc.rd).provider_calls == len(case["calls"])
    assert starts(sc.rd, wait_phase, wait_item) == before + 1
    if phase == "repair":
        assert R.state(sc.rd).items["a"].repairs == 1
        assert [e["replay"] for e in R.events(sc.rd, "repair-dispatch")] == [False, True]
    assert not R.tagged(sc.rd.run_id)


BACKOFF = 5.0


def test_resume_after_a_hard_stop_in_backoff(runs, tmp_path):
    """Path: hard stop during the retry backoff before a repair, then resume: the backoff is
    replayed in full and then the repair session runs once; item a is repaired once, done
    once. (The backoff cannot be gated by a file; the stop must land inside it, so it is 5 s:
    1 s was over, and the stop landed in verify, with four xdist workers at load 14, while
    the resume replays it whole, so it is not longer.)"""
    sc = Scenario(runs, tmp_path, "backoff", backoff=BACKOFF)
    R.wait_event(sc.rd, "phase-start", phase="backoff", item="a")
    stop(sc.rd)
    assert R.state(sc.rd).phase == "backoff"
    assert not R.events(sc.rd, "repair-dispatch")
    sc.release()

    t0 = time.monotonic()
    assert resume_and_wait(sc.rd) == Exit.OK
    assert time.monotonic() - t0 >= BACKOFF  # the backoff ran again, whole
    assert_each_item_done_once(sc.rd)
    assert sc.provider_calls() == ["a", "a", "b"]
    assert len(R.events(sc.rd, "phase-start", phase="backoff", item="a")) == 2
    assert R.state(sc.rd).items["a"].repairs == 1


def test_resume_after_sigkill_of_the_engine(runs, tmp_path):
    """Path: SIGKILL of the engine mid-session (no teardown, no run-stop), then resume:
    state.json is loadable, the crashed attempt's session is replayed, items done once.
    The orphaned provider is released by its gate and left to exit before the resume."""
    sc = Scenario(runs, tmp_path, "session")
    R.wait_event(sc.rd, "session-start", item="a")
    # Mid-session means the provider runs: session-start is journaled before the spawn,
    # and a SIGKILL in between would leave no call to replay.
    deadline = time.monotonic() + 10
    while sc.provider_calls() != ["a"]:
        assert time.monotonic() < deadline, sc.provider_calls()
        time.sleep(0.01)
    engine = identity_file.read(sc.rd.engine_identity)
    os.kill(engine.pid, signal.SIGKILL)
    R.wait_engine_exit(sc.rd, timeout=10)
    st = R.state(sc.rd)  # loadable after a SIGKILL
    assert st.status == "running" and not st.stopped and st.phase == "session"
    assert not R.events(sc.rd, "run-stop")
    sc.release()
    deadline = time.monotonic() + 10
    while R.tagged(sc.rd.run_id):
        assert time.monotonic() < deadline, f"orphans of the killed engine: {R.tagged(sc.rd.run_id)}"
        time.sleep(0.05)

    assert resume_and_wait(sc.rd) == Exit.OK
    assert_each_item_done_once(sc.rd)
    assert sc.provider_calls() == ["a", "a", "b"]
    assert [e["attempt"] for e in R.events(sc.rd, "run-start")] == [1, 2]


def test_resume_refused_while_the_engine_lives(runs, tmp_path):
    """Path: `runner resume` on a run whose engine holds the lock: exit REFUSED, one line,
    and the live run is untouched (still attempt 1, no resume journaled)."""
    sc = Scenario(runs, tmp_path, "session")
    R.wait_event(sc.rd, "session-start", item="a")
    proc = R.runner("resume", "--run-dir", sc.rd.path, "--detach")
    assert proc.returncode == Exit.REFUSED, (proc.returncode, proc.stderr)
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not R.events(sc.rd, "resume")
    assert R.state(sc.rd).attempt == 1
    stop(sc.rd)


def test_resume_archives_pending_control_files_and_starts_unstopped(runs, tmp_path):
    """Path: a stopped run left with a pending stop request (lodged by the real writer), a
    STOP and a PAUSE file: resume archives all three (journal control-file-archived, and
    a line each on stderr naming the file), so
    the new attempt neither stops at once nor pauses; `stopped` belongs to attempt 1 and
    attempt 2 starts with stopped false. Ablation: skip stop_request.archive_pending in
    cli._resume and this goes red (nothing archived; the pending hard request would stop
    the new attempt at once, PAUSE would hold it)."""
    sc = Scenario(runs, tmp_path, "session")
    R.wait_event(sc.rd, "session-start", item="a")
    stop(sc.rd)
    st1 = R.state(sc.rd)
    assert (st1.attempt, st1.stopped, st1.status) == (1, True, "stopped")
    stop_request.lodge(sc.rd, Mode.HARD, "file")
    sc.rd.stop_file.touch()
    sc.rd.pause_file.touch()

    proc = R.runner("resume", "--run-dir", sc.rd.path, "--detach")
    assert proc.returncode == Exit.OK, proc.stderr
    R.wait_event(sc.rd, "run-start", attempt=2)
    st2 = R.state(sc.rd)
    assert (st2.attempt, st2.stopped, st2.stop_origin) == (2, False, None)
    archived = sorted(e["file"] for e in R.events(sc.rd, "control-file-archived"))
    assert archived == ["PAUSE", "STOP", "stop-request.json"]
    # Said, one line each, naming the file (issue 42; ablation resume-says-archived).
    said = sorted(ln for ln in proc.stderr.splitlines() if ln.startswith("runner: resume archived "))
    assert [ln.split()[3] for ln in said] == ["PAUSE", "STOP", "stop-request.json"], proc.stderr
    assert all(f"into {sc.rd.archive}/" in ln for ln in said), said
    for path in (sc.rd.stop_request, sc.rd.stop_file, sc.rd.pause_file):
        assert not path.exists()
    R.wait_event(sc.rd, "session-start", item="a", call=2)  # the session runs, not a pause
    sc.release()
    assert R.runner("wait", "--run-dir", sc.rd.path).returncode == Exit.OK
    assert_each_item_done_once(sc.rd)
    assert not R.events(sc.rd, "paused")
    assert not R.events(sc.rd, "graceful-stop")
    assert len(R.events(sc.rd, "run-stop")) == 1  # attempt 1's only

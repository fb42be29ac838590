"""Edges of the stop protocol: the places where a stop could be doubled, lost,
downgraded, written by the wrong writer, or replayed twice on resume."""

import subprocess
import time

import pytest
import runs as R

from runner.exitcodes import Exit
from runner.files import identity_file, stop_request

KILL_GRACE = 0.3
STOP = {"kill_grace": KILL_GRACE, "grace": 5.0}
# Blocks (ignoring SIGTERM) while the file $1 exists, then exits 0.
GATED = 'trap "" TERM; while [ -e "$1" ]; do sleep 0.02; done'


def test_two_stop_now_at_once_record_one_run_stop(runs, victim):
    """Path: the stopper records a forced stop under the engine lock and re-reads the
    journal there: two `runner stop --now` racing each other journal one `run-stop`."""
    prepared = victim.prepare("trap-term")
    rd = runs.start(runs.spec(provider=prepared.argv, stop=STOP))
    runs.wait_event(rd, "phase-start", phase="session")
    prepared.adopt(timeout=10)
    cmd = [*R.RUNNER, "stop", "--now", "--run-dir", str(rd.path)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=30) for p in procs]
    # Which of them comes second is the machine's doing: one that joins the stop in flight
    # answers OK; one that starts once the stop is recorded (a busy machine delays one
    # start-up past the other's whole stop) finds nothing to stop, and says so. Either
    # way exactly one stop is recorded, and neither claims a stop it did not see through.
    codes = sorted(p.returncode for p in procs)
    assert codes in ([Exit.OK, Exit.OK], [Exit.OK, Exit.NO_LIVE_RUN]), outs
    for p, (_, err) in zip(procs, outs, strict=True):
        if p.returncode == Exit.NO_LIVE_RUN:
            assert "end already recorded" in err, err
    runs.wait_engine_exit(rd)
    assert len(runs.events(rd, "run-stop")) == 1, runs.events(rd, "run-stop")
    assert runs.state(rd).stopped


@pytest.mark.parametrize("flags", [["--now"], []], ids=["now", "hard"])
def test_stop_of_a_finished_run_records_nothing(runs, flags):
    """Path: the stop pipeline's record step (stop_record.record_forced_stop) refuses to
    rewrite a completed run as stopped (which would make `wait` exit STOPPED and let
    `resume` run finalization twice); `--now` and the hard stop answer alike (one path):
    no live engine, nothing alive, its end recorded: NO_LIVE_RUN."""
    rd = runs.start(runs.spec(provider=["true"]))
    assert R.runner("wait", "--run-dir", rd.path).returncode == Exit.OK
    proc = R.runner("stop", *flags, "--run-dir", rd.path)
    assert proc.returncode == Exit.NO_LIVE_RUN, proc.stderr
    assert "end already recorded" in proc.stderr, proc.stderr
    assert not runs.events(rd, "run-stop")
    assert runs.state(rd).status == "completed" and not runs.state(rd).stopped
    assert R.runner("wait", "--run-dir", rd.path).returncode == Exit.OK


def test_torn_stop_request_reads_as_graceful_and_is_journaled(runs, tmp_path):
    """Path: a torn stop-request.json (a writer that died mid-write) reads as graceful,
    never as a spurious hard stop: the session in flight completes, the run stops
    gracefully, and `stop-request-unreadable` is journaled."""
    gate = tmp_path / "gate"
    gate.write_text("")
    rd = runs.start(runs.spec(items=["a", "b"], provider=R.sh(GATED, str(gate)), stop=STOP))
    runs.wait_event(rd, "session-start", item="a")
    rd.stop_request.write_text('{"mode": "ha')  # torn: the real writer never leaves this
    time.sleep(0.3)  # several watchdog polls: a hard reading would have killed the session
    assert not runs.events(rd, "session-end")
    gate.unlink()
    runs.wait_engine_exit(rd)
    assert runs.events(rd, "session-end", item="a")[0]["outcome"] == "passed"
    assert runs.events(rd, "stop-request-unreadable")
    (stop,) = runs.events(rd, "run-stop")
    assert stop["mode"] == "graceful"
    assert not runs.events(rd, "session-start", item="b")


def test_graceful_stop_during_the_last_item_stops_before_finalization(runs, tmp_path):
    """Path: the check point between the end of the queue and finalization. A STOP file
    written during the last item stops the run before its post_run hooks (resumable);
    the resumed run performs the finalization once."""
    gate = tmp_path / "gate"
    gate.write_text("")
    marker = tmp_path / "post_run-ran"
    rd = runs.start(
        runs.spec(
            provider=R.sh(GATED, str(gate)), stop=STOP, post_run=[{"command": R.sh('echo x >> "$1"', str(marker))}]
        )
    )
    runs.wait_event(rd, "session-start", item="a")
    rd.stop_file.write_text("")
    gate.unlink()
    runs.wait_engine_exit(rd)
    assert runs.state(rd).status == "stopped" and not marker.exists()
    assert not runs.events(rd, "phase-start", phase="post_run")
    resumed = R.runner("resume", "--run-dir", rd.path)
    assert resumed.returncode == Exit.OK, resumed.stderr
    assert marker.read_text() == "x\n"
    assert runs.state(rd).status == "completed"


def test_stop_after_a_repair_session_never_replays_it(runs, tmp_path):
    """Path: a repair session's completion is saved before any check point. A STOP
    written during the repair lets it finish; the resumed run replays its post_session
    hooks and verify, and calls the provider no more (calls counted)."""
    calls, gate, fixed = tmp_path / "calls", tmp_path / "gate", tmp_path / "fixed"
    hooks = tmp_path / "hooks"
    gate.write_text("")
    # A session succeeds at once; a repair session blocks on the gate, then fixes.
    provider = R.sh(
        'echo "${1:-session}" >> "$2"; [ -z "$1" ] && exit 0; '
        'trap "" TERM; while [ -e "$3" ]; do sleep 0.02; done; : > "$4"',
        "{feedback}",
        str(calls),
        str(gate),
        str(fixed),
    )
    rd = runs.start(
        runs.spec(
            provider=provider,
            stop=STOP,
            retry={"backoff": 0},
            post_session=[{"command": R.sh('echo h >> "$1"', str(hooks))}],
            verify=[{"command": ["test", "-e", str(fixed)]}],
        )
    )
    runs.wait_event(rd, "repair-dispatch")
    rd.stop_file.write_text("")
    gate.unlink()
    runs.wait_engine_exit(rd)
    assert runs.state(rd).status == "stopped"
    assert len(calls.read_text().splitlines()) == 2  # the session and the one repair
    resumed = R.runner("resume", "--run-dir", rd.path)
    assert resumed.returncode == Exit.OK, resumed.stderr
    assert len(calls.read_text().splitlines()) == 2, calls.read_text()
    assert hooks.read_text().count("h") == 2  # after the session, and after the repair
    assert runs.state(rd).items["a"].status == "done"


def test_hard_stop_right_after_resume_is_honored_by_the_new_engine(runs, victim):
    """Path: resume removes the previous attempt's identity files, so `runner stop`
    signals the new engine (not a dead pid read as "gone") and is honored without the
    fallback."""
    gate_victim = victim.prepare("trap-term")
    rd = runs.start(runs.spec(provider=gate_victim.argv, stop=STOP))
    runs.wait_event(rd, "phase-start", phase="session")
    gate_victim.adopt(timeout=10)
    assert R.runner("stop", "--run-dir", rd.path).returncode == Exit.OK
    runs.wait_engine_exit(rd)
    assert R.runner("resume", "--run-dir", rd.path, "--detach").returncode == Exit.OK
    runs.wait_event(rd, "run-start", attempt=2)
    proc = R.runner("stop", "--run-dir", rd.path)
    assert proc.returncode == Exit.OK, proc.stderr
    runs.wait_engine_exit(rd)
    stops = runs.events(rd, "run-stop")
    assert [s["fallback"] for s in stops] == [False, False]
    assert stop_request.peek(rd) is None


def test_containment_is_said_once_in_the_journal(runs):
    """Path: the engine says, once per attempt, which containment it runs under (the
    stop's reach depends on it: only a cgroup finds a descendant that dropped its
    environment); `group` is honored as asked."""
    rd = runs.start(runs.spec(provider=["true"], stop={"containment": "group"}))
    assert R.runner("wait", "--run-dir", rd.path).returncode == Exit.OK
    (said,) = runs.events(rd, "containment")
    assert said["mode"] == "group" and said["cgroup"] is None
    assert not rd.cgroup_file.exists()


def test_resume_kills_what_a_killed_engine_left_running(runs, victim):
    """Path: `runner resume` first kills the previous attempt's leftovers (its recorded
    calls, the run's tag, the cgroup's work members), so an orphaned provider never
    works on an item beside its own replay."""
    import os
    import signal

    from runner.proc import identity, signals

    prepared = victim.prepare("trap-term")
    rd = runs.start(runs.spec(provider=prepared.argv, stop=STOP))
    runs.wait_event(rd, "phase-start", phase="session")
    orphan = identity.current(prepared.adopt(timeout=10).pid)
    engine = identity_file.read(rd.engine_identity)
    os.kill(engine.pid, signal.SIGKILL)
    assert signals.wait_gone(engine, 5.0)
    assert identity.is_running(orphan)  # the engine died without a stop: its call lives on
    proc = R.runner("resume", "--run-dir", rd.path, "--detach")
    assert proc.returncode == Exit.OK, proc.stderr
    # By pid, not by token: the replayed session is the same victim command, same token.
    assert signals.wait_gone(orphan, 5.0), "the previous attempt's call outlived the resume"
    (killed,) = runs.events(rd, "leftovers-killed")
    assert orphan.pid in killed["needed_kill"]
    # The replayed session is the prepared victim's command again: stop the run.
    assert R.runner("stop", "--now", "--run-dir", rd.path).returncode == Exit.OK


def test_the_previous_attempts_run_stop_never_counts_for_this_one(runs, tmp_path):
    """Path: journal.read_attempt (what a stopper reads) splits attempts at `resume` (journaled before the
    new engine starts) as well as at `run-start`: a stopper that finds the new engine
    dead before its run-start must record the stop, not mistake the old run-stop for it."""
    from runner.files.journal import Journal, read_attempt
    from runner.files.rundir import RunDir

    rd = RunDir.create(tmp_path / "run", runs.spec(provider=["true"]))
    with Journal(rd.journal) as journal:
        journal.append("run-start", attempt=1)
        journal.append("run-stop", origin="signal", fallback=False)
        journal.append("resume", attempt=2)
    assert [r["event"] for r in read_attempt(rd.journal)] == ["resume"]

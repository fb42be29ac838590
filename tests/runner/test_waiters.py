"""Waiters tell the truth (issue 38.3): `runner wait`, `stop --graceful --wait`, a
foreground `runner run` and the status model (`runner status`, `runner list`, the
dashboard) decide "crashed" only once no stopper is at work on the run and its record
is read. A `--now` kills the engine before it records the stop; a stopper holds its mark
(files/stoppers.py) from before its first signal until its record is written, and a
run whose engine is gone while a stopper is at work reads `stopping`.

The window between the engine's death and the record is reached by an event, not a
moment: the test holds a stopper's mark itself (as a `--now` does before it signals),
kills the engine as that `--now` would, and records the stop only once the waiter has
seen a stopper at work (a wrapper of stoppers.at_work says so). Then the waiters against
real `--now` stoppers, in the stop-modes matrix's spirit (reliability/modes.py)."""

import json
import os
import signal
import subprocess
import threading

import pytest
import runs as R

from pytest_stoplatency.kit import zoo
from reliability import modes
from runner.control import stop, waiting
from runner.dashboard import snapshot
from runner.dashboard.actions import Actions
from runner.dashboard.runs import Base
from runner.errors import Crashed
from runner.events import StopKind
from runner.exitcodes import Exit
from runner.files import identity_file, stoppers
from runner.proc import cgroup as cgroupmod

STOP = {"kill_grace": 0.2, "grace": 10.0, "containment": "group"}


def _killed_under_a_mark(runs, victim):
    """A live run whose engine is SIGKILLed (as `--now` kills it) while the test holds a
    stopper's mark on it: the window between a `--now`'s kill and its record, held open
    for as long as the test likes. Returns (run dir, the mark's descriptor)."""
    rd, _ = runs.live_trap_term(victim, stop=STOP)
    mark = stoppers.mark(rd)
    assert mark is not None, "no stopper's mark could be taken on a live run's lock"
    os.kill(identity_file.read(rd.engine_identity).pid, signal.SIGKILL)
    runs.wait_engine_exit(rd)
    return rd, mark


def test_a_waiter_reads_the_record_only_once_no_stopper_is_at_work(runs, victim, monkeypatch):
    """Path: waiting.run_outcome's wait for the stoppers' marks (stoppers.at_work), what
    `runner wait`, `stop --graceful --wait` and a foreground read a run's end with. The
    engine is dead, nothing recorded, a stopper's mark held: the waiter (wait_run, in a
    thread) sees a stopper at work and waits; the stopper's record lands (a real
    `--now` of the dead engine's run: it kills the provider and records), the mark is
    dropped, and the waiter says STOPPED, never CRASHED. Ablation:
    `waiters-wait-for-the-record` (the waiter reads the state at once: Crashed)."""
    rd, mark = _killed_under_a_mark(runs, victim)
    seen = threading.Event()
    real = stoppers.at_work

    def at_work(run_dir):
        found = real(run_dir)
        if found:
            seen.set()
        return found

    monkeypatch.setattr(stoppers, "at_work", at_work)
    got = []

    def wait():
        try:
            got.append(waiting.wait_run(rd))
        except Crashed as exc:
            got.append(exc)
        seen.set()  # (a waiter that did not wait: the test reads its answer at once)

    waiter = threading.Thread(target=wait)
    waiter.start()
    try:
        assert seen.wait(30), "the waiter neither waited nor answered"
        assert not got, f"the waiter answered before the stop was recorded: {got}"
        result = stop.stop(rd, StopKind.NOW)  # the record lands (the test's mark is still held)
        assert result.code == Exit.OK, result.lines()
        assert not got, f"the waiter answered while a stopper was still at work: {got}"
    finally:
        stoppers.unmark(mark)
        waiter.join(30)
    assert got == [Exit.STOPPED], got


def test_status_list_and_dashboard_say_stopping_until_the_record_lands(runs, victim, tmp_path):
    """Path: status.run_status with a stopper at work (status.stopper_at_work): a run whose
    engine is gone, unrecorded, while a stopper holds its mark, is `stopping` in `runner
    status --json`, `runner list --json` and the dashboard's row (not `crashed`, and not
    resumable); once the record lands and the mark is dropped, `stopped`; with no
    stopper at work and nothing recorded, `crashed`. Ablation:
    `waiters-wait-for-the-record` (crashed while the stopper is at work)."""
    rd, mark = _killed_under_a_mark(runs, victim)
    try:
        said = json.loads(runs.runner("status", "--json", "--run-dir", rd.path).stdout)
        assert (said["status"], said["stopping"], said["resumable"]) == ("stopping", True, False), said
        assert said["words"].startswith("stopping"), said["words"]
        listed = json.loads(runs.runner("list", "--json", "--runs-dir", tmp_path).stdout)
        assert [r["status"] for r in listed if r["run_dir"] == str(rd.path)] == ["stopping"], listed
        snap = snapshot.Snapshots(Base(tmp_path), Actions())
        row = {r["name"]: r for r in json.loads(snap.json())["runs"]}[rd.path.name]
        assert (row["status"], row["words"]) == ("stopping", "stopping"), row
        assert runs.runner("stop", "--now", "--run-dir", rd.path).returncode == Exit.OK
    finally:
        stoppers.unmark(mark)
    said = json.loads(runs.runner("status", "--json", "--run-dir", rd.path).stdout)
    assert said["status"] == "stopped", said
    row = {r["name"]: r for r in json.loads(snap.json())["runs"]}[rd.path.name]
    assert row["status"] == "stopped", row


def test_a_dead_engine_with_no_stopper_at_work_is_crashed(runs, victim):
    """Path: the other half of run_outcome: the engine SIGKILLed by nobody's stop (no
    mark held): `runner wait` says CRASHED at once, and the status model `crashed`."""
    rd, _ = runs.live_trap_term(victim, stop=STOP)
    os.kill(identity_file.read(rd.engine_identity).pid, signal.SIGKILL)
    runs.wait_engine_exit(rd)
    proc = runs.runner("wait", "--run-dir", rd.path)
    assert proc.returncode == Exit.CRASHED, proc.stderr
    said = json.loads(runs.runner("status", "--json", "--run-dir", rd.path).stdout)
    assert said["status"] == "crashed", said
    assert runs.runner("stop", "--run-dir", rd.path).returncode == Exit.OK  # what it left, killed


def _cgroups_available():
    return cgroupmod.resolve_containment("auto") == "cgroup"


@pytest.fixture
def matrix_work(tmp_path):
    yield tmp_path
    zoo.sweep(tmp_path / "trees")
    zoo.forget_records()


@pytest.mark.parametrize("containment", modes.CONTAINMENTS)
@pytest.mark.parametrize("waiter", modes.WAITERS)
def test_every_waiter_against_now_says_stopped(matrix_work, waiter, containment):
    """Path: the waiters against a real `runner stop --now` (modes.waiter_cell): `runner
    wait`, `stop --graceful --wait` and a foreground `runner run` exit STOPPED with the
    run stopped by `--now` (one run-stop), nothing of the run alive. One trial per cell
    here; `make soak` runs many. Ablation: `waiters-wait-for-the-record` (CRASHED, from a
    waiter that read the state before the `--now` recorded: statistically)."""
    if containment == "cgroup" and not _cgroups_available():
        pytest.skip("no writable cgroup v2 hierarchy")
    trial = modes.waiter_cell(matrix_work, waiter, containment)
    assert not trial["problems"], trial


def test_a_foreground_drops_its_own_mark_before_it_waits_for_others(runs, tmp_path):
    """Path: lifecycle._foreground closes its own stop's mark (Stop.close) before it reads
    the run's end: a foreground whose Ctrl-C began a stop, and whose engine a `--now` then
    killed, must not wait for itself. The engine is frozen (SIGSTOP: its own stop never
    runs), SIGTERM to the foreground begins its hard stop (its grace outlasts the test),
    then `--now` kills the engine and records: exit STOPPED at once (waiting for its own
    mark, it would never end)."""
    spec = runs.spec(provider=R.sh('trap "" TERM; while :; do sleep 0.05; done'), stop={**STOP, "grace": 60.0})
    proc, rd = runs.foreground(spec)
    try:
        runs.wait_event(rd, "session-start")
        os.kill(identity_file.read(rd.engine_identity).pid, signal.SIGSTOP)
        proc.send_signal(signal.SIGTERM)
        R.wait_file(rd.stop_request)  # its hard stop lodged: its mark is held from here
        now = runs.runner("stop", "--now", "--run-dir", rd.path)
        assert now.returncode == Exit.OK, now.stderr
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == Exit.STOPPED, (proc.returncode, out, err)
    assert not runs.tagged(rd.run_id)


def test_the_stoppers_mark_is_taken_and_dropped(runs, victim):
    """Unit: a stopper's mark (stoppers.mark) is seen by at_work from another open file
    while it is held, alongside the engine's own flock, and not once it is dropped; a
    run directory without `lock` has nothing to mark (and nothing is made there)."""
    rd, _ = runs.live_trap_term(victim, stop=STOP)
    assert not stoppers.at_work(rd)
    first, second = stoppers.mark(rd), stoppers.mark(rd)
    assert stoppers.at_work(rd)
    stoppers.unmark(first)
    assert stoppers.at_work(rd)  # another stopper's is still held
    stoppers.unmark(second)
    assert not stoppers.at_work(rd)
    assert runs.runner("stop", "--now", "--run-dir", rd.path).returncode == Exit.OK
    empty = runs.tmp_path / "empty"
    empty.mkdir()
    assert stoppers.mark(type(rd)(empty)) is None and os.listdir(empty) == []


def test_a_plain_stop_that_loses_its_engine_to_another_stopper_kills_what_is_left(runs, tmp_path):
    """Path: stop._stop's kill after a grace in which the engine went without recording
    anything (Stop.end_recorded), and stop_result.build's words (issue 38.7). The engine
    is frozen (its own stop never runs); a plain `runner stop` lodges its request and
    waits for it (an event: the request file); the test kills the engine as a racing
    `--now` would, and nothing records: the plain stop finds its engine gone within the
    grace, kills what is left (the provider traps SIGTERM), records the stop, exits 0
    with nothing of the run alive, and its line never says an empty "killed ()".
    Ablation: `gone-unrecorded-engine-is-dead` (exit 0 with the provider alive: red)."""
    got = tmp_path / "got-term"
    provider = R.sh('trap "echo >> \\"$1\\"" TERM; while :; do sleep 0.05; done', str(got))
    rd = runs.start(runs.spec(provider=provider, stop={**STOP, "grace": 60.0}))
    runs.wait_in_call(rd)
    engine = identity_file.read(rd.engine_identity).pid
    os.kill(engine, signal.SIGSTOP)
    plain = subprocess.Popen(
        [*R.RUNNER, "stop", "--run-dir", str(rd.path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        R.wait_file(rd.stop_request)
        os.kill(engine, signal.SIGKILL)
        out, err = plain.communicate(timeout=60)
    finally:
        if plain.poll() is None:
            plain.kill()
            plain.wait()
    left = runs.tagged(rd.run_id)
    assert plain.returncode == Exit.OK, (out, err)
    assert not left, f"exit 0 with pids {left} of the run alive: {err}"
    assert "()" not in out + err, out + err
    assert len(runs.events(rd, "run-stop")) == 1 and runs.state(rd).stopped

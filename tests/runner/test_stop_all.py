"""`runner stop --all`: every live run under a base directory, from one process, at once."""

import os
import signal
import subprocess
import time

import pytest

from reliability import faults
from runner.exitcodes import Exit
from runner.files import identity_file
from runner.proc import signals

KILL_GRACE = 20.0
STOP = {"grace": 2 * KILL_GRACE, "kill_grace": KILL_GRACE}
RUNS = 4
TOLD_WAIT = KILL_GRACE / 2
"""How long the test waits for every provider to have had its SIGTERM: half a kill grace,
so that stopped one after the other, the second run's provider cannot have had it (the
first stop waits out its kill grace first), while all at once they all have it within
moments."""


@pytest.mark.parametrize("flag", ["--now", None], ids=["now", "hard"])
def test_stop_all_stops_every_run_at_once(runs, tmp_path, flag):
    """Path: stop_all.stop_every, each run's own stop (stop_now / stop_hard) in a
    thread of its own. Four runs whose providers trap SIGTERM (and note it: faults.TOLD_TREE)
    each need one kill grace to stop: one after the other they would cost four. All at
    once, every provider has its SIGTERM while the first run's stop still waits out its
    kill grace (an event, not a time: asserted before anything of the runs is killed);
    the test then ends the providers itself, and the command stops every run, OK.
    Ablation: `stop-all-at-once` (one after the other) turns it red."""
    started = []
    for i in range(RUNS):
        told = tmp_path / f"r{i}.told"
        rd = runs.start(runs.spec(name=f"r{i}.toml", provider=faults.told_tree(told), stop=STOP), name=f"r{i}")
        runs.wait_in_call(rd)
        assert faults.told_ready(told)
        started.append((rd, told, identity_file.read(next(rd.children.glob("*.json")))))
    proc = subprocess.Popen(
        [*runs.RUNNER, "stop", "--all", *([flag] if flag else []), "--runs-dir", str(tmp_path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + TOLD_WAIT
        while not all(told.exists() for _, told, _ in started):
            assert time.monotonic() < deadline and proc.poll() is None, (
                f"SIGTERM reached only {[rd.run_id for rd, told, _ in started if told.exists()]}"
                f" of {RUNS} runs within half a kill grace: stopped one after the other?"
            )
            time.sleep(0.01)
        for _, _, leader in started:  # every stop in flight: the kill grace need not be sat out
            os.killpg(leader.pgid, signal.SIGKILL)
        out, err = proc.communicate(timeout=STOP["grace"])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == Exit.OK, err
    for rd, _, leader in started:
        assert signals.wait_gone(leader, 5), f"{rd.run_id}: provider left alive"
        assert not rd.is_live()
        assert runs.state(rd).stopped
        assert len(runs.events(rd, "run-stop")) == 1
        assert rd.run_id in out


def test_stop_all_with_no_live_run_exits_no_live_run(runs, tmp_path):
    """Path: stop_every with nothing live: one line, NO_LIVE_RUN, nothing signalled."""
    rd = runs.start(runs.spec(provider=["true"]))
    assert runs.runner("wait", "--run-dir", rd.path).returncode == Exit.OK
    proc = runs.runner("stop", "--all", "--runs-dir", tmp_path)
    assert proc.returncode == Exit.NO_LIVE_RUN
    assert proc.stderr.strip() == f"runner: no live run under {tmp_path}"


@pytest.mark.parametrize(
    "argv",
    [["--all", "--run-dir", "x"], ["--all", "--graceful", "--wait"], ["--runs-dir", "x"]],
    ids=["all-with-run-dir", "all-with-wait", "runs-dir-without-all"],
)
def test_stop_all_flag_misuse_is_one_line_bad_input(runs, argv):
    proc = runs.runner("stop", *argv)
    assert proc.returncode == Exit.BAD_INPUT
    assert len(proc.stderr.strip().splitlines()) == 1 and "--" in proc.stderr

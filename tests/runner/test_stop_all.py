"""`runner stop --all`: every live run under a base directory, from one process, at once."""

import time

import pytest

from runner.exitcodes import Exit

KILL_GRACE = 1.0
STOP = {"grace": 10.0, "kill_grace": KILL_GRACE}
RUNS = 4


def _live_runs(runs, victim, n=RUNS):
    return [runs.live_trap_term(victim, stop=STOP, name=f"r{i}") for i in range(n)]


@pytest.mark.parametrize("flag", ["--now", None], ids=["now", "hard"])
def test_stop_all_stops_every_run_in_about_one_kill_grace(runs, victim, tmp_path, flag):
    """Path: stop_all.stop_every, each run's own stop (stop_now / stop_hard) in a
    thread of its own. Four runs whose providers trap SIGTERM each need one kill grace
    (1 s) to stop; one after the other they would take at least 4 s. All at once, the
    whole command takes about one; asserted with a margin (under 3 s), not as a speed."""
    started = _live_runs(runs, victim)
    t0 = time.monotonic()
    proc = runs.runner("stop", "--all", *([flag] if flag else []), "--runs-dir", tmp_path)
    elapsed = time.monotonic() - t0
    assert proc.returncode == Exit.OK, proc.stderr
    assert elapsed < 3 * KILL_GRACE, f"{RUNS} runs took {elapsed:.2f}s: stopped one after the other?"
    for rd, v in started:
        assert v.wait_gone(5), f"{rd.run_id}: provider left alive"
        assert not rd.is_live()
        assert runs.state(rd).stopped
        assert len(runs.events(rd, "run-stop")) == 1
        assert rd.run_id in proc.stdout


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

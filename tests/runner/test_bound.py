"""`runner bound SPEC`: the hard stop's worst case, derived from the spec and the code.

A container's grace period (examples/kubernetes/job.yaml, `docker stop -t`) is computed
from it, never typed; the forced path it adds up is held to it by
test_stop_races.py::test_wedged_engine_falls_back_after_grace."""

import math

from runs import runner, write_spec

from runner import defaults
from runner.exitcodes import Exit


def test_bound_adds_grace_kill_grace_the_confirmation_and_the_lock_waits(tmp_path):
    """Path: cli._bound -> StopSpec.hard_worst_case -> events.StopKind.HARD's terms. Red
    if either [stop] key, CONFIRM_TIMEOUT or a lock wait (the request's, the record's) is
    left out of the sum, or the defaults are not the code's."""
    locks = defaults.REQUEST_LOCK_WAIT + defaults.LOCK_WAIT
    spec = write_spec(tmp_path / "s.toml", provider=["true"], stop={"grace": 3.5, "kill_grace": 0.25})
    proc = runner("bound", spec)
    assert proc.returncode == Exit.OK, proc.stderr
    assert float(proc.stdout) == 3.5 + 0.25 + defaults.CONFIRM_TIMEOUT + locks

    plain = write_spec(tmp_path / "d.toml", provider=["true"])
    worst = defaults.STOP_GRACE + defaults.KILL_GRACE + defaults.CONFIRM_TIMEOUT + locks
    assert float(runner("bound", plain).stdout) == worst
    container = runner("bound", "--container", plain)
    assert container.stdout.strip() == str(math.ceil(worst + defaults.CONTAINER_GRACE_MARGIN))


def test_bound_of_a_bad_spec_is_one_line_and_bad_input(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('items = ["a"]\n[provider]\ncommand = ["true"]\n[stop]\ngrace = -1\n')
    proc = runner("bound", bad)
    assert proc.returncode == Exit.BAD_INPUT
    assert len(proc.stderr.splitlines()) == 1 and "stop.grace" in proc.stderr
    assert proc.stdout == ""
